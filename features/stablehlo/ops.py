"""One handler per op kind, in the style of XLA's HloCostAnalysis: `count` is what every op
adds to its function's tally, `HANDLERS` what an op of that kind adds besides."""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from ..categories import hlo_category
from .contractions import convolution, dot
from .tally import Call, Tally

_LINALG_TARGET = re.compile(
    r"lapack|cusolver|cublas|hipsolver|rocsolver|eig|svd|potrf|getrf|geqrf|trsm|syevd|gesvd|qr|lu",
    re.I)
# Ops that launch no kernel of their own: calls are inlined, the rest are bookkeeping.
NOT_KERNELS = frozenset({"constant", "call", "tuple", "get_tuple_element",
                         "optimization_barrier"})


class Site:
    """Where the ops of a block run: the tally they add to, how often and in how many loops
    the block runs, the callees it calls, and the walk's cached type decoder; `infos`: the
    decoded result types of the op handled now, when the walk has them (else None)."""

    __slots__ = ("tally", "trips", "depth", "callees", "tensor", "infos")

    def __init__(self, tally: Tally, trips: float, depth: int, tensor) -> None:
        self.tally, self.trips, self.depth, self.tensor = tally, trips, depth, tensor
        self.callees: list[str] = []
        self.infos: list | None = None


# What a handler returns says how the walk goes on into the op; None: its regions are
# compiled into its own kernel (a reduction's body).
BRANCHES = "branches"  # each region runs as a sequence of kernels of its own


class Loop(NamedTuple):
    trips: float  # how often the body runs per run of the function


class Callee(NamedTuple):
    name: str


def short_name(full: str) -> str:
    dialect, _, name = full.partition(".")
    if dialect == "func" and name == "call":
        return "call"
    return name if dialect in ("stablehlo", "mhlo", "chlo") else full


def count(tally: Tally, name: str, infos: list, trips: float) -> None:
    """What every op adds, whatever its kind (an unknown kind too: it counts as unknown)."""
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
        elements = info.elements
        if elements > tally.tensor_max:
            tally.tensor_max = elements
        tally.tensor_sum += elements
        if len(info.shape) > tally.max_rank:
            tally.max_rank = len(info.shape)
        tally.shapes.add(info.key)
        if info.wide:
            tally.f64_ops += 1
        if info.complex:
            tally.complex_ops += 1


def _call(op, site: Site) -> Callee:
    from jax._src.lib.mlir import ir

    callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    site.tally.calls.append(Call(callee, site.trips, site.depth))
    site.callees.append(callee)
    return Callee(callee)


def _while(op, site: Site) -> Loop:
    tally = site.tally
    trip = trip_count(op)
    tally.while_count += 1
    tally.while_max_depth = max(tally.while_max_depth, site.depth + 1)
    if trip is None:
        tally.trip_unknown += 1
        runs = site.trips
    else:
        tally.trip_max = max(tally.trip_max, trip)
        runs = site.trips * trip
    tally.total_iterations += runs
    return Loop(runs)


def _branches(op, site: Site) -> str:
    site.tally.case_count += 1
    site.tally.case_result_branches += len(op.results) * len(op.regions) ** 2
    return BRANCHES


def _custom_call(op, site: Site) -> None:
    from jax._src.lib.mlir import ir

    target = ir.StringAttr(op.attributes["call_target_name"]).value
    site.tally.custom_calls += 1
    site.tally.targets[target] += 1
    if _LINALG_TARGET.search(target):
        site.tally.custom_linalg += 1


def _constant(op, site: Site) -> None:
    site.tally.constants += 1
    size = dense_bytes(op, site.infos[0] if site.infos else site.tensor(op.result.type))
    if size:
        site.tally.dense_constant_bytes += size
        site.tally.largest_constant = max(site.tally.largest_constant, size)


def odd_part(length: int) -> int:
    """m of a length 2^k * m with m odd (1 for a power of two)."""
    return length // (length & -length) if length > 0 else 0


def _fft(op, site: Site) -> None:
    # The TPU compiler's time follows a transform's points and how its lengths factor: on
    # a v5e 4096 points 0.6 s, 6000 (2^4 x 375) 6.8 s, 22050 (2 x 11025) 41 s
    # (`bench/evaluations/tpu_thin_conv.py --check fft_lengths`)
    from jax._src.lib.mlir import ir

    lengths = [int(n) for n in ir.DenseI64ArrayAttr(op.attributes["fft_length"])]
    site.tally.fft_points = max(site.tally.fft_points, math.prod(lengths))
    # the length of the largest odd part (of two alike, the one with fewer factors of two)
    for n in lengths:
        m = odd_part(n)
        site.tally.fft_odd = max(site.tally.fft_odd, (m, -(n // m) if m else 0))


HANDLERS = {
    "call": _call, "while": _while, "case": _branches, "if": _branches,
    "custom_call": _custom_call, "constant": _constant,
    "dot_general": dot, "dot": dot, "convolution": convolution, "fft": _fft,
}


def dense_bytes(op, info) -> int:
    """Bytes a constant op materializes: 0 for a splat, a scalar or no tensor."""
    if info is None or info.elements <= 1:
        return 0
    from jax._src.lib.mlir import ir

    try:
        splat = ir.DenseElementsAttr(op.attributes["value"]).is_splat
    except (ValueError, TypeError):
        splat = False
    return 0 if splat else info.nbytes


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


def trip_count(while_op) -> int | None:
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
