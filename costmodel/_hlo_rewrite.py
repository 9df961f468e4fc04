"""The rewrites advice proposes, made on StableHLO text instead of a trace: what the HTTP
service has. Each returns new module text for the model to predict, never a guess.

`scan_text` turns the longest run of back-to-back identical blocks of the entry function
into one `stablehlo.while` over a private function holding one block, the form JAX
lowers `lax.scan` to (see `_rewrite.as_scan` for the same rewrite on a jaxpr). Blocks are
found as on a jaxpr (`features.jaxpr`): ops equal in name, attributes and operand and
result types, the block reading the same function arguments in every repeat preferred.
`_hlo_split.inner_jit_texts` splits the entry function's calls of the user's jitted
functions into programs of their own.

The text given has passed the text guard already (features were extracted from it), so
it is parsed here without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from costmodel import _hlo_rows
from costmodel.features.jaxpr import INVARIANT_COVER_SHARE, _longest_repeat, _repeat_of_period

MAX_SCANS = 4  # as `_rewrite.MAX_SCANS`: a loop and its gradient are two runs
SCAN_BODY = "scan_body"
# A block of these only moves data (the rows of an earlier scan read back): glue, no loop.
_DATA_MOVEMENT = {"slice", "reshape", "broadcast_in_dim", "concatenate", "dynamic_slice",
                  "dynamic_update_slice", "transpose", "convert", "reverse", "constant"}


@dataclass(frozen=True)
class ScannedText:
    """The module with its unrolled runs scanned, and the first (largest) run's shape."""

    text: str
    repeats: int  # blocks in the first run scanned
    size: int     # ops per block


def scan_text(text: str, min_repeats: int) -> ScannedText | None:
    """`text` with up to `MAX_SCANS` unrolled runs of at least `min_repeats` blocks run by
    while loops, or None when none can be (no run, or its blocks do not chain)."""
    first = None
    for _ in range(MAX_SCANS):
        done = _scan_once(text, min_repeats)
        if done is None:
            break
        text = done.text
        first = first or done
    return None if first is None else ScannedText(text, first.repeats, first.size)


def _short(name: str) -> str:
    return name.partition(".")[2] if name.startswith(("stablehlo.", "func.")) else name


def _nested(op):
    """`op` and every op nested in its regions."""
    yield op
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                yield from _nested(inner.operation)


def _key(op, where: dict | None) -> tuple:
    """What makes two ops the same step of an unrolled loop; with `where`, which function
    arguments it reads too."""
    text = re.sub(r"%[^\s,:)\]]+", "%", op.get_asm(print_generic_op_form=True))
    key = (text,)
    if where is not None:
        key += tuple(where.get(v, -1) for v in op.operands)
    return key


def _find_run(ops, args) -> tuple[int, int, int]:
    """(block size, repeats, start) as `features.jaxpr.repeated_block` finds it, passing
    over runs that only move data (an earlier scan's rows stacked or read back)."""
    import numpy as np

    def codes(where):
        seen: dict = {}
        return np.array([seen.setdefault(_key(op, where), len(seen)) for op in ops],
                        dtype=np.int64)

    if len(ops) < 2:
        return 0, 0, -1
    seq = codes(None)
    inv = codes({v: i for i, v in enumerate(args)}) if args else None
    for _ in range(MAX_SCANS):
        plain = _longest_repeat(seq)
        invariant = _longest_repeat(inv) if inv is not None else (0, 0, -1)
        if invariant[0] * invariant[1] >= INVARIANT_COVER_SHARE * plain[0] * plain[1] > 0:
            plain = _repeat_of_period(seq, invariant[0])
        size, repeats, start = plain
        if repeats < 2 or not all(_short(op.name) in _DATA_MOVEMENT
                                  for op in ops[start:start + size]):
            return plain
        # glue: make its ops unlike any other and look again
        unique = -np.arange(1, size * repeats + 1) - len(ops) * _
        seq[start:start + size * repeats] = unique
        if inv is not None:
            inv[start:start + size * repeats] = unique
    return 0, 0, -1


def _io(block_ops) -> tuple[list, list]:
    """Values the ops read from outside them (in order, unique) and their results."""
    inside = set()
    for op in block_ops:
        for inner in _nested(op):
            inside.update(inner.results)
            for region in inner.regions:
                for blk in region.blocks:
                    inside.update(blk.arguments)
    inputs: list = []
    for op in block_ops:
        for inner in _nested(op):
            for v in inner.operands:
                if v not in inside and v not in inputs:
                    inputs.append(v)
    outputs = [r for op in block_ops for r in op.results]
    return inputs, outputs


