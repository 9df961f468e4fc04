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

OUTSIDE = "(outside your code)"  # ops with no frame of the user's: JAX's own glue
_FRAME = re.compile(r'"([^"]+)"\("([^"]+)":(\d+):')
_OWN_PACKAGES = ("costmodel", "costmodel.features", "costmodel.models", "costmodel.training",
                 "costmodel.api")


@dataclass
class RegionTally:
    """What one source region's ops add up to (counts as the model inputs count them)."""

    name: str  # the function the line is in, as JAX recorded it
    ops: float = 0.0
    ops_trip_weighted: float = 0.0
    tensor_elements: float = 0.0
    dense_constant_bytes: float = 0.0
    fold_elements: float = 0.0
    fold_dot_flops: float = 0.0
    # ops by the call stack they were reached through: ((function, "file:LINE"), ...),
    # outermost first, ending at this region's line
    stacks: dict = field(default_factory=dict)


@dataclass
class _Op:
    stack: tuple[tuple[str, str], ...]  # (function, "file:LINE"), outermost first
    calls: float
    trips: float
    elements: float
    constant_bytes: float = 0.0
    fold_elements: float = 0.0
    fold_dot_flops: float = 0.0


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


def region_tallies(module) -> dict[str, RegionTally]:
    """`"file.py:LINE"` (or `OUTSIDE`) -> what the ops charged to it add up to."""
    from jax._src.lib.mlir import ir

    from .constant_folding import ConstantFolding
    from .stablehlo.contractions import dot_flops
    from .stablehlo.ops import dense_bytes, trip_count
    from .stablehlo.parse import functions
    from .stablehlo.tensors import cached

    funcs = functions(module)
    if "main" not in funcs:
        return {}
    tensor = cached()
    folded: dict = {}  # first result of a folded op -> (elements, dot flops)

    def on_fold(op, elements: float, flops: float) -> None:
        if len(op.results):
            folded[op.results[0]] = (elements, flops)

    ConstantFolding(funcs, tensor, dot_flops(tensor), on_fold).function("main")
    records: list[_Op] = []
    constant_of: dict = {}  # result of a constant not used yet -> its record

    def walk(block, calls: float, trips: float, outer: tuple, depth: int) -> None:
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
            infos = [tensor(r.type) for r in results]
            record = _Op(stack, calls, trips,
                         sum(i.elements for i in infos if i is not None) * calls)
            if results and results[0] in folded:
                elements, flops = folded[results[0]]
                record.fold_elements, record.fold_dot_flops = elements * calls, flops * calls
            records.append(record)
            for operand in op.operands:  # a constant is charged to its first user
                owner = constant_of.pop(operand, None)
                if owner is not None and stack:
                    owner.stack = stack
            name = op.name.rsplit(".", 1)[-1]
            if name == "constant":
                record.constant_bytes = float(dense_bytes(op, infos[0])) * calls
                constant_of[results[0]] = record
            if name == "call" and depth < 64:
                callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                if callee in funcs:
                    for region in funcs[callee].regions:
                        for inner in region.blocks:
                            walk(inner, calls, trips, stack, depth + 1)
                continue
            inner_trips = trips * ((trip_count(op) or 1) if name == "while" else 1)
            for region in op.regions:
                for inner in region.blocks:
                    walk(inner, calls, inner_trips, stack, depth + 1)

    for region in funcs["main"].regions:
        for block in region.blocks:
            walk(block, 1.0, 1.0, (), 0)
    return _tally(records)


def _tally(records: list[_Op]) -> dict[str, RegionTally]:
    """Records into regions, keyed by each op's innermost user frame (OUTSIDE: none)."""
    tallies: dict[str, RegionTally] = {}
    for r in records:
        name, key = r.stack[-1] if r.stack else (OUTSIDE, OUTSIDE)
        tally = tallies.get(key)
        if tally is None:
            tally = tallies[key] = RegionTally(name)
        tally.ops += r.calls
        tally.ops_trip_weighted += r.calls * r.trips
        tally.tensor_elements += r.elements
        tally.dense_constant_bytes += r.constant_bytes
        tally.fold_elements += r.fold_elements
        tally.fold_dot_flops += r.fold_dot_flops
        tally.stacks[r.stack] = tally.stacks.get(r.stack, 0.0) + r.calls
    return tallies
