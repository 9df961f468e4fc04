"""Slices of concatenates, as XLA's simplifier leaves them: reading the one operand.

A slice taken straight from a concatenate (through nested concatenates) that falls within
one operand reads that operand; XLA's simplifier rewrites it so. A slice of anything else,
elementwise math over a concatenate included, reads the whole value. Until schema 10 the
emulator pushed slices through elementwise math down to the piece they read, and XLA does
not (jax 0.10.2): `(concatenate([x + 1, exp(x) * 2]) * 3)[:n]` compiles to one fusion
holding the exp, and the gradient of a `jnp.stack` of 4 sympy2jax outputs slices the
materialized stack instead of recomputing each output's expression in its own gradient
fusions (4 outputs of 32 terms: 78.8k fused ops emulated with the push, 14.4k without;
XLA's fusions hold 10.8k).
"""

from __future__ import annotations

_MAX_DEPTH = 64


def sliced_dimension(value, slice_op) -> tuple[int, int, int] | None:
    """(dimension, start, limit) of a unit-stride slice of `value` along one dimension."""
    try:
        starts = [int(v) for v in slice_op.attributes["start_indices"]]
        limits = [int(v) for v in slice_op.attributes["limit_indices"]]
        strides = [int(v) for v in slice_op.attributes["strides"]]
        shape = list(value.type.shape)
    except (KeyError, AttributeError, ValueError, TypeError):
        return None
    dims = [d for d in range(len(shape)) if (starts[d], limits[d]) != (0, shape[d])]
    if len(dims) != 1 or strides[dims[0]] != 1:
        return None
    return dims[0], starts[dims[0]], limits[dims[0]]


def resolve(value, dim: int, lo: int, hi: int):
    """What a slice [lo, hi) of `value` along `dim` reads: the operand of a concatenate
    along `dim` that holds the whole range (followed through nested concatenates), or
    `value` itself."""
    for _ in range(_MAX_DEPTH):
        owner = getattr(value, "owner", None)
        if getattr(owner, "name", "") != "stablehlo.concatenate" \
                or int(owner.attributes["dimension"].value) != dim:
            return value
        start = 0
        for operand in owner.operands:
            size = operand.type.shape[dim]
            if start <= lo and hi <= start + size:
                value, lo, hi = operand, lo - start, hi - start
                break
            start += size
        else:
            return value
    return value
