"""Retraining safely: screen untrusted rows, then compare models on rows neither trained on.

Two defences, both used by the service's `POST /v1/retrain`:

- `suspect_rows`: a stored sample is dropped when its compile time is far from what the
  current model predicts *and* far from what its nearest neighbours in feature space show
  (a new kind of program is far from the model, but its neighbours agree with it).
- `compare`: the candidate and the current model are scored on the same held-out rows.
  The served model may have trained on them (the shipped one trained on every shipped
  row), which flatters it; its recipe is then refitted on the candidate's training rows
  it knew, and the current model counts as no better than that refit. The candidate is
  promoted only when it beats that score by more than noise (`MIN_GAIN`), and when, on
  the held-out rows nobody sent (`trusted`: the shipped rows), it is no worse than that
  bar by more than `TRUSTED_SLACK`: samples alone, however many, cannot earn a promotion.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from costmodel.models.predictor import as_predictor

from ..fitting.estimator import CompileCostModel, to_log
from ..fitting.fit import features_frame, train

# Modified z-score past which a residual is an outlier (Iglewicz and Hoaglin's 3.5).
OUTLIER_Z = 3.5
# Never call a compile an outlier within 3x of its reference: machines and loads differ.
MIN_OUTLIER_LOG = math.log(3.0)
NEIGHBOURS = 5
# Two fits of nearly the same rows (the refit, and a candidate with a few more) differ by
# about 5% in median error on ~100 held-out rows. A candidate must beat the bar by more
# than that to be promoted (a smaller gain is no evidence), and may be worse by up to
# twice that on the trusted held-out rows (their median moves with any new rows, honest
# or not).
MIN_GAIN = 1.05
TRUSTED_SLACK = 1.1
_CHUNK = 512


def holdout_split(rows: pd.DataFrame, fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, holdout): a scorable row is held out when the hash of its id falls below
    `fraction` of the hash range.

    The rule depends on the row alone, so a row stays on the same side in every job: a
    model promoted by an earlier job never trained on a later job's held-out rows.
    At least one row is held out.
    """
    seconds = pd.to_numeric(rows["compile_seconds"], errors="coerce")
    scorable = rows[seconds > 0]
    position = scorable["row_id"].map(_hash_fraction)
    held = position.index[position < fraction]
    if len(held) == 0 and len(scorable):
        held = position.sort_values().index[:1]
    return rows.drop(index=held).reset_index(drop=True), rows.loc[held].reset_index(drop=True)


def _hash_fraction(row_id) -> float:
    digest = hashlib.sha256(str(row_id).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


# -- screening ------------------------------------------------------------------------------

def suspect_rows(rows: pd.DataFrame, untrusted: np.ndarray,
                 model: CompileCostModel) -> np.ndarray:
    """Which `untrusted` rows to drop: outliers in both model and neighbour residual.

    Args:
        rows: Dataset rows with compile_seconds (trusted and untrusted together).
        untrusted: Boolean mask of the rows that may be dropped (stored samples).
        model: The current estimator; its residuals are what neighbours are compared on.
    """
    untrusted = np.asarray(untrusted, bool)
    if not untrusted.any():
        return untrusted
    residual = model_residuals(rows, model)
    neighbour = residual - neighbour_residuals(rows, residual)
    return untrusted & _outlying(residual) & _outlying(neighbour)


def model_residuals(rows: pd.DataFrame, model: CompileCostModel) -> np.ndarray:
    """log(measured / predicted) compile seconds, the measurement scaled to the model's
    reference machine as the model itself does (by `reference_power_`)."""
    measured = to_log("compile_seconds",
                      pd.to_numeric(rows["compile_seconds"], errors="coerce").to_numpy(float))
    predicted = model.predict_log(features_frame(rows))["compile_seconds"]
    return measured - _drift(rows, model) - predicted


def _drift(rows: pd.DataFrame, model) -> np.ndarray:
    fitted = as_predictor(model)
    power, median = fitted.reference_power, fitted.reference_seconds
    if not power or not median or "ref_seconds" not in rows:
        return np.zeros(len(rows))
    ref = pd.to_numeric(rows["ref_seconds"], errors="coerce").to_numpy(float)
    return power * np.nan_to_num(np.log(np.where(ref > 0, ref, median) / median))


def neighbour_residuals(rows: pd.DataFrame, residual: np.ndarray,
                        k: int = NEIGHBOURS) -> np.ndarray:
    """Median residual of each row's `k` nearest rows of other programs (standardized
    log features), so that copies of one sample cannot vouch for each other."""
    points = _standardized(features_frame(rows).to_numpy(float))
    programs = rows["key"].to_numpy() if "key" in rows else np.arange(len(rows))
    squares = (points**2).sum(axis=1)
    out = np.empty(len(rows))
    for start in range(0, len(rows), _CHUNK):
        chunk = slice(start, start + _CHUNK)
        distance = squares[chunk, None] + squares[None, :] - 2 * points[chunk] @ points.T
        distance[programs[chunk, None] == programs[None, :]] = np.inf
        nearest = np.argsort(distance, axis=1)[:, :k]
        out[chunk] = np.median(residual[nearest], axis=1)
    return out


def _standardized(values: np.ndarray) -> np.ndarray:
    logs = np.log1p(np.maximum(np.nan_to_num(values), 0.0))
    spread = logs.std(axis=0)
    return (logs - logs.mean(axis=0)) / np.where(spread > 0, spread, 1.0)


def _outlying(deviation: np.ndarray) -> np.ndarray:
    centred = np.abs(deviation - np.median(deviation))
    scale = 1.4826 * np.median(centred)
    return (centred > OUTLIER_Z * scale) & (centred > MIN_OUTLIER_LOG)


# -- comparing on fair ground ---------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """Scores (median |log error| of compile seconds) on the held-out rows and the decision."""

    swapped: bool                      # promoted
    holdout_rows: int
    score_new: float
    score_current: float | None        # the served model, on rows it may have trained on
    score_current_refit: float | None  # its recipe refitted on rows it knew, minus holdout
    score_to_beat: float | None
    current_saw_holdout: bool
    # the same on the held-out rows nobody sent (every held-out row when none is marked)
    trusted_holdout_rows: int = 0
    score_new_trusted: float | None = None
    score_to_beat_trusted: float | None = None

    @property
    def promote(self) -> bool:
        return self.swapped

    def to_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(self).items()}


