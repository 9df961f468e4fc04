"""Fitting the cost model: a size-aware power-law baseline plus boosted trees on its residual.

Trees cannot extrapolate: past the largest compile in the sweep they predict the value of
their last leaf. Users care most about compiles bigger than any we measured, so each
target is modelled in log space as `baseline(size) + trees(features)`, where the baseline
is a least-squares power law in a few size counts (it carries the growth) and the trees
only correct its residual (bounded). Intervals are split-conformal: quantiles of
out-of-fold residuals, with folds that hold out whole program families so the interval
reflects a program unlike any in training.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES

from .dataset import FEATURE_PREFIX

if TYPE_CHECKING:
    from costmodel.models import Artifact

TARGETS = ("compile_seconds", "peak_rss_bytes", "executable_memory_bytes")
# Added before taking logs. Peak RSS growth of a small compile is zero or a few pages of
# allocator noise, so below ~1 MiB it carries no signal; executable memory of a tiny
# program can be a few bytes. Compile time is always positive.
LOG_OFFSETS = {"compile_seconds": 0.0, "peak_rss_bytes": float(2**20),
               "executable_memory_bytes": float(2**10)}
# Size counts of the power-law baseline, per target (each enters as log(1 + count)).
BASELINE_TERMS = {
    "compile_seconds": ("hlo_ops_inlined", "hlo_ops_trip_weighted"),
    "peak_rss_bytes": ("hlo_ops_inlined", "hlo_ops_trip_weighted", "tensor_sum_elements"),
    "executable_memory_bytes": ("tensor_sum_elements", "input_bytes", "output_bytes"),
}
_EPS = 1e-12


def to_log(target: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    """The modelled scale of `target`: log(value + offset)."""
    return np.log(np.maximum(np.asarray(values, float) + LOG_OFFSETS[target], _EPS))


def from_log(target: str, values: np.ndarray) -> np.ndarray:
    """Inverse of `to_log`, clipped at zero."""
    return np.maximum(np.exp(values) - LOG_OFFSETS[target], 0.0)


def _log_counts(X: pd.DataFrame, names: Sequence[str]) -> np.ndarray:
    counts = X.loc[:, list(names)].to_numpy(float)
    return np.log1p(np.nan_to_num(np.maximum(counts, 0.0)))


def _tree_inputs(X: pd.DataFrame, features: Sequence[str]) -> np.ndarray:
    """Model features plus a few ratios trees cannot form by themselves."""
    def safe(name: str) -> np.ndarray:
        return np.maximum(X[name].to_numpy(float), 1.0)

    ratios = np.column_stack([
        safe("hlo_ops_trip_weighted") / safe("hlo_ops_inlined"),  # how much loops multiply
        safe("hlo_ops_inlined") / safe("hlo_ops"),                 # how much inlining adds
        safe("hlo_ops_inlined") / safe("hlo_functions"),
        safe("dot_flops") / safe("hlo_ops_inlined"),
    ])
    return np.column_stack([X.loc[:, list(features)].to_numpy(float), np.log(ratios)])


class CompileCostModel:
    """Predicts compile seconds, peak host-RSS growth and executable bytes, with intervals.

    Args:
        coverage: Nominal coverage of the prediction intervals.
        n_folds: Folds for the out-of-fold residuals the intervals come from.
        reference_power: How much of the reference program's timing to divide out of
            compile seconds (1: model `compile / ref`, 0: raw seconds); removes drift.
        baseline_terms: Size counts of the power law per target (defaults:
            `BASELINE_TERMS`); an empty tuple leaves only an intercept (a plain tree).
        residual_model: Fit boosted trees on the baseline's residual (False: baseline only).
        max_iter, learning_rate, max_leaf_nodes, min_samples_leaf, l2_regularization:
            Passed to `HistGradientBoostingRegressor`.
        random_state: Seed for fold shuffling and the trees.

    Example:
        >>> model = CompileCostModel().fit(X, {"compile_seconds": seconds})
        >>> model.predict(X_new)["compile_seconds"]["hi"]
    """

    def __init__(self, *, coverage: float = 0.9, n_folds: int = 5, reference_power: float = 1.0,
                 baseline_terms: Mapping[str, Sequence[str]] | None = None,
                 residual_model: bool = True, max_iter: int = 300, learning_rate: float = 0.05,
                 max_leaf_nodes: int = 15, min_samples_leaf: int = 10,
                 l2_regularization: float = 1.0, random_state: int = 0) -> None:
        self.coverage = coverage
        self.n_folds = n_folds
        self.reference_power = reference_power
        self.baseline_terms = baseline_terms
        self.residual_model = residual_model
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.random_state = random_state

    def fit(self, X: pd.DataFrame, y: Mapping[str, Sequence[float]], *,
            groups: Sequence | None = None,
            reference: Sequence[float] | None = None) -> CompileCostModel:
        """Fit one model per target of `y` (rows with a missing label are skipped).

        Args:
            X: One row per program, a column per name of `MODEL_FEATURES`.
            y: Natural-unit labels by target name (seconds, bytes).
            groups: Program family per row; out-of-fold residuals hold out whole groups.
            reference: Seconds of the reference compile measured with each row.
        """
        self.feature_names_in_ = list(MODEL_FEATURES)
        X = self._checked(X)
        unknown = sorted(set(y) - set(TARGETS))
        if unknown:
            raise ValueError(f"unknown targets: {', '.join(unknown)}; known: {', '.join(TARGETS)}")
        groups = None if groups is None else np.asarray(groups)
        drift = np.zeros(len(X))
        self.reference_seconds_ = None
        if reference is not None and self.reference_power:
            reference = np.asarray(reference, float)
            self.reference_seconds_ = float(np.nanmedian(reference))
            drift = self.reference_power * np.nan_to_num(
                np.log(reference / self.reference_seconds_))
        self.terms_ = {t: tuple((self.baseline_terms or BASELINE_TERMS).get(t, ())) for t in y}
        self.models_: dict[str, dict] = {}
        for target, values in y.items():
            values = np.asarray(values, float)
            keep = np.isfinite(values) & (values >= 0)
            if target == "compile_seconds":
                keep &= values > 0
            if keep.sum() < 2:
                raise ValueError(f"too few rows with a {target} label ({int(keep.sum())})")
            z = to_log(target, values[keep])
            if target == "compile_seconds":
                z = z - drift[keep]
            Xt = X[keep].reset_index(drop=True)
            self.models_[target] = self._fit_target(
                target, Xt, z, None if groups is None else groups[keep])
        self.targets_ = tuple(y)
        return self

    def predict(self, X: pd.DataFrame) -> dict[str, dict[str, np.ndarray]]:
        """Point estimate and interval per target, in natural units.

        Returns:
            `{target: {"point", "lo", "hi"}}`, each an array with one value per row of X.
        """
        logs = self.predict_log(X)
        out = {}
        for target, z in logs.items():
            fitted = self.models_[target]
            out[target] = {"point": from_log(target, z),
                           "lo": from_log(target, z + fitted["lo"]),
                           "hi": from_log(target, z + fitted["hi"])}
        return out

    def predict_log(self, X: pd.DataFrame) -> dict[str, np.ndarray]:
        """Point estimates on the modelled (log) scale, per target."""
        self._check_fitted()
        X = self._checked(X)
        return {target: self._predict_target(target, fitted, X)
                for target, fitted in self.models_.items()}

    def _fit_target(self, target: str, X: pd.DataFrame, z: np.ndarray,
                    groups: np.ndarray | None) -> dict:
        fitted = self._fit_parts(target, X, z)
        oof = np.full(len(z), np.nan)
        for train, test in self._folds(len(z), groups):
            parts = self._fit_parts(target, X.iloc[train], z[train])
            oof[test] = self._predict_target(target, parts, X.iloc[test])
        residual = (z - oof)[np.isfinite(oof)]
        fitted["lo"], fitted["hi"] = conformal_bounds(residual, self.coverage)
        fitted["oof_residual_mad"] = float(np.median(np.abs(residual))) if len(residual) else None
        return fitted

    def _fit_parts(self, target: str, X: pd.DataFrame, z: np.ndarray) -> dict:
        from sklearn.ensemble import HistGradientBoostingRegressor

        design = np.column_stack([np.ones(len(X)), _log_counts(X, self.terms_[target])])
        coef = np.linalg.lstsq(design, z, rcond=None)[0]
        booster = None
        if self.residual_model and len(z) >= 2 * self.min_samples_leaf:
            booster = HistGradientBoostingRegressor(
                max_iter=self.max_iter, learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
                l2_regularization=self.l2_regularization, early_stopping=False,
                random_state=self.random_state)
            booster.fit(_tree_inputs(X, self.feature_names_in_), z - design @ coef)
        return {"coef": coef, "booster": booster}

    def _predict_target(self, target: str, fitted: dict, X: pd.DataFrame) -> np.ndarray:
        design = np.column_stack([np.ones(len(X)), _log_counts(X, self.terms_[target])])
        z = design @ fitted["coef"]
        if fitted["booster"] is not None:
            z = z + fitted["booster"].predict(_tree_inputs(X, self.feature_names_in_))
        return z

    def _folds(self, n: int, groups: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
        from sklearn.model_selection import GroupKFold, KFold

        if n < 2 * self.n_folds:
            return []
        if groups is not None and len(np.unique(groups)) >= 2:
            splitter = GroupKFold(n_splits=min(self.n_folds, len(np.unique(groups))))
            return list(splitter.split(np.zeros(n), groups=groups))
        splitter = KFold(self.n_folds, shuffle=True, random_state=self.random_state)
        return list(splitter.split(np.zeros(n)))

    def _check_fitted(self) -> None:
        if not hasattr(self, "models_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("CompileCostModel is not fitted yet; call fit() first")

    def _checked(self, X: pd.DataFrame) -> pd.DataFrame:
        if not isinstance(X, pd.DataFrame):
            raise TypeError(f"X must be a pandas DataFrame, not {type(X).__name__}")
        missing = [name for name in self.feature_names_in_ if name not in X.columns]
        if missing:
            raise ValueError(f"missing feature columns ({len(missing)}): {', '.join(missing)}")
        return X.loc[:, self.feature_names_in_].astype(float)


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
    upper = math.ceil((n + 1) * (1.0 - tail))
    lower = math.floor((n + 1) * tail)
    hi = residual[upper - 1] if upper <= n else math.inf
    lo = residual[lower - 1] if lower >= 1 else -math.inf
    return float(lo), float(hi)


def select_rows(data: pd.DataFrame, backend: str, target: str = "") -> pd.DataFrame:
    """The ok rows measured for `backend` and `target`."""
    rows = data[(data["status"] == "ok") & (data["backend"] == backend)
                & (data["target"].fillna("") == (target or ""))]
    return rows.reset_index(drop=True)


def features_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Model inputs of dataset rows: one column per name of `MODEL_FEATURES`."""
    columns = {FEATURE_PREFIX + name: name for name in MODEL_FEATURES}
    missing = [c for c in columns if c not in rows.columns]
    if missing:
        raise ValueError(f"dataset lacks feature columns: {', '.join(missing)}")
    return rows.loc[:, list(columns)].rename(columns=columns).astype(float)


