"""`blame`: which part of my program is slow to compile? The prediction divided among the
user's source lines.

A region's part is what the model predicts removing it saves: the prediction for the
whole program less the prediction for the program without the region's ops, both from
the full model (baseline times tree correction, so the kinds of its ops count, not only
their number). The program without a region is the program's model inputs less the
region's tally of them (`costmodel.features.regions`, counted as the feature extractor
counts them), its largest values and distinct shapes what the other regions hold; inputs
that are no sum over ops but grow with the program are scaled down with its ops
(`_SCALED`); the rest (means, the signature) stay.

The fixed row is the model's prediction for the program without any region (the same
construction with every region removed: an empty program of this signature), so a
program of one region splits exactly into it and that region. The model's cost per op
falls as a program grows (the shipped CPU model's size law goes as ops^0.54), so
removing one region of many saves less than its part of the whole: the savings add up
to less than the prediction past the fixed row, and the rest is SHARED, a row of its
own, which only removing several regions would save. Scaling the savings up to fill it
instead charges big regions what their removal does not save (on the quiet timings of
`bench/evaluations/blame_validation.py`, the planted region's share came out 1.27x the share its
removal saved at the median that way, 1.03x this way). Savings that add up to more (the
tree's steps: a region whose shapes no other has takes a distinct shape with it) are
scaled down to fit. Where no region's removal changes the prediction (or the program
without any predicts as much), the baseline's terms are divided instead
(`_divide_by_terms`). This machine's calibration scales every part alike, so the rows
sum to the prediction.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from costmodel.features.regions import OUTSIDE, RegionTally
from costmodel.models.table import Table, augment

from ._blame_views import Node, call_tree, icicle_html, trace_events
from ._predict import Prediction, _fmt_bytes, _fmt_seconds, predict_features

FIXED = "(fixed cost of any compile)"
SHARED = "(shared by several regions)"
_COLUMNS = ("source", "seconds", "share", "memory", "function")
# Model inputs that are no sum over ops but grow with the program, and the power of the
# share of its inlined ops left that each keeps without a region: counts of fusions,
# values and chains shrink with the ops, a square of one sequence's kernels (most
# programs run as one) with their square. Against the features of the 21 programs of
# `bench/evaluations/blame_validation.py` lowered without their planted region, the compile seconds
# predicted from the scaled inputs are within 30% of those from the real features for
# 19 (15 unscaled); a gradient's unrolled loop is the worst, 2.3x (7.7x unscaled, which
# had its removal save 3% where its real features save 87%).
_SCALED = {"fusion_groups": 1, "fusion_cost_squares": 1, "fusion_indexing_squares": 1,
           "fanout_squares": 1, "chain_length": 1, "sequence_kernels_max": 1,
           "sequence_kernel_squares": 2}


@dataclass(frozen=True)
class Region:
    """One source region's part of the prediction."""

    source: str  # "file.py:LINE", or FIXED / OUTSIDE
    name: str    # the function that line is in
    seconds: float
    share: float  # of the predicted compile seconds
    peak_memory_bytes: float
    ops: float

    def cells(self) -> tuple[str, str, str, str, str]:
        """The region as the blame table shows it (`_COLUMNS`)."""
        return (self.source, _fmt_seconds(self.seconds), f"{self.share:.1%}",
                _fmt_bytes(self.peak_memory_bytes), self.name)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "name": self.name, "seconds": self.seconds,
                "share": self.share, "peak_memory_bytes": self.peak_memory_bytes,
                "ops": self.ops}


@dataclass(frozen=True)
class Blame:
    """The prediction and its regions, largest first (they sum to the prediction).

    Example:
        >>> b = costmodel.blame(step, params, batch)
        >>> b.regions[0].source, b.regions[0].share
        ('model.py:42', 0.71)
    """

    compile_seconds: float
    peak_memory_bytes: float
    regions: tuple[Region, ...]
    prediction: Prediction
    tree: Node | None = field(default=None, repr=False, compare=False)

    def trace(self) -> dict[str, Any]:
        """Chrome trace-event JSON of the call tree (Perfetto opens it)."""
        return trace_events(self.tree)

    def html(self) -> str:
        """A self-contained page with the call tree as an icicle chart."""
        return icicle_html(self.tree, f"costmodel blame: predicted compile "
                                      f"{_fmt_seconds(self.compile_seconds)}",
                           table=(_COLUMNS, [r.cells() for r in self.regions]))

    def __str__(self) -> str:
        # nothing is cut: file:line's column is as wide as the longest, and the function,
        # whose qualified name can run long, comes last
        wide = max([len(_COLUMNS[0]), *(len(r.source) for r in self.regions)])
        lines = [f"predicted compile {_fmt_seconds(self.compile_seconds)}, host memory "
                 f"{_fmt_bytes(self.peak_memory_bytes)} ({self.prediction.backend}"
                 f"{'/' + self.prediction.target if self.prediction.target else ''})"]
        for row in [_COLUMNS, *(r.cells() for r in self.regions)]:
            source, seconds, share, memory, name = row
            lines.append(f"{source:<{wide}} {seconds:>9} {share:>6} {memory:>9}  {name}".rstrip())
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"compile_seconds": self.compile_seconds,
                "peak_memory_bytes": self.peak_memory_bytes,
                "regions": [r.to_dict() for r in self.regions],
                "prediction": self.prediction.to_dict()}


