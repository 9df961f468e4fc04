"""Fitting how far the intervals widen for programs unlike the training rows.

The intervals are split-conformal on out-of-fold residuals with whole libraries held out
(`fitting.estimator`), and cover about 93% of the corpus's own libraries held out. Programs
of libraries nobody here wrote fall outside them more often, and the more so the farther
their model inputs lie from the training rows (`costmodel.models.novelty`): the corpus's
libraries, written into the corpus by one hand, resemble each other more than anyone
else's code.

So the stored bench programs, which no training row holds, fit a `Widening`: the interval's
log offsets times `factor * max(1, distance / onset) ** power`. For each (onset, power) of a
grid the factor is the smallest that puts the nominal share of the bench programs inside,
each library (a bench row's `library`, else the first word of its program's name)
weighing the same; the rule kept is the narrowest whose coverage of the corpus's libraries
held out (the evaluation's `leave_library_out` predictions, each row's distance measured
from the rows of the other libraries) stays within `CORPUS_COVERAGE` (if none does, the
narrowest over bench and corpus programs together). Without those predictions only one
factor of at least 1 is fitted. `held_out_coverage` is the honest
check: each bench library's programs scored against a rule fitted without them.

Each widened quantity (`WIDENED_TARGETS`: compile seconds, peak host memory) gets a rule of
its own, fitted on the bench runs that measured it: every bench times compiles, the
outside-libraries runs also measure host memory, and `bench/evaluations/bench_memory.py` measures it for
the library and unseen benches' programs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models.novelty import Novelty, Widening
from costmodel.models.predictor import Predictor, to_log

from ..fitting.fit import features_frame, libraries
from .outside import current_results, measures, scaled_predictions, stored_inputs

# The corpus's libraries held out should stay covered as the issue asks of any held-out
# library (85-95% for a 90% interval) while strangers' programs get wider intervals.
CORPUS_COVERAGE = (0.85, 0.95)
# Where the widening may start to grow (quantiles of the bench programs' distances), and
# how steeply (0: one factor for all).
ONSET_QUANTILES = tuple(np.arange(1, 10) / 10)
POWERS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
RATIO_COLUMNS = ("ratio", "library", "distance")


# Relative margin above the ratio a widening is fitted to (`library_quantile`).
RANK_MARGIN = 1e-9


def bench_library(row: dict) -> str:
    """What a bench row holds out together: its library, else its program's first word
    (the benches name programs library first: "haiku resnet18", "odeint mlp grad")."""
    return row.get("library") or row["program"].split()[0]


def unwidened(artifact):
    """`artifact` with its predictor's intervals as its residuals set them."""
    return replace(artifact, predictor=replace(artifact.predictor, widenings={}))


def interval_ratios(artifact, data: dict, quantity: str = "compile_seconds") -> pd.DataFrame:
    """Per program of one stored bench run: `ratio`, the log error of its `quantity` over
    its unwidened interval's log offset on the side it fell (inside: at most 1; inside an
    interval widened s times: at most s), its `library` and its `distance` from the
    training rows. Predictions are scaled as `outside.score` scales them."""
    point, lo, hi, measured = scaled_predictions(unwidened(artifact), data, quantity)
    return pd.DataFrame({"ratio": _ratio(quantity, point, lo, hi, measured),
                         "library": [bench_library(row) for row in data["results"]],
                         "distance": artifact.predictor.distance(stored_inputs(data))})


def _ratio(quantity: str, point, lo, hi, actual) -> np.ndarray:
    """|log error| over the interval's log offset on its side, both on the scale the
    predictor widens them on (`to_log`: the log of the value plus the quantity's offset)."""
    z, z_lo, z_hi, z_actual = (to_log(quantity, values) for values in (point, lo, hi, actual))
    error = z_actual - z
    return np.abs(error) / np.where(error >= 0, z_hi - z, z - z_lo)


def bench_ratios(artifact, folder: Path, backend: str, target: str = "",
                 quantity: str = "compile_seconds") -> pd.DataFrame:
    """`interval_ratios` of `quantity` of every bench run stored in `folder` for (backend,
    target) and this model's feature schema that measured it, with a `bench` column
    naming the run."""
    parts = [interval_ratios(artifact, data, quantity).assign(bench=name)
             for name, data in current_results(folder, backend, target).items()
             if measures(data, quantity)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        {name: [] for name in (*RATIO_COLUMNS, "bench")})


