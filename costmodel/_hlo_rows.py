"""Rows of one scan's stacked values handed to the next scan as they are, on StableHLO text
(`_hlo_rewrite.scan_text`): the gradient of an unrolled loop is two runs, scanned one after
the other, and the second reads the first's per-step values (in reverse, for a backward
pass). Sliced out row by row and stacked again, they are glue no hand-written scan has
(`_rewrite_rows` does the same on a jaxpr).
"""

from __future__ import annotations


def _name(value) -> str:
    """The name of the op that made `value` ("" for a block argument)."""
    from jax._src.lib.mlir import ir

    owner = value.owner
    return "" if isinstance(owner, ir.Block) else owner.operation.name


def _ints(attribute) -> list[int]:
    from jax._src.lib.mlir import ir

    return list(ir.DenseI64ArrayAttr(attribute))


def _row(value) -> tuple | None:
    """(array, row) when `value` is a reshape of one row of `array` along dimension 0."""
    if _name(value) != "stablehlo.reshape":
        return None
    cut = value.owner.operation.operands[0]
    if _name(cut) != "stablehlo.slice":
        return None
    op = cut.owner.operation
    array = op.operands[0]
    shape = list(array.type.shape)
    low, high = _ints(op.attributes["start_indices"]), _ints(op.attributes["limit_indices"])
    strides = _ints(op.attributes["strides"])
    if (high[0] - low[0] != 1 or any(s != 1 for s in strides) or low[1:] != [0] * len(low[1:])
            or high[1:] != shape[1:]):
        return None
    return array, low[0]


def rows_source(values: list) -> tuple | None:
    """(array, lowest row, count, reversed) when `values` are consecutive rows of one
    array (rows first, first + 1, ... or first, first - 1, ...)."""
    rows = [_row(value) for value in values]
    if not rows or any(row is None for row in rows):
        return None
    array, first = rows[0]
    step = rows[1][1] - first if len(rows) > 1 else 1
    if step not in (1, -1) or any(a != array or row != first + k * step
                                  for k, (a, row) in enumerate(rows)):
        return None
    low = first if step == 1 else first - len(rows) + 1
    return array, low, len(rows), step == -1


def take_rows(array, low: int, count: int, backwards: bool):
    """Rows `low` to `low + count` of `array` (reversed when `backwards`), made at the
    current insertion point."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    shape = list(ir.RankedTensorType(array.type).shape)
    if (low, count) != (0, shape[0]):
        array = hlo.SliceOp(array, ir.DenseI64ArrayAttr.get([low] + [0] * (len(shape) - 1)),
                            ir.DenseI64ArrayAttr.get([low + count, *shape[1:]]),
                            ir.DenseI64ArrayAttr.get([1] * len(shape))).result
    if backwards:
        array = hlo.ReverseOp(array, ir.DenseI64ArrayAttr.get([0])).result
    return array


def restack(ys, values: list, is_outside) -> None:
    """Each concatenate (outside the run: `is_outside(op)`) that stacks two or more of
    `values` in a row, each reshaped to one row (an earlier scan's stacked input), made
    to read them as rows of `ys`, the loop's stack of them; its reshapes go."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    step_of = {}
    for k, value in enumerate(values):
        for use in value.uses:
            owner = use.owner.operation
            if owner.name == "stablehlo.reshape" and is_outside(owner):
                step_of[owner] = k
    concats = []
    for reshape in step_of:
        for use in reshape.results[0].uses:
            owner = use.owner.operation
            if (owner.name == "stablehlo.concatenate" and owner not in concats
                    and ir.IntegerAttr(owner.attributes["dimension"]).value == 0):
                concats.append(owner)
    for concat in concats:
        ks = [step_of.get(operand.owner.operation) if _name(operand) == "stablehlo.reshape"
              else None for operand in concat.operands]
        at, count, direction = _longest_run(ks)
        if count < 2:
            continue
        low = ks[at] if direction == 1 else ks[at] - count + 1
        operands = list(concat.operands)
        with ir.InsertionPoint(concat):
            rows = take_rows(ys, low, count, direction == -1)
            parts = operands[:at] + [rows] + operands[at + count:]
            new = rows if len(parts) == 1 else hlo.ConcatenateOp(parts, ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), 0)).result
        concat.results[0].replace_all_uses_with(new)
        concat.erase()
        erase_dead(operands[at:at + count])


def _longest_run(ks: list) -> tuple[int, int, int]:
    """(start, length, +1 or -1) of the longest run of consecutive steps in `ks`."""
    best = (0, 0, 1)
    for at, first in enumerate(ks):
        if first is None:
            continue
        for direction in (1, -1):
            count = 1
            while at + count < len(ks) and ks[at + count] == first + direction * count:
                count += 1
            if count > best[1]:
                best = (at, count, direction)
    return best


def erase_dead(values: list) -> None:
    """Erase the op making each of `values` once nothing reads it, and the slice it
    reshaped once nothing reads that either."""
    for value in values:
        if _name(value) == "" or any(True for _ in value.uses):
            continue
        op = value.owner.operation
        source = op.operands[0] if op.name == "stablehlo.reshape" else None
        op.erase()
        if (source is not None and _name(source) == "stablehlo.slice"
                and not any(True for _ in source.uses)):
            source.owner.operation.erase()
