"""Size-aware baselines: the power laws in op counts that carry growth past the sweep.

Each is a least-squares fit on log scale. `CompileCostModel` adds boosted trees on their
residual; evaluation also reports `power_law_coef` alone as the rule-of-thumb baseline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Largest exponent of the overhead power law's first size term. Unrolled loops on CPU
# (quiet sweep, 2000 -> 4000 -> 6000 ops) grew as ops^2.6: more than the quadratic that
# HLO passes alone would give.
MAX_EXPONENT = 3.0


def power_law_coef(logs: np.ndarray, z: np.ndarray,
                   groups: np.ndarray | None = None) -> np.ndarray:
    """Intercept and exponents of `z ~ a + logs @ b` by least squares.

    With `groups`, the exponents are fitted to within-group variation only (both sides
    centred on their group means), so differences in level between groups do not bend
    the slope; the intercept then centres the residual over all rows.
    """
    if logs.shape[1] == 0 or groups is None or len(np.unique(groups)) == len(groups):
        return np.linalg.lstsq(np.column_stack([np.ones(len(z)), logs]), z, rcond=None)[0]
    frame = pd.DataFrame(np.column_stack([logs, z]), index=np.asarray(groups))
    centred = (frame - frame.groupby(level=0).transform("mean")).to_numpy()
    slope = np.linalg.lstsq(centred[:, :-1], centred[:, -1], rcond=None)[0]
    return np.concatenate([[np.mean(z - logs @ slope)], slope])


def drift_power(logs: np.ndarray, z: np.ndarray, drift: np.ndarray,
                groups: np.ndarray | None = None) -> float:
    """How much of the reference timing's variation shows in compile seconds: the exponent
    of `ref / median ref` fitted next to the size terms `logs`, clipped to [0, 1]."""
    if not np.any(drift):
        return 0.0
    coef = power_law_coef(np.column_stack([logs, drift]), z, groups)
    return float(np.clip(coef[-1], 0.0, 1.0))


def overhead_power_law(logs: np.ndarray, z: np.ndarray,
                       groups: np.ndarray | None = None) -> np.ndarray:
    """`[a0, a1, b...]` of `z ~ log(exp(a0) + exp(a1 + logs @ b))`: a fixed cost plus a power
    law, exponent of the first term in [0, MAX_EXPONENT], the others in [0, 1].

    Below a few hundred ops compile time is mostly fixed cost; a plain power law fitted to
    all sizes bends its exponent down to fit that floor and underestimates large compiles.
    With `groups`, each group gets its own `a1` while fitting (levels differ by kind of
    program, the growth does not); the returned `a1` is then refitted over all rows.
    """
    from scipy.optimize import least_squares

    k = logs.shape[1]
    codes = np.unique(groups, return_inverse=True)[1] if groups is not None else np.zeros(
        len(z), int)
    n_groups = codes.max() + 1
    start = power_law_coef(logs, z)

    def residual(p: np.ndarray) -> np.ndarray:
        return np.logaddexp(p[0], p[1 + codes] + logs @ p[1 + n_groups:]) - z

    lower = np.r_[-np.inf, np.full(n_groups, -np.inf), np.zeros(k)]
    upper = np.r_[np.inf, np.full(n_groups, np.inf), MAX_EXPONENT, np.ones(k - 1)]
    slope = np.clip(start[1:], lower[1 + n_groups:] + 1e-6, upper[1 + n_groups:] - 1e-6)
    p0 = np.r_[np.log(np.exp(z).min()), np.full(n_groups, np.median(z - logs @ slope)), slope]
    p = least_squares(residual, p0, bounds=(lower, upper), loss="soft_l1", f_scale=0.5).x
    a0, b = p[0], p[1 + n_groups:]
    a1 = least_squares(lambda a: np.logaddexp(a0, a[0] + logs @ b) - z,
                       [np.median(p[1:1 + n_groups])], loss="soft_l1", f_scale=0.5).x[0]
    return np.r_[a0, a1, b]


def baseline_log(coef: np.ndarray, logs: np.ndarray, form: str) -> np.ndarray:
    """The baseline's log prediction for `form` ("overhead" or a plain power law)."""
    if form == "overhead" and logs.shape[1]:
        return np.logaddexp(coef[0], coef[1] + logs @ coef[2:])
    return coef[0] + logs @ coef[1:]
