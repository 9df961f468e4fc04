"""Rows of one scan's stacked values handed to the next scan as they are, on a jaxpr
(`_rewrite.as_scan`): the gradient of an unrolled loop is two runs, scanned one after the
other, and the second reads the first's per-step values (in reverse, for a backward
pass). Sliced out row by row and stacked again, they are glue no hand-written scan has
(`_hlo_rows` does the same on StableHLO text).
"""

from __future__ import annotations


def _rows_of(eqns, values: list) -> tuple | None:
    """(array, first row, step) when `values` are rows first, first + step, ... (step 1
    or -1) of one array, each taken by a `slice` then a `squeeze` among `eqns`."""
    made = {v: eqn for eqn in eqns for v in eqn.outvars}
    found = []
    for value in values:
        squeeze = made.get(value)
        if squeeze is None or squeeze.primitive.name != "squeeze":
            return None
        cut = made.get(squeeze.invars[0])
        if (cut is None or cut.primitive.name != "slice" or squeeze.params["dimensions"] != (0,)
                or any(stride != 1 for stride in cut.params["strides"] or ())):
            return None
        shape = cut.invars[0].aval.shape
        lo, hi = cut.params["start_indices"], cut.params["limit_indices"]
        if hi[0] - lo[0] != 1 or any(
                a != 0 or b != n for a, b, n in zip(lo[1:], hi[1:], shape[1:])):
            return None
        found.append((cut.invars[0], lo[0]))
    array, first = found[0]
    step = 1 if len(found) < 2 else found[1][1] - first
    if step not in (1, -1) or any(a is not array or row != first + k * step
                                  for k, (a, row) in enumerate(found)):
        return None
    return array, first, step


def _read_rows(read, rows: tuple, count: int, in_reverse: bool = False):
    """The `count` rows `_rows_of` found, as one array (reversed when they run backwards,
    unless a scan runs over it `in_reverse`)."""
    from jax import lax

    array, first, step = rows
    value = read(array)
    low = first if step == 1 else first - count + 1
    if (low, count) != (0, value.shape[0]):
        value = lax.slice_in_dim(value, low, low + count)
    return value if step == 1 or in_reverse else lax.rev(value, (0,))


def _restacks(eqns, steps: list[list]) -> dict:
    """{index in `eqns` of a `stack` that stacks a run of two or more of one of `steps`'
    lists, in order or reversed, with other values either side: (which list, where the
    run starts among its operands, its length, its first step, whether reversed)}."""
    found = {}
    for n, eqn in enumerate(eqns):
        if eqn.primitive.name != "stack" or eqn.params.get("axis", 0) != 0:
            continue
        for position, values in enumerate(steps):
            step_of = {id(v): k for k, v in enumerate(values)}
            ks = [step_of.get(id(v)) for v in eqn.invars]
            best = (0, 0, 0, False)
            for at in range(len(ks)):
                for direction in (1, -1):
                    count = 0
                    while (at + count < len(ks) and ks[at] is not None
                           and ks[at + count] == ks[at] + direction * count):
                        count += 1
                    if count > best[1]:
                        best = (at, count, ks[at], direction < 0)
            at, count, first, backwards = best
            if count >= 2:
                found[n] = (position, at, count, first - count + 1 if backwards else first,
                            backwards)
                break
    return found


def _restack(ys, at: int, count: int, low: int, backwards: bool):
    """What `_eval_eqns` binds for a `stack` `_restacks` found: the run's rows taken from
    the scan's stacked output `ys` as one slice, the operands either side stacked to it."""
    import jax.numpy as jnp
    from jax import lax

    def stack(*operands):
        rows = lax.slice_in_dim(ys, low, low + count)
        if backwards:
            rows = lax.rev(rows, (0,))
        parts = [*(v[None] for v in operands[:at]), rows,
                 *(v[None] for v in operands[at + count:])]
        return parts[0] if len(parts) == 1 else jnp.concatenate(parts)
    return stack


def _live(eqns, needed, reads: dict | None = None) -> list:
    """The equations of `eqns` whose results `needed` (or later live equations) read;
    `reads`: {id(eqn): the vars it reads} where not its operands."""
    from jax.extend.core import Literal

    needed = set(needed)
    kept = []
    for eqn in reversed(eqns):
        if eqn.effects or any(v in needed for v in eqn.outvars):
            kept.append(eqn)
            needed.update(v for v in (reads or {}).get(id(eqn), eqn.invars)
                          if not isinstance(v, Literal))
    return kept[::-1]
