"""Size-aware baselines: the power laws in op counts that carry growth past the sweep.

Each is a least-squares fit on log scale. `CompileCostModel` adds boosted trees on their
residual; evaluation also reports `power_law_coef` alone as the rule-of-thumb baseline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.models.power_law import overhead_log

# Largest exponent of the overhead power law's first size term. Unrolled loops on CPU
# (quiet sweep, 2000 -> 4000 -> 6000 ops) grew as ops^2.6: more than the quadratic that
# HLO passes alone would give.
MAX_EXPONENT = 3.0
# Largest exponent of an added term (`overhead_power_law`'s `extra`). Compile time grew a
# little faster than the bytes of embedded constants (exponent ~1.25), and as kernels per
# sequence cubed or more (squares to the ~1.5-1.7: at a bound of 1.5 the fit sat on it).
EXTRA_EXPONENT = 2.0


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


def overhead_power_law(logs: np.ndarray, z: np.ndarray, groups: np.ndarray | None = None,
                       extra: np.ndarray | None = None,
                       weight: np.ndarray | None = None) -> np.ndarray:
    """`[a0, a1, b..., d..., c...]` of `z ~ log(exp(a0) + exp(a1 + logs @ b) + sum_j
    exp(d_j + c_j * extra_j))`: a fixed cost, a power law in the size counts (exponent of the
    first in [0, MAX_EXPONENT], the others in [0, 1]), and one added power law per column
    of `extra` (exponents in [0, EXTRA_EXPONENT]).

    Below a few hundred ops compile time is mostly fixed cost; a plain power law fitted to
    all sizes bends its exponent down to fit that floor and underestimates large compiles.
    An `extra` term is a cost that adds to the rest instead of scaling it: embedding large
    constants costs the same whether they feed four ops or four hundred. With `groups`,
    each group gets its own `a1` while fitting (levels differ by kind of program, the
    growth does not); the returned `a1` is then refitted over all rows. `weight` scales
    each row's share of the loss.
    """
    from scipy.optimize import least_squares

    k = logs.shape[1]
    extra = np.zeros((len(z), 0)) if extra is None else extra
    m = extra.shape[1]
    codes = np.unique(groups, return_inverse=True)[1] if groups is not None else np.zeros(
        len(z), int)
    n_groups = codes.max() + 1
    start = power_law_coef(logs, z)
    root = np.ones(len(z)) if weight is None else np.sqrt(np.asarray(weight, float))

    def unpack(p: np.ndarray):
        return p[0], p[1:1 + n_groups], p[1 + n_groups:1 + n_groups + k], p[1 + n_groups + k:]

    def residual(p: np.ndarray) -> np.ndarray:
        a0, a1, b, added = unpack(p)
        return root * (overhead_log(a0, a1[codes], b, added, logs, extra) - z)

    lower = np.r_[-np.inf, np.full(n_groups, -np.inf), np.zeros(k), np.full(m, -np.inf),
                  np.zeros(m)]
    upper = np.r_[np.inf, np.full(n_groups, np.inf), MAX_EXPONENT, np.ones(k - 1),
                  np.full(m, np.inf), np.full(m, EXTRA_EXPONENT)]
    slope = np.clip(start[1:], lower[1 + n_groups:1 + n_groups + k] + 1e-6,
                    upper[1 + n_groups:1 + n_groups + k] - 1e-6)
    floor = np.log(np.exp(z).min())
    # extra terms start small: one e-fold below the floor at their largest count
    p0 = np.r_[floor, np.full(n_groups, np.median(z - logs @ slope)), slope,
               floor - 1 - 0.5 * extra.max(axis=0, initial=0.0), np.full(m, 0.5)]
    p = least_squares(residual, p0, bounds=(lower, upper), loss="soft_l1", f_scale=0.5).x
    a0, a1_groups, b, added = unpack(p)
    a1 = least_squares(lambda a: root * (overhead_log(a0, a[0], b, added, logs, extra) - z),
                       [np.median(a1_groups)], loss="soft_l1", f_scale=0.5).x[0]
    return np.r_[a0, a1, b, added]
