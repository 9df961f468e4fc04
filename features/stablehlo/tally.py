"""What a function holds by itself: each field declared once, with how it combines along
calls (the program after inlining) and over the module (each function once)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple


class Call(NamedTuple):
    """A call site: its callee, how often it runs per run of the caller, the loops around it."""

    callee: str
    trips: float
    depth: int


# Along a call: the caller's value so far and the callee's combined value -> the caller's.
def added(mine, theirs, call: Call):
    return mine + theirs


def trip_weighted(mine, theirs, call: Call):
    return mine + call.trips * theirs


def larger(mine, theirs, call: Call):
    return max(mine, theirs)


def deeper_by_loops(mine, theirs, call: Call):
    return max(mine, call.depth + theirs)


def deeper_by_one(mine, theirs, call: Call):
    return max(mine, 1 + theirs)


def merged(mine: Counter, theirs: Counter, call: Call) -> Counter:
    mine.update(theirs)
    return mine


def counted(items) -> Counter:
    """How many times each of `items` occurs, keyed in the order of their last occurrence
    (see `appended`)."""
    counts: Counter = Counter()
    for item in items:
        counts[item] = counts.pop(item, 0) + 1
    return counts


def appended(mine: Counter, theirs: Counter, call: Call | None = None) -> Counter:
    """`theirs` counted after `mine`, each key moved to where it last occurs (as though
    the counts were a list extended by `theirs`: features that keep the last of equal
    keys read them in that order)."""
    for key, times in theirs.items():
        mine[key] = mine.pop(key, 0) + times
    return mine


# Over the module: every function's own value -> the module's.
def count_items(values: list) -> int:
    return sum(len(value) for value in values)


def distinct(values: list) -> int:
    return len(set().union(*values))


def merged_counts(values: list) -> Counter:
    total: Counter = Counter()
    for value in values:
        total.update(value)
    return total


@dataclass(frozen=True)
class Field:
    name: str
    empty: Callable[[], Any]  # the value before the walk, and a missing callee's
    along: Callable | None = None  # how a callee's value joins its caller's at a call
    inlined: str | None = None  # the feature the entry's combined value is
    over_module: Callable | None = None  # how the functions' own values total
    total: str | None = None  # the feature that total is


FIELDS = (
    Field("ops", int, added, "hlo_ops_inlined", sum, "hlo_ops"),
    Field("ops_weighted", float, trip_weighted, "hlo_ops_trip_weighted"),
    Field("histogram", Counter, merged),  # op name -> count: op_* features
    Field("categories", Counter, merged),  # cat_* features
    Field("unknown", int, added, "unknown_ops"),
    Field("calls", list, over_module=count_items, total="hlo_calls"),  # a Call per call site
    Field("call_depth", int, deeper_by_one, "hlo_max_call_depth"),  # 0 until combined
    Field("while_count", int, added, "while_count"),
    Field("while_max_depth", int, deeper_by_loops, "while_max_depth"),
    Field("trip_max", int, larger, "while_trip_max"),
    Field("trip_unknown", int, added, "while_trip_unknown"),
    Field("total_iterations", float, trip_weighted, "while_total_iterations"),
    Field("case_count", int, over_module=sum, total="case_count"),
    # per case op: results x branches squared
    Field("case_result_branches", int, over_module=sum, total="case_result_branch_squares"),
    Field("custom_calls", int, over_module=sum, total="custom_call_count"),
    Field("custom_linalg", int, over_module=sum, total="custom_call_linalg"),
    Field("targets", Counter, over_module=merged_counts),  # custom call target -> count
    Field("constants", int, over_module=sum, total="constant_count"),
    Field("dense_constant_bytes", int, over_module=sum, total="dense_constant_bytes"),
    Field("largest_constant", int, over_module=max, total="largest_constant_bytes"),
    Field("tensor_max", int, over_module=max, total="tensor_max_elements"),
    Field("tensor_sum", int, over_module=sum, total="tensor_sum_elements"),
    Field("max_rank", int, over_module=max, total="tensor_max_rank"),
    Field("shapes", set, over_module=distinct, total="distinct_shapes"),
    # the largest transform (points); (odd part, minus the power of two) of the length
    # with the largest odd part
    Field("fft_points", int, over_module=max, total="fft_points_max"),
    Field("fft_odd", lambda: (0, 0), over_module=max),
    Field("dot_flops", float, trip_weighted, "dot_flops"),
    Field("conv_flops", float, trip_weighted, "conv_flops"),
    # fusion (ops, cost, indexing ops, signature, inputs) -> how many: loop bodies and
    # branches (and function bodies, when calls are not inlined: see `Walker`)
    Field("fusions", Counter, appended),
    # a function body's own fusions, its calls inlined into it (read from the entry only)
    Field("body_fusions", Counter),
    Field("f64_ops", int, over_module=sum, total="f64_ops"),
    Field("complex_ops", int, over_module=sum, total="complex_ops"),
    Field("matrix_vector_dots", int, added, "dot_matrix_vector"),
    Field("layout_transposes", int, added, "layout_transposes"),
    Field("fanout_max", int, larger, "fanout_max"),  # set from `uses` by `finish`
    Field("fanout_squares", int, added, "fanout_squares"),
    # Read from one function, not combined:
    Field("chain", int),  # longest dependency chain, through regions and callees
    Field("uses", Counter),  # SSA value -> number of uses
    # (kernels, fusions, callees, is the function's own body) per block that runs as one
    # sequence
    Field("sequences", list),
)
ALONG_CALLS = tuple(f for f in FIELDS if f.along is not None)
OVER_MODULE = tuple(f for f in FIELDS if f.over_module is not None)


class Tally:
    """One function's values of `FIELDS`, before combining along calls."""

    __slots__ = tuple(f.name for f in FIELDS)

    def __init__(self) -> None:
        for f in FIELDS:
            setattr(self, f.name, f.empty())


def finish(tally: Tally) -> None:
    """The fields a function's walk gives only once it is over."""
    tally.fanout_max = max(tally.uses.values(), default=0)
    tally.fanout_squares = sum(n * n for n in tally.uses.values())


def module_totals(tallies: dict[str, Tally]) -> dict[str, Any]:
    """Each `OVER_MODULE` field totalled over the functions, each counted once."""
    return {f.name: f.over_module([getattr(t, f.name) for t in tallies.values()])
            for f in OVER_MODULE}
