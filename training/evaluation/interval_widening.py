"""Widening the 90% intervals to what programs outside the corpus show.

The intervals are split-conformal on out-of-fold residuals with whole libraries held out
(`fitting.estimator`), and cover about 93% of the corpus's own libraries held out. Programs
of libraries nobody here wrote fall outside them more often: of the stored benches'
programs (`outside`), 70% and 75% of 40 programs of 11 outside libraries (two CPU runs) and
84% of the library and pure-JAX benches were inside (CPU model of 2026-12-02). The corpus's
libraries were written into the corpus by one hand and resemble each other more than they
resemble anyone else's code, so held out one at a time they understate a stranger's error.

So the bench programs, which no training row holds, set a factor k by which each interval's
log offsets grow: the smallest k >= 1 that puts the nominal share of them inside, each
library (a bench row's `library`, else the first word of its program's name) weighing the
same however many programs it has. `held_out_coverage` is the honest check of k: each
library's programs are scored against a k fitted without them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.models.predictor import Bands, Predictor

from .outside import current_results, scaled_predictions

# Only compile seconds are widened: the benches time compiles; their memory columns are not
# in every bench's stored results.
WIDENED_TARGET = "compile_seconds"


def bench_library(row: dict) -> str:
    """What a bench row holds out together: its library, else its program's first word
    (the benches name programs library first: "haiku resnet18", "odeint mlp grad")."""
    return row.get("library") or row["program"].split()[0]


def interval_ratios(artifact, data: dict) -> pd.DataFrame:
    """Per program of one stored bench run: `ratio`, its log error over its interval's log
    offset on the side it fell (inside the interval: at most 1; widened k times: at most
    k), and its `library`. Predictions are scaled as `outside.score` scales them."""
    point, lo, hi, measured = scaled_predictions(artifact, data)
    error = np.log(measured / point)
    offset = np.where(error >= 0, np.log(hi / point), np.log(point / lo))
    return pd.DataFrame({"ratio": np.abs(error) / offset,
                         "library": [bench_library(row) for row in data["results"]]})


def bench_ratios(artifact, folder: Path, backend: str, target: str = "") -> pd.DataFrame:
    """`interval_ratios` of every bench run stored in `folder` for (backend, target) and
    this model's feature schema, with a `bench` column naming the run."""
    parts = [interval_ratios(artifact, data).assign(bench=name)
             for name, data in current_results(folder, backend, target).items()]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        {"ratio": [], "library": [], "bench": []})


def widening_factor(ratio, library, coverage: float = 0.9) -> float:
    """The smallest k >= 1 with `coverage` of the library-weighted ratios at most k.

    Every library weighs 1 (its programs share it). With L libraries the quantile taken is
    coverage * (L + 1) / L, the split-conformal correction counted in libraries, since a
    new program is most like a new library; past the largest ratio, that ratio.
    """
    ratio, library = np.asarray(ratio, float), np.asarray(library)
    if len(ratio) == 0:
        return 1.0
    names, index, counts = np.unique(library, return_inverse=True, return_counts=True)
    order = np.argsort(ratio)
    weight = (1.0 / counts[index])[order]
    cumulative = np.cumsum(weight) / weight.sum()
    share = min(1.0, coverage * (len(names) + 1) / len(names))
    # the epsilon keeps float noise in the cumulative sum off the rank
    rank = min(int(np.searchsorted(cumulative, share - 1e-9)), len(ratio) - 1)
    return max(1.0, float(ratio[order][rank]))


def held_out_coverage(ratios: pd.DataFrame, coverage: float = 0.9) -> dict[str, float]:
    """Share of programs inside their widened interval when k is fitted without their own
    library, per bench run and over all (`"all"`)."""
    inside = np.zeros(len(ratios), bool)
    libraries = ratios["library"].to_numpy()
    for library in np.unique(libraries):
        mine = libraries == library
        k = widening_factor(ratios["ratio"][~mine], libraries[~mine], coverage)
        inside[mine] = ratios["ratio"][mine].to_numpy() <= k
    shares = {bench: float(inside[(ratios["bench"] == bench).to_numpy()].mean())
              for bench in ratios["bench"].unique()}
    return {**shares, "all": float(inside.mean()) if len(inside) else math.nan}


def widen(predictor: Predictor, factor: float, target: str = WIDENED_TARGET) -> Predictor:
    """`predictor` with `target`'s interval log offsets (one pair, and the size bands')
    multiplied by `factor`."""
    fitted = predictor.targets[target]
    bands = None if fitted.bands is None else Bands(
        edges=fitted.bands.edges, lo=fitted.bands.lo * factor, hi=fitted.bands.hi * factor)
    widened = replace(fitted, lo=fitted.lo * factor, hi=fitted.hi * factor, bands=bands)
    return replace(predictor, targets={**predictor.targets, target: widened})


def widened_coverage(predictions: pd.DataFrame, split: str, factor: float,
                     target: str = WIDENED_TARGET) -> float:
    """Coverage of the costmodel's held-out intervals on `split` (an evaluation's
    predictions) had they been widened by `factor`."""
    chosen = predictions[(predictions["split"] == split) & (predictions["target"] == target)
                         & (predictions["model"] == "costmodel")]
    point, lo, hi, actual = (chosen[c].to_numpy(float) for c in ("point", "lo", "hi", "actual"))
    low, high = point * (lo / point) ** factor, point * (hi / point) ** factor
    return float(np.mean((actual >= low) & (actual <= high)))


def fit_widening(artifact, folder: Path, coverage: float = 0.9) -> dict | None:
    """What `widen` needs and the card reports, from the bench runs stored in `folder` for
    `artifact`'s backend and target: the factor, the coverage before (k = 1) and at it per
    bench run, and with each library held out of k. None when no run is stored."""
    ratios = bench_ratios(artifact, folder, artifact.backend, artifact.target)
    if len(ratios) == 0:
        return None
    factor = widening_factor(ratios["ratio"], ratios["library"], coverage)
    by_bench = ratios.groupby("bench", sort=True)["ratio"]
    return {"factor": factor, "coverage": coverage, "programs": int(len(ratios)),
            "libraries": int(ratios["library"].nunique()),
            "coverage_before": {b: float((r <= 1).mean()) for b, r in by_bench},
            "coverage_after": {b: float((r <= factor).mean()) for b, r in by_bench},
            "coverage_library_held_out": held_out_coverage(ratios, coverage)}


def shipped_widening(backend: str, target: str = "") -> dict:
    """The widening the shipped model for (backend, target) was given: `{"factor",
    "from"}` (its version), factor 1 without one. A model retrained from sweep data has no
    benches to fit its own (an installed package ships none) and takes this one."""
    from costmodel.models import load_default

    try:
        shipped = load_default(backend, target)
    except ValueError:  # no shipped model for this backend or target: nothing to carry
        return {"factor": 1.0, "from": None}
    fitted = (shipped.manifest.get("metrics") or {}).get("interval_widening") or {}
    return {"factor": float(fitted.get("factor", 1.0)), "from": shipped.version}


def with_shipped_widening(estimator, backend: str, target: str = "") -> tuple[Predictor, dict]:
    """`estimator`'s predictor widened as the shipped model's was, and the record of it."""
    carried = shipped_widening(backend, target)
    return widen(estimator.predictor, carried["factor"]), carried
