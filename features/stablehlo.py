"""StableHLO features: walk the MLIR module (never regex over text).

The walk visits every op of every function once, keeps per-function tallies, and then
combines them along the call graph the way XLA sees the program after inlining
(`hlo_ops_inlined`) and after running loops (`hlo_ops_trip_weighted`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from .categories import EXPENSIVE_HLO, FUSIBLE_HLO, HLO_STRUCTURAL, INDEXING_HLO, hlo_category
from .constant_folding import ConstantFolding
from .schema import CATEGORIES, HISTOGRAM_OPS, STABLEHLO_FEATURES
from .text_guard import StableHLOParseError, check_module_text

_ELEMENT_BYTES = {
    "f64": 8, "f32": 4, "f16": 2, "bf16": 2, "tf32": 4,
    "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i4": 1, "i2": 1, "i1": 1,
    "ui64": 8, "ui32": 4, "ui16": 2, "ui8": 1, "ui4": 1, "ui2": 1,
    "complex<f32>": 8, "complex<f64>": 16, "index": 8,
}
_LINALG_TARGET = re.compile(
    r"lapack|cusolver|cublas|hipsolver|rocsolver|eig|svd|potrf|getrf|geqrf|trsm|syevd|gesvd|qr|lu",
    re.I)


@lru_cache(maxsize=1)
def _context():
    # jax registers stablehlo, chlo, func, sdy and friends on the context it builds.
    from jax._src.interpreters import mlir

    return mlir.make_ir_context()


def parse_module(text: str):
    """Parse StableHLO module text; raise `StableHLOParseError` with the parser's message."""
    from jax._src.lib.mlir import ir

    if not isinstance(text, str) or not text.strip():
        raise StableHLOParseError("empty StableHLO text")
    check_module_text(text)
    ctx = _context()
    with ctx:
        try:
            module = ir.Module.parse(text, context=ctx)
        except ir.MLIRError as exc:
            raise StableHLOParseError(_short_message(str(exc))) from None
        except (ValueError, RuntimeError) as exc:
            raise StableHLOParseError(_short_message(str(exc))) from None
    return module


