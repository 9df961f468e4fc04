"""`blame`: which part of my program is slow to compile? The prediction divided among the
user's source lines.

The model predicts compile time (and host memory) as a baseline times a tree correction,
the baseline a sum of costs: a fixed cost of any compile, a power law in the program's
size, and added costs (embedded constants, folded constants, ...; see
`costmodel.training.fitting.estimator`). Each part is divided among the source regions that
make it up (`costmodel.features.regions`): the size law by each region's marginal cost
(what the law gives for the whole program minus what it gives without that region, so a
superlinear law charges big regions more than their op share), an added cost by the
region's share of its count where the walk places it (constant bytes), else by op share;
the fixed cost is its own row. The correction and this machine's calibration scale every
part alike, so the regions sum to the prediction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from costmodel.features.regions import OUTSIDE, RegionTally

from ._blame_views import Node, call_tree, icicle_html, trace_events
from ._predict import Prediction, _fmt_bytes, _fmt_seconds, predict_features

FIXED = "(fixed cost of any compile)"


@dataclass(frozen=True)
class Region:
    """One source region's part of the prediction."""

    source: str  # "file.py:LINE", or FIXED / OUTSIDE
    name: str    # the function that line is in
    seconds: float
    share: float  # of the predicted compile seconds
    peak_memory_bytes: float
    ops: float

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
                                      f"{_fmt_seconds(self.compile_seconds)}")

    def __str__(self) -> str:
        lines = [f"predicted compile {_fmt_seconds(self.compile_seconds)}, host memory "
                 f"{_fmt_bytes(self.peak_memory_bytes)} ({self.prediction.backend}"
                 f"{'/' + self.prediction.target if self.prediction.target else ''})",
                 f"{'source':<32} {'function':<24} {'seconds':>9} {'share':>6} {'memory':>9}"]
        for r in self.regions:
            lines.append(f"{r.source[-32:]:<32} {r.name[-24:]:<24} {_fmt_seconds(r.seconds):>9} "
                         f"{r.share:>6.1%} {_fmt_bytes(r.peak_memory_bytes):>9}")
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
    seconds = _divide("compile_seconds", prediction.compile_seconds, inputs, tallies, names,
                      artifact)
    memory = _divide("peak_rss_bytes", prediction.peak_memory_bytes, inputs, tallies, names,
                     artifact)
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


def _divide(target: str, total: float, inputs: Mapping[str, float],
            tallies: Mapping[str, RegionTally], names: list[str], artifact) -> dict[str, float]:
    """`total` of `target` divided among the region names and FIXED (see the module doc)."""
    fitted = artifact.predictor.targets.get(target)
    if fitted is None or not math.isfinite(total) or total <= 0 or not names:
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

    whole = {t: np.full(len(names), inputs[t]) for t in terms}
    size = float(size_law(whole)[0]) if k or fitted.form != "overhead" else 0.0
    without = {t: whole[t] - counts.get(t, 0.0) for t in terms}
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


__all__ = ["OUTSIDE", "Blame", "Region", "blame_prediction", "blame_stablehlo"]
