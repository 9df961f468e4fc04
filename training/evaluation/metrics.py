"""Accuracy metrics for cost predictions: pure functions of arrays, no fitting.

Errors are ratios, because compile times span four orders of magnitude: a prediction
of 2 s for a 1 s compile is as wrong as 0.5 s. The fold error of one prediction is
`max(pred / actual, actual / pred)` (1.0 is exact).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

import numpy as np

METRIC_NAMES = ("median_fold", "p90_fold", "within_2x", "spearman", "coverage")


def _positive(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if np.any(~(array > 0)):
        raise ValueError(f"{name} must be positive and finite for ratio errors")
    return array


def fold_errors(pred: Sequence[float], actual: Sequence[float]) -> np.ndarray:
    """Per-prediction fold error `max(pred/actual, actual/pred)`.

    Example:
        >>> fold_errors([2.0, 1.0], [1.0, 4.0])
        array([2., 4.])
    """
    pred, actual = _positive(pred, "pred"), _positive(actual, "actual")
    return np.exp(np.abs(np.log(pred) - np.log(actual)))


def median_fold(pred: Sequence[float], actual: Sequence[float]) -> float:
    """Median fold error."""
    return float(np.median(fold_errors(pred, actual)))


def p90_fold(pred: Sequence[float], actual: Sequence[float]) -> float:
    """90th percentile of the fold error (linear interpolation between order statistics)."""
    return float(np.percentile(fold_errors(pred, actual), 90))


def within(pred: Sequence[float], actual: Sequence[float], factor: float = 2.0) -> float:
    """Fraction of predictions within `factor` of the actual value (inclusive)."""
    return float(np.mean(fold_errors(pred, actual) <= factor * (1 + 1e-12)))


def median_abs_log_error(pred: Sequence[float], actual: Sequence[float]) -> float:
    """Median |log(pred) - log(actual)|: `log(median_fold)`, the score the retrain uses."""
    return float(np.median(np.log(fold_errors(pred, actual))))


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks starting at 1, ties given their average rank."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=float)
    ranks[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def spearman(pred: Sequence[float], actual: Sequence[float]) -> float:
    """Spearman rank correlation (Pearson correlation of tie-averaged ranks); NaN if constant."""
    a, b = _ranks(np.asarray(pred, float)), _ranks(np.asarray(actual, float))
    if len(a) < 2 or a.std() == 0 or b.std() == 0:
        return math.nan
    return float(np.corrcoef(a, b)[0, 1])


def coverage(lo: Sequence[float], hi: Sequence[float], actual: Sequence[float]) -> float:
    """Fraction of actual values inside their interval `[lo, hi]`."""
    lo, hi, actual = (np.asarray(v, dtype=float) for v in (lo, hi, actual))
    return float(np.mean((actual >= lo) & (actual <= hi)))


def summarize(pred: Sequence[float], actual: Sequence[float],
              lo: Sequence[float] | None = None,
              hi: Sequence[float] | None = None) -> dict[str, float | int | None]:
    """All metrics of `METRIC_NAMES` plus `n`; coverage is None without an interval.

    Example:
        >>> summarize([1, 2], [1, 1])["median_fold"]
        1.5
    """
    if len(actual) == 0:
        return {**dict.fromkeys(METRIC_NAMES), "n": 0}
    return {
        "median_fold": median_fold(pred, actual),
        "p90_fold": p90_fold(pred, actual),
        "within_2x": within(pred, actual, 2.0),
        "spearman": spearman(pred, actual),
        "coverage": None if lo is None or hi is None else coverage(lo, hi, actual),
        "n": int(len(actual)),
    }


def repeat_fold_errors(repeats: Iterable[Sequence[float] | str]) -> np.ndarray:
    """Fold error of every individual repeat against the median of its own program.

    `repeats` holds one list of repeated timings per program (or its JSON text, as in
    the dataset's `compile_seconds_all`); programs measured once are skipped.
    """
    errors: list[np.ndarray] = []
    for times in repeats:
        if isinstance(times, str):
            times = json.loads(times)
        if times is None or len(times) < 2:
            continue
        times = np.asarray(times, dtype=float)
        errors.append(fold_errors(times, np.full(len(times), np.median(times))))
    return np.concatenate(errors) if errors else np.array([])


def noise_floor(repeats: Iterable[Sequence[float] | str]) -> dict[str, float | int | None]:
    """How far one measurement lands from the median of its repeats: the best a model of
    single measurements could hope for. Returns median and p90 fold error and count."""
    errors = repeat_fold_errors(repeats)
    if len(errors) == 0:
        return {"median_fold": None, "p90_fold": None, "n": 0}
    return {"median_fold": float(np.median(errors)),
            "p90_fold": float(np.percentile(errors, 90)), "n": int(len(errors))}
