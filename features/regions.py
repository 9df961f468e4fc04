"""Where in the user's source each StableHLO op comes from, and what it adds up to there.

JAX writes each op's Python call stack into its location (`callsite(f at g at ...)`).
`region_tallies` walks a lowered module as the feature walker does (ops of a called
function counted at every call, ops in a loop body weighted by its trip count) and adds
each op to the user's frame it came from: the innermost frame outside jax, costmodel,
installed packages and the standard library, so library code (a flax layer) is charged to
the line of the user's code that called it. A constant is charged to the line of its
first user (JAX locates captured ones where the program was lowered); ops that XLA folds at compile time
carry their folding work (`constant_folding.py`). What `blame` divides a prediction by.
"""

from __future__ import annotations

import re
import site
import sys
import sysconfig
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .categories import HLO_STRUCTURAL
from .schema import CATEGORIES, HISTOGRAM_OPS
from .stablehlo.ops import HANDLERS, Site, count, short_name, trip_count
from .stablehlo.tally import FIELDS, Tally, added, count_items, larger, trip_weighted

OUTSIDE = "(outside your code)"  # ops with no frame of the user's: JAX's own glue
_FRAME = re.compile(r'"([^"]+)"\("([^"]+)":(\d+):')
_OWN_PACKAGES = ("costmodel", "costmodel.features", "costmodel.models", "costmodel.training",
                 "costmodel.api")


@dataclass
class RegionTally:
    """What one source region's ops add up to: the additive model inputs (`counts`,
    by `STABLEHLO_FEATURES` name), counted as the feature extractor counts them, so the
    program's inputs less a region's counts are the program's without that region."""

    name: str  # the function the line is in, as JAX recorded it
    counts: dict[str, float] = field(default_factory=dict)
    # the model inputs that are a largest value over ops (`largest_features`), the
    # region's own, and the (shape, dtype) of its results: what the rest of the program
    # keeps of them without it
    largest: dict[str, float] = field(default_factory=dict)
    shapes: set = field(default_factory=set)
    # ops by the call stack they were reached through: ((function, "file:LINE"), ...),
    # outermost first, ending at this region's line
    stacks: dict = field(default_factory=dict)

    @property
    def ops(self) -> float:
        """Ops after inlining calls (`hlo_ops_inlined`)."""
        return self.counts.get("hlo_ops_inlined", 0.0)


@dataclass
class _Op:
    stack: tuple[tuple[str, str], ...]  # (function, "file:LINE"), outermost first
    op: object
    name: str  # short name, as the feature walker names it
    infos: list  # its results' tensor types
    trips: float  # runs per run of the program (loop trips around it)
    first: bool  # the first visit of its function (module totals count each op once)
    folds: object = None  # its `Folds` when XLA evaluates it at compile time


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    import jax

    roots = {str(Path(jax.__file__).resolve().parent.parent), sysconfig.get_paths()["stdlib"]}
    roots.update(site.getsitepackages() + [site.getusersitepackages()])
    roots.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    for name in _OWN_PACKAGES:  # an editable install lives outside site-packages
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            roots.add(str(Path(module.__file__).resolve().parent) + "/")
    return tuple(sorted(roots))


def _is_user_file(path: str) -> bool:
    if path.startswith("<"):
        return False
    resolved = str(Path(path).resolve()) if path.startswith("/") else path
    return not resolved.startswith(_library_roots())


def user_frames(location: str) -> list[tuple[str, str, int]]:
    """(function, file, line) of the user's frames in an op's location, innermost first."""
    return [(name, file, int(line)) for name, file, line in _FRAME.findall(location)
            if _is_user_file(file)]