def _scan_once(text: str, min_repeats: int) -> ScannedText | None:
    from costmodel.features.stablehlo import parse_module
    from costmodel.features.stablehlo.parse import entry_function, functions

    module = parse_module(text, check=False)
    funcs = functions(module)
    main = funcs[entry_function(funcs)]
    if len(main.regions[0].blocks) != 1:
        return None
    name = next(f"{SCAN_BODY}{n or ''}" for n in range(len(funcs) + 1)
                if f"{SCAN_BODY}{n or ''}" not in funcs)
    body = main.regions[0].blocks[0]
    ops = [view.operation for view in body.operations][:-1]  # the return stays
    size, repeats, start = _find_run(ops, list(body.arguments))
    if repeats < min_repeats:
        return None
    blocks = [ops[start + k * size: start + (k + 1) * size] for k in range(repeats)]
    with module.context, _location():
        if not _rewrite_run(module, main, blocks, name):
            return None
        module.operation.verify()  # raises for a module the rewrite left invalid
        return ScannedText(module.operation.get_asm(), repeats, size)


def _location():
    from jax._src.lib.mlir import ir

    return ir.Location.unknown()


def _plan(ios, repeats: int):
    """Per input of the first block: ("const", -1), ("carry", output index) or ("xs", -1);
    None when the blocks are not one chain."""
    n = len(ios[0][0])
    if any(len(inputs) != n for inputs, _ in ios):
        return None
    plan = []
    for i in range(n):
        if all(ios[k][0][i] == ios[0][0][i] for k in range(repeats)):
            plan.append(("const", -1))
            continue
        positions = []
        for k in range(1, repeats):
            outputs, value = ios[k - 1][1], ios[k][0][i]
            positions.append(next((j for j, o in enumerate(outputs) if o == value), None))
        if all(p is not None for p in positions) and len(set(positions)) == 1:
            plan.append(("carry", positions[0]))
        elif all(p is None for p in positions):
            plan.append(("xs", -1))
        else:
            return None
    return plan if any(kind == "carry" for kind, _ in plan) else None


def _top_level(op, main):
    """The op of `main`'s body that `op` is (or is nested in)."""
    op = op.operation
    while op.parent is not None and op.parent.operation != main.operation:
        op = op.parent.operation
    return op