def corpus_ratios(predictions: pd.DataFrame, rows: pd.DataFrame,
                  quantity: str = "compile_seconds") -> pd.DataFrame:
    """`interval_ratios` of the corpus's libraries held out: the costmodel's
    `leave_library_out` predictions of `quantity` (each with its row's `key`,
    `evaluate.with_keys`), each row's distance measured from the rows of every other
    library, as its fold model saw them."""
    chosen = predictions[(predictions["split"] == "leave_library_out")
                         & (predictions["target"] == quantity)
                         & (predictions["model"] == "costmodel")]
    position = pd.Series(np.arange(len(rows)), index=rows["key"].to_numpy())
    position = position[~position.index.duplicated()]
    chosen = chosen[chosen["key"].isin(position.index)]
    index = position[chosen["key"].to_numpy()].to_numpy()
    values, library = features_frame(rows).to_numpy(float), libraries(rows)
    distance = held_out_distances(values, library, values[index], library[index])
    point, lo, hi, actual = (chosen[c].to_numpy(float) for c in ("point", "lo", "hi", "actual"))
    return pd.DataFrame({"ratio": _ratio(quantity, point, lo, hi, actual), "library": library[index],
                         "distance": distance})


def held_out_distances(values: np.ndarray, library: np.ndarray, points: np.ndarray,
                       of: np.ndarray) -> np.ndarray:
    """Each of `points` (model inputs, one row each, of library `of`) its distance from
    the training rows `values` of every other library, as a fold model with its library
    held out saw them."""
    distance = np.empty(len(points))
    for name in np.unique(of):
        mine = of == name
        distance[mine] = Novelty.of(values[library != name]).distance(points[mine])
    return distance


def library_quantile(ratio, library, coverage: float = 0.9) -> float:
    """The smallest k with `coverage` of the library-weighted ratios at most k.

    Every library weighs 1 (its programs share it). With L libraries the quantile taken is
    coverage * (L + 1) / L, the split-conformal correction counted in libraries, since a
    new program is most like a new library; past the largest ratio, that ratio. 0 for none.
    The ratio at that rank is returned a hair larger, so its program stays inside however
    the widened interval is computed again (in log offsets, scaled by a calibration).
    """
    ratio, library = np.asarray(ratio, float), np.asarray(library)
    if len(ratio) == 0:
        return 0.0
    names, index, counts = np.unique(library, return_inverse=True, return_counts=True)
    order = np.argsort(ratio)
    weight = (1.0 / counts[index])[order]
    cumulative = np.cumsum(weight) / weight.sum()
    share = min(1.0, coverage * (len(names) + 1) / len(names))
    # the epsilon keeps float noise in the cumulative sum off the rank
    rank = min(int(np.searchsorted(cumulative, share - 1e-9)), len(ratio) - 1)
    return float(ratio[order][rank]) * (1.0 + RANK_MARGIN)


def fit_rule(bench: pd.DataFrame, corpus: pd.DataFrame | None = None,
             coverage: float = 0.9) -> Widening:
    """The `Widening` the bench ratios ask for (module docstring); one factor of at least
    1 without `corpus` ratios, the narrowest rule that keeps them within `CORPUS_COVERAGE`
    with them. If none does, the narrowest over the bench and corpus programs together:
    ranked by how close each came to the band, a rule a few corpus rows nearer to it
    could win at several times another's width (cpu-9cc05d83-52d0be: corpus 95.9% against
    97.6%, log offsets x5.1 against x1.6 on the benches)."""
    if corpus is None or len(corpus) == 0:
        return Widening(factor=max(1.0, library_quantile(bench["ratio"], bench["library"],
                                                          coverage)))
    distance = bench["distance"].to_numpy(float)
    everywhere = np.concatenate([distance, corpus["distance"].to_numpy(float)])
    shapes = {(math.inf, 0.0)} | {(float(np.quantile(distance, q)), p)
                                  for q in ONSET_QUANTILES for p in POWERS if p > 0}
    low, high = CORPUS_COVERAGE
    within, outside = [], []
    for onset, power in sorted(shapes):
        shape = Widening(1.0, onset, power)
        factor = library_quantile(bench["ratio"] / shape.scale(distance), bench["library"],
                                  coverage)
        rule = Widening(factor, onset, power).canonical()
        if low <= inside(corpus, rule).mean() <= high:
            within.append((rule.scale(distance).mean(), rule))
        else:
            outside.append((rule.scale(everywhere).mean(), rule))
    return min(within or outside, key=lambda pair: pair[0])[1]


