"""Jaxpr features: what the traced program looks like before lowering.

These feed advice (repeated blocks, inner jits, constants) and add signal to the
dataset; the model itself reads StableHLO features only.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .categories import jaxpr_category
from .schema import CATEGORIES, JAXPR_FEATURES

_CONTROL = {"scan", "while", "cond"}
_JIT = {"jit", "pjit", "closed_call", "core_call"}
_REMAT = {"remat", "remat2", "checkpoint"}


@dataclass
class _Tally:
    eqns: int = 0
    weighted: float = 0.0
    max_depth: int = 0
    categories: Counter = field(default_factory=Counter)
    unknown: int = 0
    unknown_names: Counter = field(default_factory=Counter)
    scans: int = 0
    scan_max_length: int = 0
    scan_max_unroll: int = 0
    whiles: int = 0
    conds: int = 0
    cond_branches: int = 0
    jits: int = 0
    jit_max_eqns: int = 0
    remats: int = 0
    custom_jvp: int = 0
    custom_vjp: int = 0
    largest: int = 0
    f64_vars: int = 0
    complex_vars: int = 0


def _sub_jaxprs(params: dict):
    """Every jaxpr found among an equation's params (single, in tuples, or closed)."""
    for value in params.values():
        items = value if isinstance(value, (tuple, list)) else (value,)
        for item in items:
            inner = getattr(item, "jaxpr", None)
            if inner is not None and hasattr(inner, "eqns"):
                yield inner
            elif hasattr(item, "eqns"):
                yield item


def _count_eqns(jaxpr) -> int:
    return sum(1 + sum(_count_eqns(j) for j in _sub_jaxprs(e.params)) for e in jaxpr.eqns)


def _numpy_dtype(dtype) -> np.dtype | None:
    """numpy's view of a JAX dtype; None for extended dtypes such as PRNG keys."""
    try:
        return np.dtype(dtype)
    except TypeError:
        return None


def _aval_stats(tally: _Tally, var) -> None:
    aval = getattr(var, "aval", None)
    shape = getattr(aval, "shape", None)
    dtype = getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        return
    tally.largest = max(tally.largest, math.prod(shape) if shape else 1)
    dtype = _numpy_dtype(dtype)
    if dtype is None:
        return
    if dtype in (np.float64, np.complex128):
        tally.f64_vars += 1
    if np.issubdtype(dtype, np.complexfloating):
        tally.complex_vars += 1


def _walk(jaxpr, tally: _Tally, trips: float, depth: int) -> None:
    tally.max_depth = max(tally.max_depth, depth)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        tally.eqns += 1
        subs = list(_sub_jaxprs(eqn.params))
        if not subs:  # containers (scan, jit, ...) count through their bodies
            tally.weighted += trips
        category = jaxpr_category(name)
        if category is None:
            tally.unknown += 1
            tally.unknown_names[name] += 1
        else:
            tally.categories[category] += 1
        for var in eqn.outvars:
            _aval_stats(tally, var)
        inner_trips, inner_depth = trips, depth
        if name == "scan":
            length = int(eqn.params.get("length", 1))
            unroll = eqn.params.get("unroll", 1)
            unroll = length if unroll is True else int(unroll or 1)
            tally.scans += 1
            tally.scan_max_length = max(tally.scan_max_length, length)
            tally.scan_max_unroll = max(tally.scan_max_unroll, unroll)
            inner_trips, inner_depth = trips * length, depth + 1
        elif name == "while":
            tally.whiles += 1
            inner_depth = depth + 1
        elif name == "cond":
            tally.conds += 1
            tally.cond_branches = max(tally.cond_branches, len(eqn.params.get("branches", ())))
            inner_depth = depth + 1
        elif name in _JIT:
            tally.jits += 1
            inner = eqn.params.get("jaxpr")
            inner = getattr(inner, "jaxpr", inner)
            if inner is not None:
                tally.jit_max_eqns = max(tally.jit_max_eqns, _count_eqns(inner))
        elif name in _REMAT:
            tally.remats += 1
        elif name.startswith("custom_jvp"):
            tally.custom_jvp += 1
        elif name.startswith("custom_vjp"):
            tally.custom_vjp += 1
        for sub in subs:
            _walk(sub, tally, inner_trips, inner_depth)


