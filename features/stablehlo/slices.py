"""Slices of concatenated values, as XLA's simplifier leaves them: reading one piece.

The gradient of `jnp.stack` (or of any concatenate) slices the cotangent back into its
pieces, and the cotangent is usually elementwise math over the concatenated forward
value. XLA pushes each slice through that elementwise math down to the one piece it
reads, so output k's gradient recomputes only output k's expression. Without this, the
emulated fusions of a program with 16 stacked outputs held every output's expression in
every gradient fusion (sympy2jax, 16 outputs of 8 terms: 195k fused ops emulated, 27k
instructions after XLA's optimization; with it, 24k). A slice whose path reaches no
concatenate reads the whole value, and XLA computes that value once: until schema 9 every
slice of elementwise math took pieces of its own (the check that nothing was resolved
compared MLIR operand objects, which are new on each access), so a GRU's split gates
recomputed all the gate math in each half.
"""

from __future__ import annotations

from ..categories import FUSIBLE_HLO

# same-shape elementwise ops a slice passes through (slice(f(a, b)) = f(slice a, slice b))
_PASS_THROUGH = FUSIBLE_HLO - {"broadcast_in_dim", "reshape", "iota", "transpose", "slice",
                               "concatenate", "pad", "reverse", "dynamic_slice"}
_MAX_DEPTH = 64


class Piece:
    """A value XLA computes only for a slice: stands for an elementwise op of `of`,
    reading `operands` (values or other pieces) instead of its own."""

    __slots__ = ("of", "operands")

    def __init__(self, of, operands: list) -> None:
        self.of, self.operands = of, operands


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


def resolve(value, dim: int, lo: int, hi: int, passed: list, memo: dict, depth: int = 0):
    """What a slice [lo, hi) of `value` along `dim` reads once pushed down: `value`
    itself, one concatenate operand, or a `Piece` (appended to `passed` after the pieces
    it reads). `memo` keeps one piece per value and range, as XLA's CSE would."""
    key = (value, dim, lo, hi)
    if key not in memo:
        memo[key] = _resolve(value, dim, lo, hi, passed, memo, depth)
    return memo[key]


def _resolve(value, dim: int, lo: int, hi: int, passed: list, memo: dict, depth: int):
    owner = getattr(value, "owner", None)
    name = getattr(owner, "name", "")
    if depth > _MAX_DEPTH or not name.startswith("stablehlo."):
        return value
    name = name[len("stablehlo."):]
    if name == "concatenate":
        if int(owner.attributes["dimension"].value) != dim:
            return value
        start = 0
        for operand in owner.operands:
            size = operand.type.shape[dim]
            if start <= lo and hi <= start + size:
                return resolve(operand, dim, lo - start, hi - start, passed, memo, depth + 1)
            start += size
        return value
    if name not in _PASS_THROUGH or len(owner.results) != 1:
        return value
    shape = list(value.type.shape)
    # each access to `owner.operands` builds new Python objects: compare within one list
    originals = list(owner.operands)
    operands = [resolve(operand, dim, lo, hi, passed, memo, depth + 1)
                if list(getattr(operand.type, "shape", ())) == shape else operand
                for operand in originals]
    if all(new is old for new, old in zip(operands, originals)):
        return value
    piece = Piece(value, operands)
    passed.append(piece)
    return piece