def compare(candidate, current, train_rows: pd.DataFrame, holdout: pd.DataFrame,
            current_rows: Collection[str] | None, backend: str, target: str,
            trusted: np.ndarray | None = None) -> Verdict:
    """Should `candidate` replace `current` (an estimator or None)?

    Args:
        candidate: The estimator fitted on `train_rows`.
        current: The served estimator, or None.
        current_rows: Row ids `current` trained on; None when unknown.
        trusted: Boolean mask of `holdout` rows nobody sent; None: all of them. With
            none trusted, nothing outside the samples speaks for the candidate, and it
            replaces a current model only if there is none.
    """
    trusted = np.ones(len(holdout), bool) if trusted is None else np.asarray(trusted, bool)
    kept = holdout[trusted]
    score_new = holdout_score(candidate, holdout)
    new_trusted = holdout_score(candidate, kept) if len(kept) else None
    if current is None:
        return Verdict(math.isfinite(score_new), len(holdout), score_new, None, None, None,
                       False, len(kept), new_trusted)
    score_current = holdout_score(current, holdout)
    saw = current_rows is None or bool(holdout["row_id"].isin(list(current_rows)).any())
    refit = _refit_model(current, train_rows, current_rows, backend, target) if saw else None
    refit_score = None if refit is None else holdout_score(refit, holdout)
    to_beat = max(score_current, refit_score) if refit_score is not None else score_current
    bar_trusted = None
    if len(kept):
        bar_trusted = holdout_score(current, kept)
        if refit is not None:
            bar_trusted = max(bar_trusted, holdout_score(refit, kept))
    outside = new_trusted is not None and new_trusted <= TRUSTED_SLACK * bar_trusted
    return Verdict(MIN_GAIN * score_new < to_beat and outside, len(holdout), score_new, score_current,
                   refit_score, to_beat, saw, len(kept), new_trusted, bar_trusted)


def _refit_model(current, train_rows: pd.DataFrame, current_rows: Collection[str] | None,
                 backend: str, target: str):
    """`current`'s recipe fitted on the training rows it knew; None when it has no recipe
    or those rows cannot train one (then its own score stands)."""
    params = recipe(current)
    known = train_rows if current_rows is None else train_rows[
        train_rows["row_id"].isin(list(current_rows))]
    if params is None:
        return None
    try:
        return train(known, backend, target, **params)
    except ValueError:  # too few rows with a label
        return None


def recipe(estimator) -> dict | None:
    """The constructor arguments `estimator` was built with; None when unknown."""
    params = as_predictor(estimator).recipe
    return None if params is None else dict(params)


def holdout_score(estimator, rows: pd.DataFrame) -> float:
    """Median |log error| of compile seconds on `rows` (inf when it cannot be computed)."""
    from .evaluate import holdout_score as median_abs_log_error

    value = float(median_abs_log_error(estimator, rows))
    return value if math.isfinite(value) else math.inf