def labels(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Label arrays by target (NaN where a row has none)."""
    return {t: pd.to_numeric(rows[t], errors="coerce").to_numpy(float)
            for t in TARGETS if t in rows.columns}


def train(data: pd.DataFrame, backend: str, target: str = "", **params) -> CompileCostModel:
    """Fit a `CompileCostModel` on the ok rows of `data` for one backend and target.

    Example:
        >>> model = train(dataset.load("training/data/cpu.parquet"), "cpu", "")
    """
    rows = select_rows(data, backend, target)
    if len(rows) == 0:
        raise ValueError(f"no ok rows for backend={backend!r} target={target!r}")
    reference = rows["ref_seconds"].to_numpy(float) if "ref_seconds" in rows else None
    return CompileCostModel(**params).fit(features_frame(rows), labels(rows),
                                          groups=rows["family"].to_numpy(), reference=reference)


def retrain(data: pd.DataFrame, backend: str, target: str, out: Path, name: str) -> Artifact:
    """Fit, evaluate (leave-one-family-out) and save an artifact at `out`, in minutes."""
    from costmodel.models import save

    from .evaluate import evaluate

    rows = select_rows(data, backend, target)
    estimator = train(rows, backend, target)
    metrics = evaluate(rows, backend, target, splits=("leave_family_out",),
                       models=("costmodel",))
    return save(estimator, out, backend=backend, target=target, data=rows, metrics=metrics,
                name=name)


def build_default(data_paths: Sequence[str | Path], backend: str = "cpu", target: str = "",
                  out: Path | None = None) -> Artifact:
    """Train on the named data, evaluate, and write the shipped model with plots and card.

    Writes to `costmodel.models.default_path(backend, target)` unless `out` is given.

    Example:
        >>> build_default(["training/data/cpu.parquet"], "cpu")
    """
    from costmodel.models import default_path, save

    from . import dataset, plots
    from .evaluate import run_evaluation, write_card

    rows = select_rows(dataset.load(list(data_paths)), backend, target)
    out = Path(out) if out is not None else default_path(backend, target)
    result = run_evaluation(rows, backend, target)
    estimator = train(rows, backend, target)
    artifact = save(estimator, out, backend=backend, target=target, data=rows,
                    metrics=result.report, name=f"default-{out.name}")
    figures = plots.write_all(result.predictions, rows, estimator, out)
    write_card(out / "MODEL_CARD.md", artifact.manifest, result.report, rows, figures)
    return artifact