def inside(ratios: pd.DataFrame, rule: Widening) -> np.ndarray:
    """Whether each program falls inside its interval widened by `rule`."""
    return ratios["ratio"].to_numpy(float) <= rule.scale(ratios["distance"].to_numpy(float))


def held_out_coverage(bench: pd.DataFrame, corpus: pd.DataFrame | None = None,
                      coverage: float = 0.9) -> dict[str, float]:
    """Share of bench programs inside their widened interval when the rule is fitted
    without their own library, per bench run and over all (`"all"`)."""
    covered = np.zeros(len(bench), bool)
    library = bench["library"].to_numpy()
    for name in np.unique(library):
        mine = library == name
        covered[mine] = inside(bench[mine], fit_rule(bench[~mine], corpus, coverage))
    shares = {run: float(covered[(bench["bench"] == run).to_numpy()].mean())
              for run in bench["bench"].unique()}
    return {**shares, "all": float(covered.mean()) if len(covered) else math.nan}


def widen(predictor: Predictor, rules: dict[str, Widening]) -> Predictor:
    """`predictor` with each quantity's interval widened by its rule in `rules`."""
    return replace(predictor, widenings=dict(rules))


def fit_widening(bench: pd.DataFrame, corpus: pd.DataFrame | None = None,
                 coverage: float = 0.9) -> dict | None:
    """The rule (`fit_rule`) and what the card reports of it: coverage before (the
    unwidened interval) and after per bench run, with each library held out of the fit,
    and of the corpus's libraries held out; the mean multiplier of the interval's log
    width on the benches and the corpus. None without bench programs."""
    if len(bench) == 0:
        return None
    rule = fit_rule(bench, corpus, coverage)
    runs = bench.groupby("bench", sort=True)
    report = {**rule.as_dict(), "coverage": coverage, "programs": int(len(bench)),
              "libraries": int(bench["library"].nunique()),
              "coverage_before": {b: float((r["ratio"] <= 1).mean()) for b, r in runs},
              "coverage_after": {b: float(inside(r, rule).mean()) for b, r in runs},
              "coverage_library_held_out": held_out_coverage(bench, corpus, coverage),
              "mean_scale": {"benches": float(rule.scale(bench["distance"]).mean())}}
    if corpus is not None and len(corpus):
        report["leave_library_out_coverage_before"] = float((corpus["ratio"] <= 1).mean())
        report["leave_library_out_coverage"] = float(inside(corpus, rule).mean())
        report["mean_scale"]["leave_library_out"] = float(rule.scale(corpus["distance"]).mean())
    return report


def widening_reports(metrics: dict | None) -> dict[str, dict]:
    """A model manifest's widening records by quantity (`fit_widening`'s reports, or the
    carried `shipped_widening`); a record of before host memory widened is compile time's."""
    recorded = (metrics or {}).get("interval_widening") or {}
    if "factor" in recorded:
        return {"compile_seconds": recorded}
    return {quantity: report for quantity, report in recorded.items() if report}


def rules_of(reports: dict[str, dict]) -> dict[str, Widening]:
    """The `Widening` of each quantity's record."""
    return {quantity: Widening.from_dict(report) for quantity, report in reports.items()}


def shipped_widening(backend: str, target: str = "") -> dict[str, dict]:
    """The widenings the shipped model for (backend, target) was given, by quantity
    (`Widening.as_dict` and `"from"`, its version); none without a shipped model. A model
    retrained from sweep data has no benches to fit its own (an installed package ships
    none) and takes these."""
    from costmodel.models import load_default

    try:
        shipped = load_default(backend, target)
    except ValueError:  # no shipped model for this backend or target: nothing to carry
        return {}
    fitted = widening_reports(shipped.manifest.get("metrics"))
    return {quantity: {**Widening.from_dict(report).as_dict(), "from": shipped.version}
            for quantity, report in fitted.items()}


def with_shipped_widening(estimator, backend: str, target: str = ""
                          ) -> tuple[Predictor, dict[str, dict]]:
    """`estimator`'s predictor widened as the shipped model's was (its distances measured
    from its own training rows), and the record of it."""
    carried = shipped_widening(backend, target)
    return widen(estimator.predictor, rules_of(carried)), carried