def _short_message(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return " ".join(lines[:4])[:500]


def element_bytes(element_type: str) -> int:
    """Bytes per element of an MLIR element type (`f32` → 4, unknown → 4)."""
    # Narrow floats are named f8E4M3FN, f6E2M3FN, f4E2M1FN...: match the "E" so f64 is not one
    if element_type.startswith(("f8E", "f6E", "f4E")):
        return 1
    return _ELEMENT_BYTES.get(element_type, 4)


@dataclass
class _TensorInfo:
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.elements * element_bytes(self.dtype)


def _tensor(mlir_type) -> _TensorInfo | None:
    from jax._src.lib.mlir import ir

    try:
        ranked = ir.RankedTensorType(mlir_type)
    except (ValueError, TypeError):
        return None
    shape = tuple(d if d >= 0 else 1 for d in ranked.shape)
    return _TensorInfo(shape, str(ranked.element_type))


@dataclass
class _FunctionTally:
    """What one function holds by itself, before combining along calls."""

    ops: int = 0
    ops_weighted: float = 0.0
    histogram: Counter = field(default_factory=Counter)
    categories: Counter = field(default_factory=Counter)
    unknown: int = 0
    calls: list = field(default_factory=list)  # (callee, trip multiplier, while depth)
    while_count: int = 0
    while_max_depth: int = 0
    trip_max: int = 0
    trip_unknown: int = 0
    total_iterations: float = 0.0
    case_count: int = 0
    case_result_branches: int = 0  # per case op: results x branches squared
    custom_calls: int = 0
    custom_linalg: int = 0
    targets: Counter = field(default_factory=Counter)
    constants: int = 0
    dense_constant_bytes: int = 0
    largest_constant: int = 0
    tensor_max: int = 0
    tensor_sum: int = 0
    max_rank: int = 0
    shapes: set = field(default_factory=set)
    dot_flops: float = 0.0
    conv_flops: float = 0.0
    fusions: list = field(default_factory=list)  # [ops, cost, indexing ops] per fusion
    f64_ops: int = 0
    complex_ops: int = 0
    matrix_vector_dots: int = 0
    layout_transposes: int = 0
    chain: int = 0  # longest dependency chain, through regions and callees
    uses: Counter = field(default_factory=Counter)  # SSA value -> number of uses
    # (kernels, callees, is the function's own body) per block that runs as one sequence
    sequences: list = field(default_factory=list)


def _short_name(full: str) -> str:
    dialect, _, name = full.partition(".")
    if dialect == "func" and name == "call":
        return "call"
    return name if dialect in ("stablehlo", "mhlo", "chlo") else full


def _int_constant(value) -> int | None:
    """The integer held by a scalar `stablehlo.constant` defining `value`, if any."""
    from jax._src.lib.mlir import ir

    owner = value.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return None
    op = owner.operation
    if op.name not in ("stablehlo.constant", "mhlo.constant"):
        return None
    try:
        attr = ir.DenseIntElementsAttr(op.attributes["value"])
    except (ValueError, TypeError):
        return None
    if not attr.is_splat and len(attr) != 1:
        return None
    return int(attr[0])


def _trip_count(while_op) -> int | None:
    """Recover `for i in range(lo, hi, step)` from a while loop, or None.

    JAX lowers scan and fori_loop with a counter carried as one operand, a condition
    `compare LT, counter, hi` and a body that adds a constant step to the counter.
    """
    from jax._src.lib.mlir import ir

    cond_block = while_op.regions[0].blocks[0]
    body_block = while_op.regions[1].blocks[0]
    terminator = list(cond_block.operations)[-1].operation
    if not terminator.operands:
        return None
    compare = terminator.operands[0].owner
    if not isinstance(compare, (ir.Operation, ir.OpView)):
        return None
    compare = compare.operation
    if compare.name != "stablehlo.compare" or len(compare.operands) != 2:
        return None
    direction = str(compare.attributes["comparison_direction"])
    lhs, rhs = compare.operands
    try:
        index = ir.BlockArgument(lhs).arg_number
    except (ValueError, TypeError):
        return None
    limit = _int_constant(rhs)
    start = _int_constant(while_op.operands[index])
    if limit is None or start is None:
        return None
    step = 1
    body_return = list(body_block.operations)[-1].operation
    if index < len(body_return.operands):
        update = body_return.operands[index].owner
        if isinstance(update, (ir.Operation, ir.OpView)) and update.operation.name == "stablehlo.add":
            for operand in update.operation.operands:
                found = _int_constant(operand)
                if found is not None:
                    step = found
    if step == 0:
        return None
    if "LT" in direction:
        span = limit - start
    elif "LE" in direction:
        span = limit - start + 1
    elif "GT" in direction:
        span, step = start - limit, -step
    elif "GE" in direction:
        span, step = start - limit + 1, -step
    else:
        return None
    if step <= 0:
        return None
    return max(0, -(-span // step))


_DOT_DIMS = re.compile(r"((?:lhs|rhs)_(?:batching|contracting)_dimensions) = \[([0-9, ]*)\]")


def _dot_stats(op, tensor=_tensor) -> tuple[float, bool, int]:
    """Flops of a dot, whether it multiplies a matrix by a vector (one side has no free,
    non-batch non-contracting, dimension larger than 1), and how many of its operands
    XLA:CPU must transpose first (`_operand_transposed`).

    XLA:CPU emits matrix-vector dots as its own tiled LLVM loops instead of calling a GEMM
    library, and they cost several times more compile time than a matrix product of the
    same op count. `tensor` decodes an MLIR type (the walker passes its cached one).
    """
    lhs, rhs, out = (tensor(value.type) for value in (*op.operands[:2], op.results[0]))
    if lhs is None:
        return 0.0, False, 0
    if "dot_dimension_numbers" in op.attributes:
        text = str(op.attributes["dot_dimension_numbers"])
        dims = {key: [int(d) for d in value.split(",") if d.strip()]
                for key, value in _DOT_DIMS.findall(text)}
    else:  # stablehlo.dot: (m, k) x (k, n) or vectors
        dims = {"lhs_contracting_dimensions": [len(lhs.shape) - 1] if lhs.shape else [],
                "rhs_contracting_dimensions": [0] if rhs is not None and rhs.shape else []}

    def free_and_contracted(info: _TensorInfo, side: str) -> tuple[int, int]:
        contracting = dims.get(f"{side}_contracting_dimensions", [])
        skipped = set(contracting) | set(dims.get(f"{side}_batching_dimensions", []))
        free = math.prod(n for i, n in enumerate(info.shape) if i not in skipped)
        return free, math.prod(info.shape[i] for i in contracting if i < len(info.shape))

    def transposed(info: _TensorInfo, side: str) -> bool:
        return _operand_transposed(len(info.shape), dims.get(f"{side}_batching_dimensions", []),
                                   dims.get(f"{side}_contracting_dimensions", []))

    lhs_free, contracted = free_and_contracted(lhs, "lhs")
    flops = 0.0 if out is None else 2.0 * out.elements * contracted
    if rhs is None:
        return flops, False, int(transposed(lhs, "lhs"))
    rhs_free, _ = free_and_contracted(rhs, "rhs")
    return (flops, contracted > 1 and min(lhs_free, rhs_free) == 1,
            int(transposed(lhs, "lhs")) + int(transposed(rhs, "rhs")))


def _operand_transposed(rank: int, batch: list[int], contracting: list[int]) -> bool:
    """Whether XLA:CPU copies a dot operand into another layout before its batched matrix
    product: the batch dimensions must lead, in order, and the contracting ones sit
    together at either end of the rest (a transposed matrix is only a layout).
    `bench/layout_cost.py`: ``bqhd,bkhd->bhqk`` compiled in 86 ms, ``bhqd,bhkd->bhqk`` in 11."""
    if list(batch) != list(range(len(batch))):
        return True
    rest = [d for d in range(rank) if d not in batch]
    at = sorted(rest.index(d) for d in contracting if d in rest)
    if not at:
        return False
    together = at == list(range(at[0], at[0] + len(at)))
    return not (together and (at[0] == 0 or at[-1] == len(rest) - 1))


_CONV_DIMS = re.compile(r"\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]")


def _conv_stats(op, tensor=_tensor) -> tuple[float, int]:
    """Flops of a convolution, and how many of its input, kernel and result are not in the
    layout of XLA:CPU's library convolution (input and result [b, spatial..., f], kernel
    [spatial..., i, o]); each becomes a transposing loop kernel of its own.
    `bench/layout_cost.py`: a 2-D convolution compiled in 116 ms channels-first (NCHW/OIHW),
    65 ms with only the kernel OIHW, 10.5 ms channels-last.

    dim_numbers prints as [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]; the kernel's `o` gives
    the output features the flops divide out.
    """
    text = str(op.attributes["dimension_numbers"]) if "dimension_numbers" in op.attributes else ""
    match = _CONV_DIMS.search(text)
    kernel_dims, transposes = [], 0
    if match is not None:
        lhs_dims, kernel_dims, out_dims = ([s.strip() for s in group.split(",")]
                                           for group in match.groups())
        spatial = [str(i) for i in range(len(lhs_dims) - 2)]
        transposes = ((lhs_dims != ["b", *spatial, "f"]) + (kernel_dims != [*spatial, "i", "o"])
                      + (out_dims != ["b", *spatial, "f"]))
    kernel, out = tensor(op.operands[1].type), tensor(op.results[0].type)
    if kernel is None or out is None or not kernel.shape:
        return 0.0, transposes
    out_features = kernel.shape[-1]
    if "o" in kernel_dims and kernel_dims.index("o") < len(kernel.shape):
        out_features = kernel.shape[kernel_dims.index("o")]
    return 2.0 * out.elements * kernel.elements / max(out_features, 1), transposes


class _Fusions:
    """XLA-like loop fusion of one block, from its consumers up.

    A fusible op joins its consumers' fusion when they all sit in one; a cheap op whose
    consumers sit in several is duplicated into each (XLA recomputes it rather than
    materialize it). A cheap op that reads at most one full-size array (the others are
    broadcasts, iotas, scalars) is also duplicated into the fusions of its fused consumers
    when some consumer cannot take it, and is materialized besides: XLA's global
    unfusibility check only protects ops that read more than one array. In a backward
    pass the running gradient sum is such an op, so each layer's fusion recomputes the
    sum from every layer above it and fusion sizes grow with depth squared. Anything
    else is the root of a fusion of its own.
    """

    def __init__(self) -> None:
        self._count = 0
        self._producer: dict = {}  # result value -> position of its op in the block
        self._users: dict[int, set[int]] = {}
        # ops whose result does not count as an array read (broadcasts, iotas, scalars)
        self._spread: set[int] = set()
        self._rank: dict[int, int | None] = {}
        # fusible ops: cost weight, whether XLA duplicates it, whether it changes
        # indexing, whether it reads at most one array
        self._fusible: dict[int, tuple[float, bool, bool, bool]] = {}

    def visit(self, operands: list, results: list, name: str, weight: float | None,
              rank: int | None) -> None:
        """Record the next op of the block: its SSA values, its name, its fusion cost
        (None if it does not fuse) and the rank of its first result."""
        position = self._count
        self._count += 1
        arrays = 0
        for operand in operands:
            producer = self._producer.get(operand)
            if producer is not None:
                self._users.setdefault(producer, set()).add(position)
                if producer in self._spread or self._lower_rank(producer, rank):
                    continue
            arrays += 1
        for result in results:
            self._producer[result] = position
        self._rank[position] = rank
        if name in ("broadcast_in_dim", "iota") or (name == "constant" and rank == 0):
            self._spread.add(position)
        if weight is not None:
            self._fusible[position] = (weight, name not in EXPENSIVE_HLO,
                                       name in INDEXING_HLO, arrays <= 1)

    def _lower_rank(self, producer: int, rank: int | None) -> bool:
        """Whether `producer`'s result has lower rank than `rank` (an index or a scalar
        operand, not an array read element by element)."""
        theirs = self._rank.get(producer)
        return rank is not None and theirs is not None and theirs < rank

    def groups(self) -> list[list]:
        """`[ops, summed cost weights, indexing ops]` of each fusion."""
        fusion_of: dict[int, set[int]] = {}
        groups: list[list] = []

        def new_fusion() -> int:
            groups.append([0, 0.0, 0])
            return len(groups) - 1

        for position in sorted(self._fusible, reverse=True):
            weight, cheap, indexing, unary = self._fusible[position]
            users = self._users.get(position, set())
            fused = [user for user in users if user in fusion_of]
            joined = set().union(*(fusion_of[user] for user in fused))
            if users and len(fused) == len(users) and (len(joined) == 1 or cheap):
                targets = joined
            elif cheap and unary and joined:
                targets = joined | {new_fusion()}
            else:
                targets = {new_fusion()}
            fusion_of[position] = targets
            for fusion in targets:
                groups[fusion][0] += 1
                groups[fusion][1] += weight
                groups[fusion][2] += indexing
        return groups


def _fusion_weight(name: str, infos: list) -> float | None:
    """An op's cost inside a loop fusion (from its name and result types), None if it does
    not fuse."""
    if name not in FUSIBLE_HLO:
        return None
    dtype = infos[0].dtype if infos and infos[0] is not None else ""
    # transcendental ops expand to tens of instructions; 64-bit and complex math doubles
    weight = 4.0 if name in EXPENSIVE_HLO else 1.0
    return weight * (2.0 if dtype in ("f64", "complex<f64>") else 1.0) \
        * (2.0 if dtype.startswith("complex") else 1.0)


def _rank(infos: list) -> int | None:
    """Rank of an op's first result (None if it is not a ranked tensor)."""
    return len(infos[0].shape) if infos and infos[0] is not None else None


# Ops that launch no kernel of their own: calls are inlined, the rest are bookkeeping.
_NOT_KERNELS = frozenset({"constant", "call", "tuple", "get_tuple_element",
                          "optimization_barrier"})


def _chain_end(results: list, chain_to: dict, length: int) -> int:
    """Record that each result ends a chain of `length` ops; returns `length`."""
    for result in results:
        chain_to[result] = length
    return length


class _Walker:
    """Tallies each function of a module once; a callee is walked when first called, so
    a caller's dependency chain can run through it."""

    def __init__(self, funcs: dict) -> None:
        self.funcs = funcs
        self.tallies: dict[str, _FunctionTally] = {}
        # MLIR types are uniqued and a module uses few: decoding each once halves the walk
        self._types: dict = {}

    def _tensor(self, mlir_type) -> _TensorInfo | None:
        if mlir_type not in self._types:
            self._types[mlir_type] = _tensor(mlir_type)
        return self._types[mlir_type]

    def function(self, name: str) -> _FunctionTally:
        if name not in self.tallies:
            tally = self.tallies[name] = _FunctionTally()  # a recursive call sees it empty
            for region in self.funcs[name].regions:
                for block in region.blocks:
                    tally.chain = max(tally.chain,
                                      self._block(block, tally, 1.0, 0, sequence="body"))
        return self.tallies[name]

    def _block(self, block, tally: _FunctionTally, trips: float, depth: int,
               sequence: str | None = None) -> int:
        """Tally `block`'s ops into `tally`; returns its longest dependency chain (ops).

        `sequence` says the block runs as a sequence of kernels of its own: "body" for a
        function's body, "region" for a loop body or a branch (None: the block is
        compiled into its op's kernel, as a reduction's body is).
        """
        from jax._src.lib.mlir import ir

        fusions = _Fusions()
        kernels, callees = 0, []  # unfused ops and calls of this block
        chain_to: dict = {}  # result value -> longest chain of ops ending in it
        longest = 0
        for view in block.operations:
            op = view.operation
            full = op.name
            name = _short_name(full)
            # each access to op.operands / op.results builds new Python objects: once only
            operands, results = list(op.operands), list(op.results)
            infos = [self._tensor(result.type) for result in results]
            fusions.visit(operands, results, name, _fusion_weight(name, infos),
                          _rank(infos))
            if full in HLO_STRUCTURAL:
                continue
            before = 0
            for operand in operands:
                tally.uses[operand] += 1
                before = max(before, chain_to.get(operand, 0))
            inner = 0  # chain inside the op's regions or its callee
            if name not in FUSIBLE_HLO and name not in _NOT_KERNELS:
                kernels += 1
            tally.ops += 1
            tally.ops_weighted += trips
            tally.histogram[name] += 1
            category = hlo_category(name)
            if category is None:
                tally.unknown += 1
            else:
                tally.categories[category] += 1
            for info in infos:
                if info is None:
                    continue
                tally.tensor_max = max(tally.tensor_max, info.elements)
                tally.tensor_sum += info.elements
                tally.max_rank = max(tally.max_rank, len(info.shape))
                tally.shapes.add((info.shape, info.dtype))
                if info.dtype == "f64" or info.dtype == "complex<f64>":
                    tally.f64_ops += 1
                if info.dtype.startswith("complex"):
                    tally.complex_ops += 1
            if name == "call":
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                tally.calls.append((callee, trips, depth))
                callees.append(callee)
                if callee in self.funcs:
                    inner = self.function(callee).chain
            elif name == "while":
                trip = _trip_count(op)
                tally.while_count += 1
                tally.while_max_depth = max(tally.while_max_depth, depth + 1)
                if trip is None:
                    tally.trip_unknown += 1
                    inner = trips
                else:
                    tally.trip_max = max(tally.trip_max, trip)
                    inner = trips * trip
                tally.total_iterations += inner
                body = max((self._block(inner_block, tally, inner, depth + 1, "region")
                            for region in op.regions[1:] for inner_block in region.blocks),
                           default=0)
                cond = max((self._block(inner_block, tally, inner, depth + 1, "region")
                            for inner_block in op.regions[0].blocks), default=0)
                longest = max(longest, _chain_end(results, chain_to, before + 1 + body + cond))
                continue
            elif name in ("case", "if"):
                tally.case_count += 1
                tally.case_result_branches += len(results) * len(op.regions) ** 2
            elif name == "custom_call":
                target = ir.StringAttr(op.attributes["call_target_name"]).value
                tally.custom_calls += 1
                tally.targets[target] += 1
                if _LINALG_TARGET.search(target):
                    tally.custom_linalg += 1
            elif name == "constant":
                self._constant(op, tally)
            elif name in ("dot_general", "dot"):
                flops, matrix_vector, transposes = _dot_stats(op, self._tensor)
                tally.dot_flops += trips * flops
                tally.matrix_vector_dots += matrix_vector
                tally.layout_transposes += transposes
            elif name == "convolution":
                flops, transposes = _conv_stats(op, self._tensor)
                tally.conv_flops += trips * flops
                tally.layout_transposes += transposes
            branches = "region" if name in ("case", "if") else None
            for region in op.regions:
                for inner_block in region.blocks:
                    inner = max(inner, self._block(inner_block, tally, trips, depth, branches))
            longest = max(longest, _chain_end(results, chain_to, before + 1 + inner))
        groups = fusions.groups()
        tally.fusions.extend(groups)
        if sequence is not None:
            tally.sequences.append((kernels + len(groups), callees, sequence == "body"))
        return longest

    @staticmethod
    def _constant(op, tally: _FunctionTally) -> None:
        from jax._src.lib.mlir import ir

        tally.constants += 1
        info = _tensor(op.results[0].type)
        if info is None:
            return
        try:
            splat = ir.DenseElementsAttr(op.attributes["value"]).is_splat
        except (ValueError, TypeError):
            splat = False
        if not splat and info.elements > 1:
            tally.dense_constant_bytes += info.nbytes
            tally.largest_constant = max(tally.largest_constant, info.nbytes)


@dataclass
class _Combined:
    ops: float = 0.0
    weighted: float = 0.0
    histogram: Counter = field(default_factory=Counter)
    categories: Counter = field(default_factory=Counter)
    unknown: float = 0.0
    while_count: float = 0.0
    while_depth: int = 0
    trip_max: int = 0
    trip_unknown: float = 0.0
    total_iterations: float = 0.0
    call_depth: int = 0
    dot_flops: float = 0.0
    conv_flops: float = 0.0
    fusions: list = field(default_factory=list)  # [ops, cost, indexing ops] per fusion
    matrix_vector_dots: float = 0.0
    layout_transposes: float = 0.0
    fanout_max: int = 0
    fanout_squares: float = 0.0


def _combine(name: str, tallies: dict[str, _FunctionTally], memo: dict, stack: tuple = ()):
    """Totals for `name` with every call inlined (cycles are cut, counting the callee once)."""
    if name in memo:
        return memo[name]
    own = tallies.get(name)
    result = _Combined()
    if own is None or name in stack:
        return result
    result.ops = own.ops
    result.weighted = own.ops_weighted
    result.histogram = Counter(own.histogram)
    result.categories = Counter(own.categories)
    result.unknown = own.unknown
    result.while_count = own.while_count
    result.while_depth = own.while_max_depth
    result.trip_max = own.trip_max
    result.trip_unknown = own.trip_unknown
    result.total_iterations = own.total_iterations
    result.dot_flops = own.dot_flops
    result.conv_flops = own.conv_flops
    result.fusions = list(own.fusions)
    result.matrix_vector_dots = own.matrix_vector_dots
    result.layout_transposes = own.layout_transposes
    result.fanout_max = max(own.uses.values(), default=0)
    result.fanout_squares = sum(n * n for n in own.uses.values())
    for callee, trips, depth in own.calls:
        sub = _combine(callee, tallies, memo, stack + (name,))
        result.ops += sub.ops
        result.weighted += trips * sub.weighted
        result.histogram.update(sub.histogram)
        result.categories.update(sub.categories)
        result.unknown += sub.unknown
        result.while_count += sub.while_count
        result.while_depth = max(result.while_depth, depth + sub.while_depth)
        result.trip_max = max(result.trip_max, sub.trip_max)
        result.trip_unknown += sub.trip_unknown
        result.total_iterations += trips * sub.total_iterations
        result.call_depth = max(result.call_depth, 1 + sub.call_depth)
        result.dot_flops += trips * sub.dot_flops
        result.conv_flops += trips * sub.conv_flops
        result.fusions.extend(sub.fusions)
        result.matrix_vector_dots += sub.matrix_vector_dots
        result.layout_transposes += sub.layout_transposes
        result.fanout_max = max(result.fanout_max, sub.fanout_max)
        result.fanout_squares += sub.fanout_squares
    memo[name] = result
    return result


def _kernel_sequences(name: str, tallies: dict[str, _FunctionTally], memo: dict,
                      stack: tuple = ()) -> tuple[int, list[int]]:
    """Kernels of `name`'s body with its calls inlined, and the kernels of each loop body
    and branch it runs (its callees' included; cycles are cut)."""
    if name in memo:
        return memo[name]
    own = tallies.get(name)
    if own is None or name in stack:
        return 0, []
    body, nested = 0, []
    for kernels, callees, is_body in own.sequences:
        for callee in callees:
            callee_body, callee_nested = _kernel_sequences(callee, tallies, memo,
                                                           stack + (name,))
            kernels += callee_body
            nested.extend(callee_nested)
        if is_body:
            body += kernels
        else:
            nested.append(kernels)
    memo[name] = body, nested
    return memo[name]


def _dot_flops(tensor):
    """Flops of a dot or convolution op, None for other ops (for `ConstantFolding`)."""
    def flops(op, name: str) -> float | None:
        if name in ("dot_general", "dot"):
            return _dot_stats(op, tensor)[0]
        if name == "convolution":
            return _conv_stats(op, tensor)[0]
        return None

    return flops


def stablehlo_features(module) -> tuple[dict[str, float], dict]:
    """Compute every `STABLEHLO_FEATURES` value of a parsed module, plus details for `info`."""
    from jax._src.lib.mlir import ir

    funcs = {}
    entry = None
    for view in module.body.operations:
        op = view.operation
        if op.name != "func.func":
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        funcs[name] = op
        visibility = (ir.StringAttr(op.attributes["sym_visibility"]).value
                      if "sym_visibility" in op.attributes else "public")
        if entry is None and (name == "main" or visibility == "public"):
            entry = name
    if not funcs:
        raise StableHLOParseError("the module holds no func.func")
    if "main" in funcs:
        entry = "main"
    entry = entry or next(iter(funcs))
    walker = _Walker(funcs)
    tallies = {name: walker.function(name) for name in funcs}
    combined = _combine(entry, tallies, {})
    folds, _ = ConstantFolding(funcs, walker._tensor, _dot_flops(walker._tensor)).function(entry)

    raw_ops = sum(t.ops for t in tallies.values())
    values: dict[str, float] = dict.fromkeys(STABLEHLO_FEATURES, 0.0)
    values["hlo_ops"] = raw_ops
    values["hlo_ops_inlined"] = combined.ops
    values["hlo_ops_trip_weighted"] = combined.weighted
    values["hlo_functions"] = len(funcs)
    values["hlo_calls"] = sum(len(t.calls) for t in tallies.values())
    values["hlo_max_call_depth"] = combined.call_depth
    values["while_count"] = combined.while_count
    values["while_max_depth"] = combined.while_depth
    values["while_trip_max"] = combined.trip_max
    values["while_trip_unknown"] = combined.trip_unknown
    values["while_total_iterations"] = combined.total_iterations
    values["case_count"] = sum(t.case_count for t in tallies.values())
    values["case_result_branch_squares"] = sum(t.case_result_branches for t in tallies.values())
    values["custom_call_count"] = sum(t.custom_calls for t in tallies.values())
    values["custom_call_linalg"] = sum(t.custom_linalg for t in tallies.values())
    values["constant_count"] = sum(t.constants for t in tallies.values())
    values["dense_constant_bytes"] = sum(t.dense_constant_bytes for t in tallies.values())
    values["largest_constant_bytes"] = max(t.largest_constant for t in tallies.values())
    values["fold_ops"] = folds.ops
    values["fold_elements"] = folds.elements
    values["fold_dot_flops"] = folds.dot_flops
    values["fold_bytes"] = folds.bytes
    values["tensor_max_elements"] = max(t.tensor_max for t in tallies.values())
    values["tensor_sum_elements"] = sum(t.tensor_sum for t in tallies.values())
    values["tensor_max_rank"] = max(t.max_rank for t in tallies.values())
    values["distinct_shapes"] = len(set().union(*(t.shapes for t in tallies.values())))
    values["dot_flops"] = combined.dot_flops
    values["conv_flops"] = combined.conv_flops
    sizes = [size for size, _, _ in combined.fusions]
    values["fusion_groups"] = len(sizes)
    values["fusion_max_size"] = max(sizes) if sizes else 0
    values["fusion_mean_size"] = sum(sizes) / len(sizes) if sizes else 0.0
    values["fusion_cost_squares"] = sum(cost * cost for _, cost, _ in combined.fusions)
    values["fusion_indexing_squares"] = sum(n * n for _, _, n in combined.fusions)
    values["dot_matrix_vector"] = combined.matrix_vector_dots
    values["layout_transposes"] = combined.layout_transposes
    values["chain_length"] = tallies[entry].chain
    body, nested = _kernel_sequences(entry, tallies, {})
    values["sequence_kernels_max"] = max([body, *nested])
    values["sequence_kernel_squares"] = sum(n * n for n in [body, *nested])
    values["fanout_max"] = combined.fanout_max
    values["fanout_squares"] = combined.fanout_squares
    values["f64_ops"] = sum(t.f64_ops for t in tallies.values())
    values["complex_ops"] = sum(t.complex_ops for t in tallies.values())
    values["unknown_ops"] = combined.unknown
    for category in CATEGORIES:
        values[f"cat_{category}"] = combined.categories.get(category, 0)
    for op_name in HISTOGRAM_OPS:
        values[f"op_{op_name}"] = combined.histogram.get(op_name, 0)

    main_type = funcs[entry].attributes["function_type"]
    fn_type = ir.FunctionType(ir.TypeAttr(main_type).value)
    inputs = [_tensor(t) for t in fn_type.inputs]
    outputs = [_tensor(t) for t in fn_type.results]
    values["param_count"] = len(fn_type.inputs)
    values["input_bytes"] = sum(t.nbytes for t in inputs if t is not None)
    values["output_bytes"] = sum(t.nbytes for t in outputs if t is not None)

    targets: Counter = Counter()
    for tally in tallies.values():
        targets.update(tally.targets)
    info = {
        "op_histogram": dict(sorted(combined.histogram.items())),
        "custom_call_targets": dict(sorted(targets.items())),
        "entry_function": entry,
    }
    return {k: float(v) for k, v in values.items()}, info