def _signature(eqn) -> tuple:
    """What makes two equations 'the same step' of an unrolled loop: op, shapes, params."""
    shapes = tuple((tuple(getattr(v.aval, "shape", ())), str(getattr(v.aval, "dtype", "")))
                   for v in eqn.outvars)
    params = []
    for key, value in sorted(eqn.params.items()):
        if hasattr(value, "eqns") or hasattr(getattr(value, "jaxpr", None), "eqns"):
            params.append((key, _count_eqns(getattr(value, "jaxpr", value))))
        else:
            params.append((key, repr(value)[:80]))
    return (eqn.primitive.name, shapes, tuple(params))


# An invariant block (one reading the same outside values every time) is preferred when
# it covers at least this share of what the shortest repeating unit covers.
INVARIANT_COVER_SHARE = 0.9


def repeated_block(eqns, outside=()) -> tuple[int, int, int]:
    """Find the longest run of a block of equations repeated back to back.

    Returns (block_size, repeat_count, start_index); (0, 0, -1) when nothing repeats.
    The block covering the most equations wins; among equals, the smallest block. But a
    block whose equations also read the same `outside` values (the program's inputs and
    constants) in every repeat wins when it covers nearly as much: four stages cycling
    through four weights, unrolled 500 times, are 500 blocks of all four stages (a scan
    closing over the weights), not 2000 blocks of one stage each reading another weight.
    """
    if len(eqns) < 2:
        return 0, 0, -1
    seq = _codes(eqns, {})
    plain = _longest_repeat(seq)
    where = {id(v): i for i, v in enumerate(outside)}
    invariant = _longest_repeat(_codes(eqns, where)) if where else (0, 0, -1)
    if invariant[0] * invariant[1] >= INVARIANT_COVER_SHARE * plain[0] * plain[1] > 0:
        # Its period, but its extent as plain steps: the first repeat reads the loop's
        # initial value from outside and is a repeat all the same.
        return _repeat_of_period(seq, invariant[0])
    return plain


def _codes(eqns, outside: dict[int, int]) -> np.ndarray:
    """One integer per equation, equal for equations that are the same step; with
    `outside`, which of those values each reads is part of the step."""
    codes: dict[tuple, int] = {}
    keys = (_signature(e) + (tuple(outside.get(id(v), -1) for v in e.invars),) if outside
            else _signature(e) for e in eqns)
    return np.array([codes.setdefault(key, len(codes)) for key in keys], dtype=np.int64)


