"""Split-conformal intervals from out-of-fold residuals (log scale): one pair for all
sizes, and one per tercile of predicted size where there are enough residuals."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from costmodel.models.predictor import Bands, TargetModel

# Interval bands by predicted size: three, each from at least this many residuals.
SIZE_BANDS = 3
MIN_BAND_RESIDUALS = 40
# Fewest out-of-fold residuals of the `interval_rows` that set the intervals on their own
# (enough for every size band); with fewer, every row's residual counts.
MIN_INTERVAL_RESIDUALS = SIZE_BANDS * MIN_BAND_RESIDUALS


def interval_rows(rows: np.ndarray, calibrating: np.ndarray) -> np.ndarray:
    """Of `rows`, the `calibrating` ones where at least `MIN_INTERVAL_RESIDUALS` are, else
    all of them (real programs alone decide where there are enough of them)."""
    if np.sum(rows & calibrating) >= MIN_INTERVAL_RESIDUALS:
        return rows & calibrating
    return rows


def with_intervals(fitted: TargetModel, predicted: np.ndarray, z: np.ndarray,
                   coverage: float) -> TargetModel:
    """`fitted` with conformal intervals (one pair, and by size band) from out-of-fold
    predictions `predicted` of labels `z` (log scale)."""
    residual = z - predicted
    lo, hi = conformal_bounds(residual, coverage)
    return replace(fitted, lo=lo, hi=hi, bands=size_bands(predicted, residual, coverage),
                   oof_residual_mad=float(np.median(np.abs(residual)))
                   if len(residual) else None)


def size_bands(predicted: np.ndarray, residual: np.ndarray, coverage: float) -> Bands | None:
    """Conformal bounds per tercile of the out-of-fold prediction (log scale).

    Small and large programs are not predicted equally well (the largest real programs
    were over-predicted 10-25x while small ones sat within 2x), so one band for all would
    be too wide for some sizes and too narrow for others. None when too few residuals.
    """
    if len(residual) < SIZE_BANDS * MIN_BAND_RESIDUALS:
        return None
    edges = np.quantile(predicted, np.arange(1, SIZE_BANDS) / SIZE_BANDS)
    band = np.searchsorted(edges, predicted, side="right")
    bounds = [conformal_bounds(residual[band == b], coverage) for b in range(SIZE_BANDS)]
    return Bands(edges=edges, lo=np.array([lo for lo, _ in bounds]),
                 hi=np.array([hi for _, hi in bounds]))


def conformal_bounds(residual: np.ndarray, coverage: float) -> tuple[float, float]:
    """Lower and upper residual quantiles whose band holds `coverage` of new residuals.

    Split-conformal with the finite-sample correction: the k-th smallest of n residuals
    with k = ceil((n + 1) * q) bounds a new one with probability >= q.
    """
    residual = np.sort(np.asarray(residual, float))
    n = len(residual)
    if n == 0:
        return -math.inf, math.inf
    tail = (1.0 - coverage) / 2.0
    # the epsilon keeps float noise ((1 - 0.9) / 2 * 40 = 1.9999...) off the rank
    upper = math.ceil((n + 1) * (1.0 - tail) - 1e-9)
    lower = math.floor((n + 1) * tail + 1e-9)
    hi = residual[upper - 1] if upper <= n else math.inf
    lo = residual[lower - 1] if lower >= 1 else -math.inf
    return float(lo), float(hi)
