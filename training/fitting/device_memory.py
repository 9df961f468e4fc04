"""Host memory in the device correction: what the chip's host adds to a compile's RSS
growth over the sweep machine's, from fresh-process compiles there."""

from __future__ import annotations

import math

import numpy as np


def folds(log_errors: np.ndarray) -> dict:
    """Fold figures of log(measured / predicted) values."""
    f = np.sort(np.exp(np.abs(log_errors)))
    return {"median_fold": float(np.median(f)),
            "p90_fold": float(f[min(len(f) - 1, math.ceil(0.9 * len(f)) - 1)]),
            "max_fold": float(f[-1]), "bias": float(np.exp(np.mean(log_errors))),
            "median_abs_log": float(np.median(np.abs(log_errors)))}


def memory_points(p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fresh-process RSS growth on the chip's host, the model's held-out prediction,
    library) of the programs with both."""
    fresh = p.frame["fresh_rss"].to_numpy(float)
    pred = p.frame["rss_pred"].to_numpy(float)
    has = np.isfinite(fresh) & np.isfinite(pred) & (fresh > 0) & (pred > 0)
    return fresh, pred, has


def fit_memory(fresh: np.ndarray, pred: np.ndarray) -> float:
    """Bytes the chip's host adds to a compile's RSS growth over the sweep machine's: the
    median difference (its cores' allocator arenas and threads come with every compile,
    whatever its size)."""
    return float(np.median(fresh - pred))


def memory_scores(p, keep: np.ndarray) -> dict:
    """Host RSS growth against fresh-process measurements on the chip's host, programs
    growing more than 50 MB: the model as it is, and with the host's bytes added (fitted
    with each library held out)."""
    fresh, pred, has = memory_points(p)
    libs = p.frame["library"].to_numpy()
    big = keep & has & (fresh > 50e6)
    if not big.any():
        return {}
    added = np.array([fit_memory(fresh[has & (libs != lib)], pred[has & (libs != lib)])
                      for lib in libs[big]])
    return {"fresh_rss_over_50MB": {
        "n": int(big.sum()), "model": folds(np.log(fresh[big] / pred[big])),
        "with_host_bytes": folds(np.log(fresh[big] / (pred[big] + added)))}}
