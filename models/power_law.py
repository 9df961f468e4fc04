"""The baseline's formula: a power law in size counts, or a fixed cost plus power laws.

Runtime code (numpy only); fitting the coefficients is `costmodel.training.fitting.baseline`.
"""

from __future__ import annotations

import numpy as np


def overhead_log(a0, a1, b: np.ndarray, added: np.ndarray, logs: np.ndarray,
                 extra: np.ndarray) -> np.ndarray:
    """log(exp(a0) + exp(a1 + logs @ b) + sum_j exp(d_j + c_j * extra_j)), with `added`
    holding the d's then the c's."""
    m = extra.shape[1]
    terms = np.empty((2 + m, len(logs)))
    terms[0] = a0
    terms[1] = a1 + logs @ b
    terms[2:] = (added[:m] + added[m:2 * m] * extra).T  # all at once, each as one by one
    return np.logaddexp.reduce(terms, axis=0)


def baseline_log(coef: np.ndarray, logs: np.ndarray, form: str,
                 extra: np.ndarray | None = None) -> np.ndarray:
    """The baseline's log prediction for `form` ("overhead" or a plain power law); `extra`
    holds the overhead form's added terms, as fitted."""
    if form == "overhead" and logs.shape[1]:
        k = logs.shape[1]
        extra = np.zeros((len(logs), 0)) if extra is None else extra
        return overhead_log(coef[0], coef[1], coef[2:2 + k], coef[2 + k:], logs, extra)
    return coef[0] + logs @ coef[1:]