def blame_stablehlo(text: str, backend: str | None = "cpu", target: str | None = None,
                    model=None) -> Blame:
    """Blame from StableHLO module text; only text printed with locations
    (`lowered.as_text(debug_info=True)`) names source lines, else every op is OUTSIDE."""
    from costmodel.features import normalize_target
    from costmodel.features.extract import regions_from_stablehlo

    backend, target = normalize_target(backend, target)
    features, tallies = regions_from_stablehlo(text, backend=backend, target=target)
    prediction = predict_features(features, model=model)
    return blame_prediction(prediction, tallies, prediction._artifact)


def blame_prediction(prediction: Prediction, tallies: Mapping[str, RegionTally],
                     artifact) -> Blame:
    """Divide `prediction` (made with `artifact`) among the regions of `tallies`."""
    inputs = prediction.features.model_inputs()
    names = list(tallies)
    points = counterfactuals(artifact, inputs, [tallies[n] for n in names])
    seconds = _divide("compile_seconds", prediction.compile_seconds, points, inputs, tallies,
                      names, artifact)
    memory = _divide("peak_rss_bytes", prediction.peak_memory_bytes, points, inputs, tallies,
                     names, artifact)
    regions = [Region(source, tallies[source].name if source in tallies else "",
                      float(seconds.get(source, 0.0)),
                      float(seconds.get(source, 0.0) / prediction.compile_seconds)
                      if prediction.compile_seconds > 0 else 0.0,
                      float(memory.get(source, 0.0)),
                      float(tallies[source].ops) if source in tallies else 0.0)
               for source in dict.fromkeys([*seconds, *memory])]
    regions.sort(key=lambda r: (-r.seconds, r.source))
    blame = Blame(prediction.compile_seconds, prediction.peak_memory_bytes, tuple(regions),
                  prediction)
    return replace(blame, tree=call_tree(blame, tallies))


def without_regions(inputs: Mapping[str, float],
                    tallies: list[RegionTally]) -> list[dict[str, float]]:
    """The model inputs of the program without any of the regions of `tallies`, then
    without each one: the program's inputs less the regions' counts (`RegionTally.counts`),
    the largest values and distinct shapes as the regions left give them, and the inputs
    that grow with the program but are no sum over ops shrunk with its inlined ops
    (`_SCALED`); means and the signature stay as they are."""
    every: dict[str, float] = {}
    for tally in tallies:
        for name, value in tally.counts.items():
            every[name] = every.get(name, 0.0) + value
    kept = [{} for _ in tallies]
    for name in sorted({name for tally in tallies for name in tally.largest}):
        values = sorted(((t.largest.get(name, 0.0), i) for i, t in enumerate(tallies)),
                        reverse=True)
        (top, holder), second = values[0], values[1][0] if len(values) > 1 else 0.0
        if top >= inputs[name]:  # only removing the region that holds it changes it
            kept[holder][name] = second
    holders = Counter(shape for tally in tallies for shape in tally.shapes)
    for rest, tally in zip(kept, tallies):
        rest["distinct_shapes"] = inputs["distinct_shapes"] - sum(
            holders[shape] == 1 for shape in tally.shapes)
    nothing = {name: 0.0 for tally in tallies for name in tally.largest}
    nothing["distinct_shapes"] = max(inputs["distinct_shapes"] - len(holders), 0.0)
    return [_without(inputs, counts, rest) for counts, rest in
            [(every, nothing), *((t.counts, k) for t, k in zip(tallies, kept))]]


def _without(inputs: Mapping[str, float], counts: Mapping[str, float],
             rest: Mapping[str, float]) -> dict[str, float]:
    out = {name: value - counts.get(name, 0.0) for name, value in inputs.items()}
    ops = inputs["hlo_ops_inlined"]
    left = max(out["hlo_ops_inlined"], 0.0) / ops if ops > 0 else 1.0
    for name, power in _SCALED.items():
        out[name] = inputs[name] * left ** power
    out.update(rest)
    return out


def counterfactuals(artifact, inputs: Mapping[str, float],
                    tallies: list[RegionTally]) -> dict[str, np.ndarray]:
    """The model's point prediction per target for the whole program, the program without
    any region and without each one (`without_regions`), in that order: one `predict`
    call on all the rows."""
    rows = [dict(inputs), *without_regions(inputs, tallies)]
    return {target: out["point"] for target, out in artifact.predict(rows).items()}


