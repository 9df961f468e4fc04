"""Evaluation: how well the model predicts programs it has not seen, next to simple baselines.

Three splits, every model fitted on the same folds:
- `leave_family_out`: each program family in turn is held out of training entirely.
- `leave_library_out`: the programs built from each public library (the real-program
  corpus, rows with a `library`) are held out together; synthetic rows always train.
  Scored also on the held-out programs that compile in 1 s or more
  (`leave_library_out_over_1s`), where users wait.
- `extrapolation`: train on rows compiling in under 3 s, test on rows of 10 s and more
  (the same rows for the memory targets): are compiles bigger than the sweep's safe?

`costmodel evaluate` runs it; `model_card.py` writes its report into a model card.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.features import Placement

from ..fitting.estimator import (
    LOG_OFFSETS,
    TARGETS,
    CompileCostModel,
    from_log,
    to_log,
)
from ..fitting.fit import (
    families,
    features_frame,
    holdout_groups,
    labels,
    libraries,
    model_params,
    normalized_seconds,
    row_weights,
    select_rows,
    split_options,
)
from . import metrics

SPLITS = ("leave_family_out", "leave_library_out", "extrapolation")
# Held-out programs that compile in at least this long are scored again on their own.
LONG_COMPILE_SECONDS = 1.0
MODELS = ("costmodel", "power_law", "linear")
EXTRAPOLATION_TRAIN_BELOW = 3.0
EXTRAPOLATION_TEST_FROM = 10.0


class PowerLaw:
    """Baseline: log target linear in log(1 + hlo_ops_inlined), by least squares."""

    def fit(self, X: pd.DataFrame, z: np.ndarray) -> PowerLaw:
        self.coef_ = np.linalg.lstsq(self._design(X), z, rcond=None)[0]
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self._design(X) @ self.coef_

    @staticmethod
    def _design(X: pd.DataFrame) -> np.ndarray:
        ops = np.nan_to_num(X["hlo_ops_inlined"].to_numpy(float))
        return np.column_stack([np.ones(len(X)), np.log1p(np.maximum(ops, 0))])


class LinearLog:
    """Baseline: ridge regression of the log target on log1p of every model feature."""

    def fit(self, X: pd.DataFrame, z: np.ndarray) -> LinearLog:
        from sklearn.linear_model import Ridge
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.model_ = make_pipeline(StandardScaler(), Ridge(alpha=1.0)).fit(self._inputs(X), z)
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return self.model_.predict(self._inputs(X))

    @staticmethod
    def _inputs(X: pd.DataFrame) -> np.ndarray:
        return np.log1p(np.nan_to_num(np.maximum(X.to_numpy(float), 0)))


BASELINES: dict[str, Callable[[], PowerLaw | LinearLog]] = {"power_law": PowerLaw,
                                                            "linear": LinearLog}


@dataclass
class Evaluation:
    """The report (`evaluate`'s dict) and the held-out predictions it was computed from."""

    report: dict
    predictions: pd.DataFrame  # split, family, row, target, model, actual, point, lo, hi


def backend_label(backend: str, target: str = "") -> str:
    return Placement(backend, target).label


def folds(rows: pd.DataFrame, split: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(name, train positions, test positions) of each fold of `split`."""
    if split == "leave_family_out":
        family = families(rows)
        return [(f, np.flatnonzero(family != f), np.flatnonzero(family == f))
                for f in sorted(set(family))]
    if split == "leave_library_out":
        library = libraries(rows)
        return [(name, np.flatnonzero(library != name), np.flatnonzero(library == name))
                for name in sorted(set(library) - {""})]
    if split == "extrapolation":
        seconds = pd.to_numeric(rows["compile_seconds"], errors="coerce").to_numpy(float)
        return [("extrapolation", np.flatnonzero(seconds < EXTRAPOLATION_TRAIN_BELOW),
                 np.flatnonzero(seconds >= EXTRAPOLATION_TEST_FROM))]
    raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")


@dataclass
class _Table:
    """The rows of an evaluation as arrays: inputs, labels to score against, and context."""

    X: pd.DataFrame
    y: dict[str, np.ndarray]         # compile seconds normalized to the median reference
    measured: dict[str, np.ndarray]  # labels as measured
    family: np.ndarray
    groups: np.ndarray               # what interval residuals hold out together
    library: np.ndarray              # "" for synthetic families
    reference: np.ndarray | None
    reference_power: float

    @classmethod
    def of(cls, rows: pd.DataFrame) -> _Table:
        measured = labels(rows)
        seconds, power = normalized_seconds(rows)
        reference = rows["ref_seconds"].to_numpy(float) if "ref_seconds" in rows else None
        return cls(features_frame(rows), {**measured, "compile_seconds": seconds}, measured,
                   families(rows), holdout_groups(rows), libraries(rows), reference, power)


def _fold_predictions(table: _Table, train: np.ndarray, test: np.ndarray,
                      models: Sequence[str], params: dict) -> list[dict]:
    X, y = table.X, table.y
    if len(train) < 2 or len(test) == 0:
        return []
    fitted: dict[str, dict] = {}
    if "costmodel" in models:
        params, options = split_options(params)
        # a target too few training rows measured (a store of user samples) is left out
        model = CompileCostModel(**params).fit(
            X.iloc[train], {t: v[train] for t, v in table.measured.items()
                            if np.sum(np.isfinite(v[train]) & (v[train] > 0)) >= 2},
            groups=table.groups[train],
            reference=None if table.reference is None else table.reference[train],
            sample_weight=row_weights(table.library[train], **options),
            interval_rows=table.library[train] != "")
        fitted["costmodel"] = model.predict(X.iloc[test])
    for name in models:
        if name not in BASELINES:
            continue
        fitted[name] = {}
        for target, values in y.items():
            keep = np.isfinite(values[train]) & (values[train] >= 0)
            if keep.sum() < 2:
                continue
            base = BASELINES[name]().fit(X.iloc[train[keep]], to_log(target, values[train[keep]]))
            fitted[name][target] = {"point": from_log(target, base.predict(X.iloc[test]))}
    out = []
    for name, by_target in fitted.items():
        for target, pred in by_target.items():
            actual = y[target][test]
            keep = np.isfinite(actual) & (actual >= 0)
            out.append({"row": test[keep], "family": table.family[test[keep]], "target": target,
                        "model": name, "actual": actual[keep],
                        "measured": table.measured[target][test[keep]],
                        "point": pred["point"][keep],
                        "lo": pred["lo"][keep] if "lo" in pred else np.nan,
                        "hi": pred["hi"][keep] if "hi" in pred else np.nan})
    return out


def predictions(rows: pd.DataFrame, split: str, models: Sequence[str] = MODELS,
                params: dict | None = None, table: _Table | None = None,
                progress: Callable[[str], None] | None = None,
                jobs: int = 1) -> pd.DataFrame:
    """Held-out predictions of every model on every fold of `split`, one row per program.

    `actual` is what models are scored against (compile seconds at the median reference
    time), `measured` the label as measured. `progress` is called with each fold's name
    once it is done. `jobs` processes fit folds side by side (each fit is one thread).
    """
    from joblib import Parallel, delayed, parallel_config

    table = table or _Table.of(rows)
    chosen = folds(rows, split)
    frames = []
    # one thread per worker process, set before its BLAS loads (threadpoolctl inside a
    # fit cannot reach a library loaded later)
    with parallel_config(backend="loky", inner_max_num_threads=1):
        fitted = Parallel(n_jobs=jobs, return_as="generator")(
            delayed(_fold_predictions)(table, train, test, models, params or {})
            for _, train, test in chosen)
        for (name, _, _), parts in zip(chosen, fitted):
            frames += [pd.DataFrame(f) for f in parts]
            if progress is not None:
                progress(name)
    columns = ["row", "family", "target", "model", "actual", "measured", "point", "lo", "hi"]
    result = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    result.insert(0, "split", split)
    return result


def with_keys(pred: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """Held-out predictions (`predictions`) with each row's dataset `key` in place of its
    position in `rows`, so they can be matched with other measurements of the program."""
    return pred.assign(key=rows["key"].to_numpy()[pred["row"].to_numpy()]).drop(columns=["row"])


def score(pred: pd.DataFrame) -> dict:
    """Metrics of one model's held-out predictions of one target (ratios on value + offset)."""
    if len(pred) == 0:
        return metrics.summarize([], [])
    offset = LOG_OFFSETS[pred["target"].iloc[0]]
    has_interval = pred["lo"].notna().all()
    return metrics.summarize(pred["point"] + offset, pred["actual"] + offset,
                             pred["lo"] + offset if has_interval else None,
                             pred["hi"] + offset if has_interval else None)


def run_evaluation(data: pd.DataFrame, backend: str, target: str = "", *,
                   splits: Sequence[str] = SPLITS, models: Sequence[str] = MODELS,
                   params: dict | None = None,
                   progress: Callable[[str], None] | None = None,
                   jobs: int = 1) -> Evaluation:
    """Evaluate every model on every split for one backend/target (see `evaluate`);
    `progress` is called after each fold, `jobs` fit folds side by side (see
    `predictions`)."""
    rows = select_rows(data, backend, target)
    label = backend_label(backend, target)
    table = _Table.of(rows)
    params = model_params(backend, params)
    frames = [predictions(rows, split, models, params, table, progress, jobs)
              for split in splits]
    preds = pd.concat(frames, ignore_index=True)
    report: dict = {}
    for split in splits:
        report[split] = {label: {}}
        for name in TARGETS:
            chosen = preds[(preds["split"] == split) & (preds["target"] == name)]
            report[split][label][name] = {m: score(chosen[chosen["model"] == m]) for m in models}
    report["leave_library_out_over_1s"] = {label: _scores_over(
        preds[preds["split"] == "leave_library_out"], table, models)}
    repeats = rows["compile_seconds_all"] if "compile_seconds_all" in rows else []
    report["noise_floor"] = {label: {"compile_seconds": metrics.noise_floor(repeats)}}
    ours = preds[(preds["split"] == "leave_family_out") & (preds["model"] == "costmodel")
                 & (preds["target"] == "compile_seconds")]
    report["drift"] = {label: {
        "reference_power": table.reference_power,
        "reference_seconds": None if table.reference is None
        else float(np.nanmedian(table.reference)),
        "leave_family_out_measured": score(ours.assign(actual=ours["measured"]))}}
    extrapolation = folds(rows, "extrapolation")[0]
    report["data"] = {label: {"rows": int(len(rows)), "families": len(set(families(rows))),
                              "extrapolation_train": int(len(extrapolation[1])),
                              "extrapolation_test": int(len(extrapolation[2]))}}
    return Evaluation(report=report, predictions=preds)


def _scores_over(preds: pd.DataFrame, table: _Table, models: Sequence[str]) -> dict:
    """Scores by target and model on the programs compiling in LONG_COMPILE_SECONDS or more
    (all of their targets), at the median reference speed."""
    long = np.flatnonzero(table.y["compile_seconds"] >= LONG_COMPILE_SECONDS)
    chosen = preds[preds["row"].isin(long)]
    return {name: {m: score(chosen[(chosen["target"] == name) & (chosen["model"] == m)])
                   for m in models} for name in TARGETS}


def evaluate(data: pd.DataFrame, backend: str, target: str = "", **options) -> dict:
    """The evaluation report of one backend/target.

    Returns:
        `{split: {backend_label: {target: {model: {"median_fold", "p90_fold", "within_2x",
        "spearman", "coverage", "n"}}}}}` for splits `leave_family_out` and
        `extrapolation`, plus `noise_floor` and `data` entries. Coverage is None for
        baselines, which have no intervals.

    Example:
        >>> evaluate(dataset.load("sweeps/cpu"), "cpu")["leave_family_out"]["cpu"]
    """
    return run_evaluation(data, backend, target, **options).report


def holdout_score(artifact_or_estimator, data: pd.DataFrame) -> float:
    """Median |log error| of compile seconds on the ok rows of `data` (lower is better).

    Accepts an `Artifact` or a fitted estimator.
    """
    estimator = getattr(artifact_or_estimator, "predictor", artifact_or_estimator)
    rows = data[data["status"] == "ok"] if "status" in data else data
    actual = pd.to_numeric(rows["compile_seconds"], errors="coerce").to_numpy(float)
    keep = np.isfinite(actual) & (actual > 0)
    if not keep.any():
        raise ValueError("no ok rows with a positive compile_seconds to score on")
    rows = rows[keep]
    pred = estimator.predict(features_frame(rows))["compile_seconds"]["point"]
    return metrics.median_abs_log_error(np.maximum(pred, 1e-9), actual[keep])