def region_tallies(module, backend: str = "cpu") -> dict[str, RegionTally]:
    """`"file.py:LINE"` (or `OUTSIDE`) -> what the ops charged to it add up to, compiled
    for `backend`."""
    from jax._src.lib.mlir import ir

    from .constant_folding import ConstantFolding, folds_to_fixpoint
    from .stablehlo.contractions import dot_flops
    from .stablehlo.parse import functions
    from .stablehlo.tensors import cached

    funcs = functions(module)
    if "main" not in funcs:
        return {}
    tensor = cached()
    folded: dict = {}  # first result of a folded op -> its Folds

    def on_fold(op, folds) -> None:
        if len(op.results):
            folded[op.results[0]] = folds

    ConstantFolding(funcs, tensor, dot_flops(tensor), on_fold,
                    fixpoint=folds_to_fixpoint(backend)).function("main")
    records: list[_Op] = []
    constant_of: dict = {}  # result of a constant not used yet -> its record
    walked: set = {"main"}  # functions visited once already

    def walk(block, trips: float, outer: tuple, depth: int, first: bool) -> None:
        for view in block.operations:
            op = view.operation
            if op.name in HLO_STRUCTURAL:
                continue
            frames = user_frames(str(op.location))
            own = tuple((fn, f"{Path(file).name}:{line}") for fn, file, line in reversed(frames))
            # a called function's ops carry either their whole stack (traced in place) or
            # only their own frames (an inner jit traced on its own): then the call's go first
            stack = own if outer and own and own[0] == outer[0] else outer + own
            results = list(op.results)
            name = short_name(op.name)
            record = _Op(stack, op, name, [tensor(r.type) for r in results], trips, first,
                         folded.get(results[0]) if results else None)
            records.append(record)
            for operand in op.operands:  # a constant is charged to its first user
                owner = constant_of.pop(operand, None)
                if owner is not None and stack:
                    owner.stack = stack
            if name == "constant":
                constant_of[results[0]] = record
            if name == "call" and depth < 64:
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                if callee in funcs:
                    once = callee not in walked
                    walked.add(callee)
                    for region in funcs[callee].regions:
                        for inner in region.blocks:
                            walk(inner, trips, stack, depth + 1, once)
                continue
            inner_trips = trips * ((trip_count(op) or 1) if name == "while" else 1)
            for region in op.regions:
                for inner in region.blocks:
                    walk(inner, inner_trips, stack, depth + 1, first)

    for region in funcs["main"].regions:
        for block in region.blocks:
            walk(block, 1.0, (), 0, True)
    return _tally(records, tensor)


def _tally(records: list[_Op], tensor) -> dict[str, RegionTally]:
    """Records into regions, keyed by each op's innermost user frame (OUTSIDE: none),
    each op counted by the feature walker's own `count` and handlers."""
    tallies: dict[str, RegionTally] = {}
    walks: dict[str, tuple[Tally, Tally]] = {}  # region -> (first visits, later visits)
    for r in records:
        name, key = r.stack[-1] if r.stack else (OUTSIDE, OUTSIDE)
        tally = tallies.get(key)
        if tally is None:
            tally = tallies[key] = RegionTally(name)
            walks[key] = (Tally(), Tally())
        into = walks[key][0 if r.first else 1]
        count(into, r.name, r.infos, r.trips)
        handler = HANDLERS.get(r.name)
        if handler is not None:
            handler(r.op, Site(into, r.trips, 0, tensor))
        if r.folds is not None:
            for feature, value in r.folds.features().items():
                tally.counts[feature] = tally.counts.get(feature, 0.0) + value
        tally.stacks[r.stack] = tally.stacks.get(r.stack, 0.0) + 1.0
    for key, (first, later) in walks.items():
        tallies[key].counts.update(additive_features(first, later))
        tallies[key].largest = largest_features(first, later)
        tallies[key].shapes = first.shapes | later.shapes
    return tallies


def additive_features(first: Tally, later: Tally) -> dict[str, float]:
    """The model inputs that sum over ops, of ops tallied at their function's first visit
    (`first`) and at later ones (`later`): inlined and trip-weighted features count
    every visit, module totals each function once. The others (largest sizes, fusion,
    chains, kernels per sequence, fan-out) are no sums over ops."""
    out: dict[str, float] = {}
    for f in FIELDS:
        if f.along in (added, trip_weighted) and f.name != "fanout_squares":  # from `uses`
            out[f.inlined] = float(getattr(first, f.name) + getattr(later, f.name))
        if f.over_module in (sum, count_items):
            out[f.total] = float(f.over_module([getattr(first, f.name)]))
    for category in CATEGORIES:
        out[f"cat_{category}"] = float(first.categories[category] + later.categories[category])
    for op_name in HISTOGRAM_OPS:
        out[f"op_{op_name}"] = float(first.histogram[op_name] + later.histogram[op_name])
    return out


def largest_features(first: Tally, later: Tally) -> dict[str, float]:
    """The model inputs that are the largest value over ops (tensor, rank, constant, trip
    count), of the ops of both tallies."""
    out: dict[str, float] = {}
    for f in FIELDS:
        name = f.total if f.over_module is max else \
            f.inlined if f.along is larger and f.name != "fanout_max" else None  # from `uses`
        if name is not None:
            out[name] = float(max(getattr(first, f.name), getattr(later, f.name)))
    return out