def _divide(target: str, total: float, points: Mapping[str, np.ndarray],
            inputs: Mapping[str, float], tallies: Mapping[str, RegionTally],
            names: list[str], artifact) -> dict[str, float]:
    """`total` of `target` divided among the region names, FIXED and SHARED by what the
    model predicts removing each saves (see the module doc)."""
    if target not in points or not math.isfinite(total) or total <= 0 or not names:
        return {}
    whole, none, without = points[target][0], points[target][1], points[target][2:]
    saved = np.maximum(whole - without, 0.0)
    fixed = max(none, 0.0)
    if not (saved.sum() > 1e-6 * whole and whole > fixed):  # the model sees no region
        return _divide_by_terms(target, total, inputs, tallies, names, artifact)
    # savings that add up to more than the prediction past the fixed cost are scaled
    # down to fit; less leaves the rest SHARED (see the module doc)
    saved *= min(1.0, (whole - fixed) / saved.sum())
    scale = total / whole  # this machine's calibration
    out = {name: float(value) * scale for name, value in zip(names, saved)}
    out[FIXED] = fixed * scale
    shared = total - sum(out.values())
    if shared > 1e-9 * total:
        out[SHARED] = shared
    return out


def _divide_by_terms(target: str, total: float, inputs: Mapping[str, float],
                     tallies: Mapping[str, RegionTally], names: list[str],
                     artifact) -> dict[str, float]:
    """`total` of `target` divided among the region names and FIXED by the baseline's terms
    (where no region's removal changes the prediction): the size law by each region's
    marginal cost (the law for the whole program less the law without the region), an
    added cost by the region's share of its count, the fixed cost its own row; the tree
    correction and calibration scale every part alike."""
    fitted = artifact.predictor.targets.get(target)
    if fitted is None:
        return {}
    counts = _region_counts(inputs, tallies, names)
    terms, added = fitted.terms, fitted.added
    k, m = len(terms), len(added)
    coef = np.asarray(fitted.coef, float)

    def size_law(values: Mapping[str, np.ndarray]) -> np.ndarray:
        logs = np.column_stack([np.log1p(np.maximum(values[t], 0.0)) for t in terms]) \
            if k else np.zeros((len(names), 0))
        start = 1 if fitted.form == "overhead" and k else 0
        return np.exp(coef[start] + logs @ coef[start + 1:start + 1 + k])

    values = _with_derived(inputs)
    whole = {t: np.full(len(names), values[t]) for t in terms}
    size = float(size_law(whole)[0]) if k or fitted.form != "overhead" else 0.0
    # a derived term (`fused_ops`: no region counts it) goes with the regions' ops
    share = counts["ops"] / counts["ops"].sum() if counts["ops"].sum() > 0 else 0.0
    without = {t: whole[t] - counts.get(t, 0.0 if t in inputs else whole[t] * share)
               for t in terms}
    marginal = np.maximum(size - size_law(without), 0.0)
    parts = {name: 0.0 for name in names}
    _spread(parts, names, size, marginal if marginal.sum() > 0 else counts["ops"])
    fixed = 0.0
    if fitted.form == "overhead" and k:
        fixed = math.exp(coef[0])
        d, c = coef[2 + k:2 + k + m], coef[2 + k + m:]
        for j, term in enumerate(added):
            cost = math.exp(d[j] + c[j] * math.log1p(max(inputs[term], 0.0)))
            _spread(parts, names, cost, counts.get(term, counts["ops"]))
    base = fixed + sum(parts.values())
    factor = total / base if base > 0 else 0.0
    out = {name: value * factor for name, value in parts.items()}
    out[FIXED] = fixed * factor
    return out


def _with_derived(inputs: Mapping[str, float]) -> dict[str, float]:
    """The model inputs with the derived columns the model computes from them (`augment`)."""
    names = tuple(inputs)
    table = augment(Table.of([inputs], names))
    return dict(zip(table.names, table.values[0]))


def _region_counts(inputs: Mapping[str, float], tallies: Mapping[str, RegionTally],
                   names: list[str]) -> dict[str, np.ndarray]:
    """Each model input the regions count, divided among them in their proportions (so
    they sum to the program's own count); `ops` always present."""
    out = {}
    for term in sorted({name for n in names for name in tallies[n].counts}):
        raw = np.array([tallies[n].counts.get(term, 0.0) for n in names], float)
        if raw.sum() > 0:
            out[term] = raw / raw.sum() * inputs.get(term, raw.sum())
    out["ops"] = out.get("hlo_ops_inlined", np.ones(len(names)))
    return out


def _spread(parts: dict[str, float], names: list[str], amount: float,
            weights: np.ndarray) -> None:
    weights = np.asarray(weights, float)
    if amount <= 0 or weights.sum() <= 0:
        return
    for name, weight in zip(names, weights / weights.sum()):
        parts[name] += amount * float(weight)


__all__ = ["FIXED", "OUTSIDE", "SHARED", "Blame", "Region", "blame_prediction",
           "blame_stablehlo"]
