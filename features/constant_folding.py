"""Work done at compile time: ops computed from constants alone.

Two stages fold them. Before XLA sees the module, the conversion from StableHLO runs
StableHLO's target-independent optimization pass, whose folders compute ops whose operands
are literal constants of the same function (or splats, or such folds) one element at a
time in arbitrary-precision floats (a stack of such a compile, jax 0.10.2:
`FoldSineOpPattern` under `ConvertStablehloToHlo`): a 28-op program whose two captured
constants are multiplied took 14.5 s; here the sum of two 2048x2048 tables added about
0.7 s, none of it inside XLA's passes. They do not look through calls: a multiply of a
captured table inside a nested jit cost an eighth of the same multiply outside it. What is
left, XLA's constant-folding pass runs through its HLO interpreter: every instruction whose
operands are constants, or broadcasts of constants with at least one plain constant among
them, once calls are inlined. It hands a plain (m, k) x (k, n) product in a type it
computes as float32 to a matrix library (a 2048^3 product: about 0.5 s), as it does
whatever XLA rewrites into one first; any other dot (transposed, batched, matrix-vector,
float64, integer) it evaluates one multiply-add at a time, 150-250 times slower per flop
(`contractions.evaluator_library_dot`), and every convolution too, at about an eighth of
that dot's cost per multiply-add. It evaluates elementwise ops many times faster than the
StableHLO folders (`EVALUATOR_SHARE`). It leaves broadcasts and iotas alone (folding them
only grows constants), never evaluates random, side-effecting or control-flow ops, and
skips an instruction whose result or operands exceed 45M elements. Per element, op kinds
differ (`KIND_COST_*`): converts and reshapes cost nearly nothing in either stage, a
transpose more than a multiply, a pad (XLA's alone) five multiplies, and a reduction whose
body does more than add about a hundred (it runs the body as a computation per element).
An elementwise op of broadcast constants alone is not folded: XLA's simplifier sinks it
below the broadcast (where at most one is of an array; on XLA:CPU, which simplifies and
folds to a fixpoint, any), so what reads it folds as if reading a broadcast constant; but
a reduction of every dimension of a broadcast scalar it simplifies away.

The walk follows constants through calls (a callee folds where its arguments are
constants at that call site, as after inlining) and into loops (a constant a loop
carries unchanged is sunk into its body), and looks inside loop bodies and branches for
folds of their own, counted once: the pass folds a body, not each trip.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .categories import _ELEMENTWISE_HLO

# Ops the pass never evaluates (or that produce no constant XLA would materialize).
NEVER_FOLDED = frozenset({
    "broadcast_in_dim", "broadcast", "dynamic_broadcast_in_dim", "iota", "rng",
    "rng_bit_generator", "custom_call", "while", "case", "if", "infeed", "outfeed",
    "send", "recv", "after_all", "create_token", "fft", "optimization_barrier",
    "all_reduce", "all_gather", "all_to_all", "reduce_scatter", "collective_permute",
    "partition_id", "replica_id", "tuple", "get_tuple_element",
})
# Ops the StableHLO folders leave to XLA's interpreter (nor is anything computed from
# them a literal constant before XLA).
STABLEHLO_UNFOLDED = frozenset({
    "dot_general", "dot", "convolution", "reduce", "reduce_window", "select_and_scatter",
    "scatter", "gather", "dynamic_slice", "dynamic_update_slice", "sort", "map",
    "cholesky", "triangular_solve", "pad",
})
# XLA's limit: bigger results or operands are left for run time.
MAX_FOLD_ELEMENTS = 45_000_000
# What an element costs XLA's interpreter, as a share of what it costs the StableHLO
# folders: on jax 0.10.2 (`bench/archive/fold_stages.py`: 18.6 against 137.8 ns per element),
# elementwise ops on a folded 2048^3 matrix product against the same ops on captured
# 2048x2048 tables.
EVALUATOR_SHARE = 0.135
# What an element touched costs by op kind, against a multiply's in the same stage; kinds
# not named cost what a multiply does. Rounded from two runs of `bench/archive/fold_kinds.py` (jax
# 0.10.2, 4096x4096 tables): converts, reshapes, slices and concatenates move data for
# 0.0-0.2 of a multiply; tanh, exp and divide cost 1.5-3 multiplies before XLA but about
# one in its interpreter, where a pad costs five. `*_multiply_add`: one multiply-add of a
# dot or convolution the interpreter evaluates itself (`bench/archive/fold_dot_paths.py`).
KIND_COST_BEFORE_XLA = {
    "divide": 2.7, "tanh": 2.3, "exponential": 1.8, "transpose": 1.4, "reverse": 0.25,
    "convert": 0.02, "reshape": 0.02, "slice": 0.1, "concatenate": 0.03,
}
KIND_COST_IN_XLA = {
    "tanh": 1.5, "exponential": 1.5, "transpose": 1.3, "reverse": 1.9, "pad": 5.0,
    "convert": 0.05, "reshape": 0.05, "slice": 0.2, "concatenate": 0.2,
    "dot_multiply_add": 2.0, "convolution_multiply_add": 0.25,
    # per element read (`bench/archive/fold_reductions.py`): a reduction whose body only
    # adds is cheap; any other body the interpreter runs as a computation per element,
    # twice over when the result is a scalar, four times with two inputs (an argmax); a
    # window reduction whatever its body
    "reduce_other": 100.0, "reduce_to_scalar": 200.0, "reduce_variadic": 400.0,
    "reduce_window": 120.0,
}
# What a value is to the walk: a constant, a broadcast of one (of a scalar, or of an
# array), or another foldable operand that is never folded itself (an iota).
CONSTANT, SPLAT_SCALAR, SPLAT, BROADCAST = 1, 2, 3, 4
# Elementwise ops (and reshapes, transposes) XLA's simplifier moves below a broadcast of a
# constant: on broadcasts alone, the result is a broadcast too (`abs` of `jnp.zeros`).
SUNK_THROUGH_BROADCASTS = frozenset(_ELEMENTWISE_HLO | {"reshape", "transpose"})


@dataclass
class Folds:
    """What constant folding evaluates: ops, interpreter work, bytes it materializes."""

    ops: int = 0
    # per op: elements read or written, weighted by the op's kind in its stage
    # (`KIND_COST_*`) and, in XLA's interpreter, by `EVALUATOR_SHARE`; a dot or
    # convolution the interpreter evaluates itself: its multiply-adds, weighted so
    elements: float = 0.0
    dot_flops: float = 0.0  # dots the interpreter hands to its matrix library
    bytes: int = 0

    def add(self, other: Folds) -> None:
        self.ops += other.ops
        self.elements += other.elements
        self.dot_flops += other.dot_flops
        self.bytes += other.bytes

    def features(self) -> dict[str, float]:
        """The fold_* features these folds give."""
        return {"fold_ops": self.ops, "fold_elements": self.elements,
                "fold_dot_flops": self.dot_flops, "fold_bytes": self.bytes}


# (op, short name) -> (flops, whether the interpreter hands it to its matrix library) of
# a dot or convolution, None for any other op
DotFlops = Callable[[object, str], "tuple[float, bool] | None"]


class ConstantFolding:
    """Folds of a module's functions, memoized per (function, what each argument is).

    `tensor` decodes an MLIR type to an object with `.elements` and `.nbytes` (or None);
    `dot_flops` gives a dot's or convolution's flops and whether the interpreter calls a
    library for it (`contractions.dot_flops`).
    """

    def __init__(self, funcs: dict, tensor: Callable, dot_flops: DotFlops,
                 on_fold: Callable[[object, Folds], None] | None = None,
                 ops: dict | None = None, key: Callable | None = None,
                 fixpoint: bool = True) -> None:
        self.funcs = funcs
        # XLA's simplifier sinks an op below broadcasts when at most one is of an array.
        # XLA:CPU runs it and folding to a fixpoint, so a product of broadcast arrays that
        # folds to equal elements (zeros) is a broadcast again by the next round: there
        # (`fixpoint`) any op of broadcasts alone is counted as one (an LP's objective of
        # zeros rescaled ten times: ten folded reductions on CPU, one or two on a TPU)
        self._fixpoint = fixpoint
        self._tensor = tensor
        self._dot_flops = dot_flops
        self._memo: dict = {}
        # told (op, its own folds) of each op folded: where blame charges the folds
        self._on_fold = on_fold
        # block -> its ops as the StableHLO walk read them (`Walker.ops`), read again
        # here rather than asked of the bindings a second time, values as the ints the
        # walk keyed them by (`key`: a value's int, e.g. a block argument's; none: the
        # records hold the values themselves)
        self._ops = ops or {}
        self._key = key or (lambda value: value)
        self._short: dict[str, str] = {}  # op name -> its last part

    def function(self, name: str, constant_args: tuple[int, ...] = ()) -> tuple[Folds, tuple]:
        """Folds inside `name`, and what each of its results is (`constant_args`: what each
        argument is, `CONSTANT` (or True), `SPLAT_SCALAR`, `SPLAT`, `BROADCAST` or 0; none
        is a literal constant to the StableHLO folders, which fold each function on its
        own)."""
        key = (name, tuple(int(flag) for flag in constant_args))
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = (Folds(), ())  # a recursive call folds nothing
        folds, returned = Folds(), ()
        for region in self.funcs[name].regions:
            for block in region.blocks:
                forms = {self._key(arg): int(flag)
                         for arg, flag in zip(block.arguments, constant_args) if flag}
                constant = {arg for arg, form in forms.items() if form == CONSTANT}
                returned = self._block(block, constant, set(), folds, forms)
        self._memo[key] = (folds, returned)
        return self._memo[key]

    def _block(self, block, constant: set, literal: set, folds: Folds,
               forms: dict | None = None) -> tuple:
        """Add the folds of `block` to `folds`; returns what each value it returns is (as
        `function`'s arguments say it).

        `constant` holds the values known to be constants, `literal` those of them the
        StableHLO folders see as constants (both extended in place); `forms`, what the
        block's arguments are (broadcasts among them).
        """
        from jax._src.lib.mlir import ir

        returned: tuple = ()
        # foldable operands never folded themselves: broadcasts of constants (and ops sunk
        # below them), iotas -> SPLAT_SCALAR, SPLAT or BROADCAST
        broadcast = {value: form for value, form in (forms or {}).items() if form > CONSTANT}

        def splat(value) -> bool:
            return broadcast.get(value) in (SPLAT, SPLAT_SCALAR)

        def scalar(value) -> bool:
            return broadcast.get(value) == SPLAT_SCALAR

        def form_of(value) -> int:
            return CONSTANT if value in constant else broadcast.get(value, 0)

        short = self._short
        for op, full, operands, results, has_regions in self._records(block):
            name = short.get(full)
            if name is None:
                name = short[full] = full.rsplit(".", 1)[-1]
            if full in ("func.return", "stablehlo.return"):
                returned = tuple(form_of(value) for value in operands)
                continue
            if name == "constant":
                constant.update(results)
                literal.update(results)
                continue
            if name == "call":
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                if callee in self.funcs:
                    sub, flags = self.function(callee, tuple(map(form_of, operands)))
                    folds.add(sub)
                    for result, flag in zip(results, flags):
                        if flag == CONSTANT:
                            constant.add(result)
                        elif flag:
                            broadcast[result] = flag
                continue
            if name in ("broadcast_in_dim", "broadcast") and (
                    operands[0] in constant or splat(operands[0])):
                source = self._tensor(op.operands[0].type)
                one = scalar(operands[0]) or (source is not None and not source.shape)
                broadcast.update(dict.fromkeys(results, SPLAT_SCALAR if one else SPLAT))
                if operands[0] in literal:
                    literal.update(results)
                continue
            if name == "iota":
                broadcast.update(dict.fromkeys(results, BROADCAST))
                continue
            if (name in SUNK_THROUGH_BROADCASTS and operands
                    and all(map(splat, operands))
                    and (self._fixpoint or sum(not scalar(value) for value in operands) <= 1)):
                one = all(map(scalar, operands))
                broadcast.update(dict.fromkeys(results, SPLAT_SCALAR if one else SPLAT))
                if all(value in literal for value in operands):
                    literal.update(results)
                continue
            if name == "reduce" and self._reduces_a_scalar_broadcast(op, operands, scalar):
                constant.update(results)  # simplified to an op on the scalar: no fold
                continue
            if (name not in NEVER_FOLDED and not constant.isdisjoint(operands)
                    and all(v in constant or v in broadcast for v in operands)):
                ins = [self._tensor(value.type) for value in op.operands]
                outs = [self._tensor(value.type) for value in op.results]
                if _within_limit(ins + outs):
                    contraction = self._dot_flops(op, name)
                    before_xla = name not in STABLEHLO_UNFOLDED and all(
                        value in literal for value in operands)
                    flops = 0.0
                    if contraction is None:
                        kind = _reduction_kind(op, outs) if name == "reduce" else name
                        elements = elements_touched(ins, outs) * element_cost(kind, before_xla)
                    elif contraction[1]:
                        elements, flops = 0.0, contraction[0]
                    else:  # one multiply-add at a time
                        elements = contraction[0] / 2 * element_cost(
                            f"{name if name == 'convolution' else 'dot'}_multiply_add", False)
                    own = Folds(1, elements, flops,
                                sum(info.nbytes for info in outs if info is not None))
                    folds.add(own)
                    if self._on_fold is not None:
                        self._on_fold(op, own)
                    constant.update(results)
                    if before_xla:
                        literal.update(results)
                    continue  # a folded op's regions (a reduction's body) fold with it
            if not has_regions:
                continue
            carried = _sunk_constants(op, constant, self._key) if name == "while" else ()
            for region in op.regions:  # loop bodies and branches fold on their own
                for inner in region.blocks:
                    # a sunk constant is XLA's doing: no literal to the StableHLO folders
                    self._block(inner, {self._key(arg) for arg, flag
                                        in zip(inner.arguments, carried) if flag}, set(), folds)
        return returned

    def _reduces_a_scalar_broadcast(self, op, operands: list, scalar: Callable) -> bool:
        """A reduction of every dimension of broadcasts of one scalar each (`scalar`)."""
        inputs = operands[:len(operands) // 2]
        outs = [self._tensor(result.type) for result in op.results]
        return (bool(inputs) and all(map(scalar, inputs))
                and all(info is not None and not info.shape for info in outs))

    def _records(self, block) -> list:
        """(op, its name, operands, results, whether it has regions) of each op of
        `block`."""
        found = self._ops.get(block)
        if found is not None:
            return found
        return [(op, op.name, list(op.operands), list(op.results), bool(len(op.regions)))
                for op in (view.operation for view in block.operations)]


def folds_to_fixpoint(backend: str | None) -> bool:
    """Whether `backend`'s compiler simplifies and folds to a fixpoint (XLA:CPU): the
    `fixpoint` of `ConstantFolding`."""
    return backend == "cpu"


def element_cost(name: str, before_xla: bool) -> float:
    """What folding an element an op of kind `name` touches costs, in elements of a
    multiply folded before XLA."""
    if before_xla:
        return KIND_COST_BEFORE_XLA.get(name, 1.0)
    return KIND_COST_IN_XLA.get(name, 1.0) * EVALUATOR_SHARE


def _reduction_kind(op, outs: list) -> str:
    """A folded reduction's cost kind (`KIND_COST_IN_XLA`): "reduce" when its body only
    adds, else by how many inputs it reduces and whether to a scalar."""
    body = [inner.operation.name for inner in op.regions[0].blocks[0].operations]
    if body[:-1] and all(name == "stablehlo.add" for name in body[:-1]):
        return "reduce"
    if len(op.results) > 1:
        return "reduce_variadic"
    rank0 = all(info is not None and not info.shape for info in outs)
    return "reduce_to_scalar" if rank0 else "reduce_other"


def _sunk_constants(while_op, constant: set, key: Callable) -> list[bool]:
    """Which of a loop's carried values are constants inside it: a constant the body
    passes through unchanged, which XLA sinks into the body before folding (JAX carries
    a loop body's captured constants this way)."""
    body = while_op.regions[1].blocks[0]
    terminator = body.operations[-1].operation
    passed = [out == arg for out, arg in zip(terminator.operands, body.arguments)]
    return [key(value) in constant and same for value, same in zip(while_op.operands, passed)]


def _within_limit(infos: list) -> bool:
    sizes = [info.elements for info in infos if info is not None]
    return max(sizes, default=0) <= MAX_FOLD_ELEMENTS


def elements_touched(infos_in: list, infos_out: list) -> float:
    """Interpreter work of an op that is not a dot or convolution: elements read or
    written, whichever is more (a reduction reads many and writes few)."""
    read = sum(info.elements for info in infos_in if info is not None)
    written = sum(info.elements for info in infos_out if info is not None)
    return float(max(read, written))