def _longest_repeat(seq: np.ndarray) -> tuple[int, int, int]:
    """(period, repeats, start) of the period whose back-to-back repeats cover most of `seq`."""
    n = len(seq)
    best = (0, 0, -1)
    best_cover = 0
    for period in range(1, n // 2 + 1):
        _, repeats, start = _repeat_of_period(seq, period)
        cover = repeats * period
        if repeats >= 2 and cover > best_cover:
            best, best_cover = (period, repeats, start), cover
        if period * 2 > n - best_cover + period:  # no longer block can cover more
            break
    return best


def _repeat_of_period(seq: np.ndarray, period: int) -> tuple[int, int, int]:
    """(period, repeats, start) of the longest back-to-back run of one `period`-long block."""
    same = seq[:-period] == seq[period:]
    if not same.any():
        return period, 0, -1
    # longest run of True in `same`
    padded = np.concatenate(([False], same, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    starts, ends = edges[::2], edges[1::2]
    k = int(np.argmax(ends - starts))
    return period, (int(ends[k] - starts[k]) + period) // period, int(starts[k])


_LIBRARY_DIRS = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def _source_line(eqn) -> str:
    """Where the user's own code made `eqn`: the innermost frame outside jax and outside
    installed packages ("model.py:41:8 (Block.__call__)"), so advice names the user's
    layer, not flax's LayerNorm; jax's own summary when every frame is library code."""
    try:
        from jax._src import source_info_util

        traceback = eqn.source_info.traceback
        for frame in traceback.frames if traceback is not None else ():
            path = frame.file_name
            if source_info_util.is_user_filename(path) and not any(
                    part in path for part in _LIBRARY_DIRS):
                return f"{path}:{frame.line_num} ({frame.function_name})"
        return source_info_util.summarize(eqn.source_info)
    except Exception:  # source info is best effort: private API, may change
        return ""


# library -> a folder its source files sit in; the first found in a block's frames names
# the layer idiom advice offers (a flax layer stack gets nn.scan, not bare lax.scan)
_LIBRARY_FOLDERS = (("flax.nnx", f"{os.sep}flax{os.sep}nnx{os.sep}"),
                    ("flax.linen", f"{os.sep}flax{os.sep}linen{os.sep}"),
                    ("haiku", f"{os.sep}haiku{os.sep}"),
                    ("equinox", f"{os.sep}equinox{os.sep}"))


def _library(eqn) -> str:
    """The layer library whose code made `eqn` (see `_LIBRARY_FOLDERS`), "" for none."""
    try:
        traceback = eqn.source_info.traceback
        paths = [frame.file_name for frame in (traceback.frames if traceback is not None
                                               else ())]
    except Exception:  # source info is best effort: private API, may change
        return ""
    for name, folder in _LIBRARY_FOLDERS:
        if any(folder in path for path in paths):
            return name
    return ""


def jaxpr_features(closed_jaxpr) -> tuple[dict[str, float], dict]:
    """Compute every `JAXPR_FEATURES` value of a closed jaxpr, plus details for `info`."""
    jaxpr = closed_jaxpr.jaxpr
    tally = _Tally()
    _walk(jaxpr, tally, 1.0, 0)
    for var in list(jaxpr.invars) + list(jaxpr.outvars):
        _aval_stats(tally, var)
    consts = [np.asarray(c) for c in closed_jaxpr.consts if hasattr(c, "shape")]
    block, repeats, start = repeated_block(jaxpr.eqns, [*jaxpr.constvars, *jaxpr.invars])

    def nbytes(vars_) -> int:
        total = 0
        for v in vars_:
            aval = getattr(v, "aval", None)
            dtype = _numpy_dtype(getattr(aval, "dtype", None))
            if getattr(aval, "shape", None) is not None and dtype is not None:
                total += math.prod(aval.shape) * dtype.itemsize
        return total

    values = dict.fromkeys(JAXPR_FEATURES, 0.0)
    values.update({
        "jaxpr_eqns": tally.eqns,
        "jaxpr_eqns_weighted": tally.weighted,
        "jaxpr_max_depth": tally.max_depth,
        "jaxpr_scan_count": tally.scans,
        "jaxpr_scan_max_length": tally.scan_max_length,
        "jaxpr_scan_max_unroll": tally.scan_max_unroll,
        "jaxpr_while_count": tally.whiles,
        "jaxpr_cond_count": tally.conds,
        "jaxpr_cond_branches_max": tally.cond_branches,
        "jaxpr_inner_jit_count": tally.jits,
        "jaxpr_inner_jit_max_eqns": tally.jit_max_eqns,
        "jaxpr_remat_count": tally.remats,
        "jaxpr_custom_jvp_count": tally.custom_jvp,
        "jaxpr_custom_vjp_count": tally.custom_vjp,
        "jaxpr_const_count": len(consts),
        "jaxpr_const_bytes": sum(c.nbytes for c in consts),
        "jaxpr_largest_tensor_elements": tally.largest,
        "jaxpr_input_bytes": nbytes(jaxpr.invars),
        "jaxpr_output_bytes": nbytes(jaxpr.outvars),
        "jaxpr_f64_vars": tally.f64_vars,
        "jaxpr_complex_vars": tally.complex_vars,
        "jaxpr_repeat_block_size": block,
        "jaxpr_repeat_count": repeats,
        "jaxpr_unknown_primitives": tally.unknown,
    })
    for category in CATEGORIES:
        values[f"jaxpr_cat_{category}"] = tally.categories.get(category, 0)
    info = {
        "unknown_primitives": dict(tally.unknown_names),
        "repeated_block": {
            "size": block,
            "repeats": repeats,
            "start": start,
            "source": _source_line(jaxpr.eqns[start]) if start >= 0 else "",
            "library": _library(jaxpr.eqns[start]) if start >= 0 else "",
        },
        "inner_jits": [
            {"name": str(e.params.get("name", "")), "source": _source_line(e)}
            for e in jaxpr.eqns if e.primitive.name in _JIT
        ],
    }
    return {k: float(v) for k, v in values.items()}, info