def _rewrite_run(module, main, blocks, name: str) -> bool:
    """Replace the run of `blocks` in `main` by a while loop over a new private function
    `name` holding the first block (see the module doc). False, module untouched, when the
    blocks do not chain."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import func, hlo

    repeats = len(blocks)
    ios = [_io(block) for block in blocks]
    plan = _plan(ios, repeats)
    if plan is None:
        return False
    run = {op for block in blocks for op in block}
    first_inputs, first_outputs = ios[0]
    for i, (kind, _) in enumerate(plan):  # a per-step value made inside the run: no chain
        if kind == "xs" and any(_owner_in(ios[k][0][i], run) for k in range(repeats)):
            return False
    carried = {source for kind, source in plan if kind == "carry"}

    def outside_uses(value) -> bool:
        return any(_top_level(use.owner, main) not in run for use in value.uses)

    stacked = [j for j in range(len(first_outputs))
               if any(outside_uses(ios[k][1][j])
                      for k in range(repeats - 1 if j in carried else repeats))]
    consts = [i for i, (kind, _) in enumerate(plan) if kind == "const"]
    xs = [i for i, (kind, _) in enumerate(plan) if kind == "xs"]
    carries = [i for i, (kind, _) in enumerate(plan) if kind == "carry"]
    i32 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(32))

    def constant(value: int):
        import numpy as np

        return hlo.ConstantOp(ir.DenseElementsAttr.get(np.array(value, np.int32),
                                                       type=i32)).result

    def stacked_type(t):
        return ir.RankedTensorType.get([repeats, *ir.RankedTensorType(t).shape],
                                       ir.RankedTensorType(t).element_type)

    def one_row_type(t):
        return ir.RankedTensorType.get([1, *ir.RankedTensorType(t).shape],
                                       ir.RankedTensorType(t).element_type)

    # the block as a function: the scan's body, as JAX lowers it (`closed_call`)
    out_values = [first_outputs[plan[i][1]] for i in carries] + [first_outputs[j]
                                                                 for j in stacked]
    with ir.InsertionPoint(module.body):
        body_fn = func.FuncOp(name, ([v.type for v in first_inputs],
                                          [v.type for v in out_values]))
    body_fn.attributes["sym_visibility"] = ir.StringAttr.get("private")
    entry = body_fn.add_entry_block()

    read_as_rows = []  # per-step values read as rows of an earlier scan's stack
    with ir.InsertionPoint(blocks[0][0]):
        xs_stacks = []
        for i in xs:
            values = [ios[k][0][i] for k in range(repeats)]
            rows = _hlo_rows.rows_source(values)
            if rows is not None:
                xs_stacks.append(_hlo_rows.take_rows(*rows))
                read_as_rows += values
                continue
            xs_stacks.append(hlo.ConcatenateOp(
                [hlo.ReshapeOp(one_row_type(v.type), v).result for v in values],
                ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 0)).result)
        ys_inits = []
        for j in stacked:
            t = ir.RankedTensorType(first_outputs[j].type)
            zero = hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
                ir.RankedTensorType.get([], t.element_type), _zero(t.element_type))).result
            ys_inits.append(hlo.BroadcastInDimOp(stacked_type(t), zero,
                                                 ir.DenseI64ArrayAttr.get([])).result)
        start = constant(0)
        operands = ([first_inputs[i] for i in consts] + xs_stacks + [start]
                    + [first_inputs[i] for i in carries] + ys_inits)
        loop = hlo.WhileOp([v.type for v in operands], operands)
        n_c, n_x, n_r = len(consts), len(xs), len(carries)
        cond = loop.regions[0].blocks.append(*[v.type for v in operands])
        with ir.InsertionPoint(cond):
            limit = constant(repeats)
            hlo.ReturnOp([hlo.CompareOp(cond.arguments[n_c + n_x], limit,
                                        hlo.ComparisonDirectionAttr.get("LT"),
                                        compare_type=hlo.ComparisonTypeAttr.get("SIGNED"))
                          .result])
        step = loop.regions[1].blocks.append(*[v.type for v in operands])
        with ir.InsertionPoint(step):
            args = list(step.arguments)
            counter = args[n_c + n_x]
            zero_index = constant(0) if xs or stacked else None
            by_input = {}
            for pos, i in enumerate(consts):
                by_input[i] = args[pos]
            for pos, i in enumerate(xs):
                whole = args[n_c + pos]
                shape = ir.RankedTensorType(first_inputs[i].type).shape
                row = hlo.DynamicSliceOp(whole, [counter] + [zero_index] * len(shape),
                                         ir.DenseI64ArrayAttr.get([1, *shape])).result
                by_input[i] = hlo.ReshapeOp(first_inputs[i].type, row).result
            for pos, i in enumerate(carries):
                by_input[i] = args[n_c + n_x + 1 + pos]
            call = func.CallOp([v.type for v in out_values], name,
                               [by_input[i] for i in range(len(first_inputs))])
            results = list(call.results)
            new_ys = []
            for pos in range(len(stacked)):
                acc = args[n_c + n_x + 1 + n_r + pos]
                y = results[n_r + pos]
                rank = len(ir.RankedTensorType(y.type).shape)
                row = hlo.BroadcastInDimOp(one_row_type(y.type), y, ir.DenseI64ArrayAttr.get(
                    list(range(1, rank + 1)))).result
                new_ys.append(hlo.DynamicUpdateSliceOp(
                    acc, row, [counter] + [zero_index] * rank).result)
            one = constant(1)
            hlo.ReturnOp(args[:n_c + n_x] + [hlo.AddOp(counter, one).result]
                         + results[:n_r] + new_ys)

    # what follows the run reads the loop's results: the last carry, rows of the ys
    loop_results = list(loop.results)
    after = ir.InsertionPoint(blocks[0][0])  # right after the loop: the run goes below
    for pos, i in enumerate(carries):
        last = ios[-1][1][plan[i][1]]
        last.replace_all_uses_with(loop_results[n_c + n_x + 1 + pos])
    for pos, j in enumerate(stacked):
        ys = loop_results[n_c + n_x + 1 + n_r + pos]
        _hlo_rows.restack(ys, [ios[k][1][j] for k in range(repeats)],
                          lambda op: _top_level(op, main) not in run)
        t = first_outputs[j].type
        rank = len(ir.RankedTensorType(t).shape)
        for k in range(repeats):
            value = ios[k][1][j]
            if not outside_uses(value):
                continue
            with after:
                row = hlo.SliceOp(ys, ir.DenseI64ArrayAttr.get([k] + [0] * rank),
                                  ir.DenseI64ArrayAttr.get(
                                      [k + 1, *ir.RankedTensorType(t).shape]),
                                  ir.DenseI64ArrayAttr.get([1] * (rank + 1))).result
                replacement = hlo.ReshapeOp(t, row).result
            for use in list(value.uses):
                owner = use.owner
                if _top_level(owner, main) not in run:
                    owner.operation.replace_uses_of_with(value, replacement)
    # the other repeats go, last first, so no op goes while something still reads it
    for op in reversed([op for block in blocks[1:] for op in block]):
        if any(True for r in op.results for _ in r.uses):
            raise RuntimeError(f"{op.name} is still read after the scan rewrite")
        op.erase()
    mapping = dict(zip(first_inputs, entry.arguments))
    for op in blocks[0]:
        entry.append(op)
        for inner in _nested(op):
            for old in set(inner.operands):
                if old in mapping:
                    inner.replace_uses_of_with(old, mapping[old])
    with ir.InsertionPoint(entry):
        func.ReturnOp(out_values)
    _hlo_rows.erase_dead(read_as_rows)
    return True


def _owner_in(value, run: set) -> bool:
    from jax._src.lib.mlir import ir

    owner = value.owner
    return not isinstance(owner, ir.Block) and owner.operation in run


def _zero(element_type):
    from jax._src.lib.mlir import ir

    try:
        return ir.IntegerAttr.get(ir.IntegerType(element_type), 0)
    except ValueError:  # not an integer type
        return ir.FloatAttr.get(element_type, 0.0)
