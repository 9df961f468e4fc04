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
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

# Imported here, not where used: threadpoolctl can only limit an OpenMP runtime that is
# already loaded, and trees spinning on more threads than a busy machine grants run 50x
# slower.
from sklearn.ensemble import HistGradientBoostingRegressor

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
# How each target's baseline is fitted (see `CompileCostModel`).
BASELINE_FORMS = {"compile_seconds": "overhead", "peak_rss_bytes": "overhead",
                  "executable_memory_bytes": "within"}
# Size terms of the regression that estimates how much load drift shows in compile seconds.
DRIFT_TERMS = ("hlo_ops_inlined", "hlo_ops_trip_weighted")
# Size counts of the baseline, per target (each enters as log(1 + count)).
BASELINE_TERMS = {
    "compile_seconds": ("hlo_ops_inlined", "hlo_ops_trip_weighted"),
    "peak_rss_bytes": ("hlo_ops_inlined", "hlo_ops_trip_weighted", "tensor_sum_elements"),
    "executable_memory_bytes": ("hlo_ops_inlined", "tensor_sum_elements",
                                "tensor_max_elements", "io_bytes"),
}
_EPS = 1e-12


def to_log(target: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    """The modelled scale of `target`: log(value + offset)."""
    return np.log(np.maximum(np.asarray(values, float) + LOG_OFFSETS[target], _EPS))


def from_log(target: str, values: np.ndarray) -> np.ndarray:
    """Inverse of `to_log`, clipped at zero."""
    return np.maximum(np.exp(values) - LOG_OFFSETS[target], 0.0)


def _augment(X: pd.DataFrame) -> pd.DataFrame:
    """Model features plus derived sizes and ratios (trees cannot form ratios themselves)."""
    def safe(name: str) -> np.ndarray:
        return np.maximum(X[name].to_numpy(float), 1.0)

    derived = pd.DataFrame({
        "io_bytes": X["input_bytes"].to_numpy(float) + X["output_bytes"].to_numpy(float),
        "unroll_ratio": safe("hlo_ops_trip_weighted") / safe("hlo_ops_inlined"),
        "inline_ratio": safe("hlo_ops_inlined") / safe("hlo_ops"),
        "ops_per_function": safe("hlo_ops_inlined") / safe("hlo_functions"),
        "flops_per_op": safe("dot_flops") / safe("hlo_ops_inlined"),
        # long chains over few inputs (unrolled loops) against wide programs over many
        "ops_per_param": safe("hlo_ops_inlined") / safe("param_count"),
    }, index=X.index)
    return pd.concat([X, derived], axis=1)


@lru_cache(maxsize=1)
def _openmp():
    """One thread-pool controller for predictions: building one scans every loaded library
    (~9 ms), far more than a one-row prediction costs."""
    import sklearn.ensemble  # noqa: F401 - loads the OpenMP runtime the controller must see
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _log_counts(X: pd.DataFrame, names: Sequence[str]) -> np.ndarray:
    counts = X.loc[:, list(names)].to_numpy(float)
    return np.log1p(np.nan_to_num(np.maximum(counts, 0.0)))


class CompileCostModel:
    """Predicts compile seconds, peak host-RSS growth and executable bytes, with intervals.

    Args:
        coverage: Nominal coverage of the prediction intervals.
        n_folds: Folds for the out-of-fold residuals the intervals come from.
        reference_power: Exponent of the reference timing divided out of compile seconds
            (1: model `compile / ref`, 0: raw seconds; None: fit it). Removes drift and
            load; predictions are for a machine whose reference takes the median time.
        baseline_terms: Size counts of the power law per target (defaults:
            `BASELINE_TERMS`); an empty tuple leaves only an intercept (a plain tree).
        baseline: Form of the baseline per target (defaults: `BASELINE_FORMS`).
            "within": the power law's exponents come from how programs of one family scale
            as they grow, its level from all rows (the trees learn each kind of program's
            level from its op mix); "pooled": one least-squares fit of all rows;
            "overhead": a fixed cost plus a power law (see `overhead_power_law`), whose
            growth past the fixed cost is steeper than a plain power law's.
        residual_model: Fit boosted trees on the baseline's residual (False: baseline only).
        max_iter, learning_rate, max_leaf_nodes, min_samples_leaf, l2_regularization:
            Passed to `HistGradientBoostingRegressor`.
        n_threads: OpenMP threads for the trees while fitting and predicting; on small
            data one is as fast, and many spin badly on a busy machine.
        random_state: Seed for fold shuffling and the trees.

    Example:
        >>> model = CompileCostModel().fit(X, {"compile_seconds": seconds})
        >>> model.predict(X_new)["compile_seconds"]["hi"]
    """

    def __init__(self, *, coverage: float = 0.9, n_folds: int = 5,
                 reference_power: float | None = None,
                 baseline_terms: Mapping[str, Sequence[str]] | None = None,
                 baseline: Mapping[str, str] | None = None, residual_model: bool = True,
                 max_iter: int = 100,
                 learning_rate: float = 0.1,
                 max_leaf_nodes: int = 15, min_samples_leaf: int = 10,
                 l2_regularization: float = 1.0, n_threads: int = 1,
                 random_state: int = 0) -> None:
        self.coverage = coverage
        self.n_folds = n_folds
        self.reference_power = reference_power
        self.baseline_terms = baseline_terms
        self.baseline = baseline
        self.residual_model = residual_model
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.n_threads = n_threads
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
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=self.n_threads, user_api="openmp"):
            return self._fit(X, y, groups, reference)

    def _fit(self, X: pd.DataFrame, y: Mapping[str, Sequence[float]], groups: Sequence | None,
             reference: Sequence[float] | None) -> CompileCostModel:
        self.feature_names_in_ = list(MODEL_FEATURES)
        X = self._checked(X)
        unknown = sorted(set(y) - set(TARGETS))
        if unknown:
            raise ValueError(f"unknown targets: {', '.join(unknown)}; known: {', '.join(TARGETS)}")
        groups = None if groups is None else np.asarray(groups)
        drift = np.zeros(len(X))
        self.reference_seconds_ = None
        if reference is not None:
            reference = np.asarray(reference, float)
            self.reference_seconds_ = float(np.nanmedian(reference))
            drift = np.nan_to_num(np.log(reference / self.reference_seconds_))
        self.terms_ = {t: tuple((self.baseline_terms or BASELINE_TERMS).get(t, ())) for t in y}
        self.forms_ = {t: {**BASELINE_FORMS, **(self.baseline or {})}[t] for t in y}
        self.reference_power_ = 0.0
        self.models_: dict[str, dict] = {}
        for target, values in y.items():
            values = np.asarray(values, float)
            keep = np.isfinite(values) & (values >= 0)
            if target == "compile_seconds":
                keep &= values > 0
            if keep.sum() < 2:
                raise ValueError(f"too few rows with a {target} label ({int(keep.sum())})")
            z = to_log(target, values[keep])
            Xt = X[keep].reset_index(drop=True)
            if target == "compile_seconds" and reference is not None:
                self.reference_power_ = self._drift_power(
                    Xt, z, drift[keep], None if groups is None else groups[keep])
                z = z - self.reference_power_ * drift[keep]
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
        with _openmp().limit(limits=self.n_threads, user_api="openmp"):
            return {target: self._predict_target(target, fitted, X)
                    for target, fitted in self.models_.items()}

    def _drift_power(self, X: pd.DataFrame, z: np.ndarray, drift: np.ndarray,
                     groups: np.ndarray | None) -> float:
        if self.reference_power is not None:
            return float(self.reference_power)
        return drift_power(_log_counts(X, DRIFT_TERMS), z, drift, groups)

    def _fit_target(self, target: str, X: pd.DataFrame, z: np.ndarray,
                    groups: np.ndarray | None) -> dict:
        fitted = self._fit_parts(target, X, z, groups)
        base, trees = np.full(len(z), np.nan), np.zeros(len(z))
        for train, test in self._folds(len(z), groups):
            parts = self._fit_parts(target, X.iloc[train], z[train],
                                    None if groups is None else groups[train])
            base[test], trees[test] = self._predict_parts(target, parts, X.iloc[test])
        seen = np.isfinite(base)
        residual = (z - base - trees)[seen]
        fitted["lo"], fitted["hi"] = conformal_bounds(residual, self.coverage)
        fitted["oof_residual_mad"] = float(np.median(np.abs(residual))) if len(residual) else None
        return fitted

    def _fit_parts(self, target: str, X: pd.DataFrame, z: np.ndarray,
                   groups: np.ndarray | None) -> dict:
        form = self.forms_[target]
        inputs = _log_counts(X, self.terms_[target])
        if form == "overhead" and inputs.shape[1]:
            coef = overhead_power_law(inputs, z, groups)
        else:
            coef = power_law_coef(inputs, z, groups if form == "within" else None)
        base = _baseline(coef, inputs, form)
        booster = None
        if self.residual_model and len(z) >= 2 * self.min_samples_leaf:
            booster = HistGradientBoostingRegressor(
                max_iter=self.max_iter, learning_rate=self.learning_rate,
                max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
                l2_regularization=self.l2_regularization, early_stopping=False,
                random_state=self.random_state)
            booster.fit(X.to_numpy(float), z - base)
        return {"coef": coef, "booster": booster}

    def _predict_parts(self, target: str, fitted: dict,
                       X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        form = self.forms_[target]
        base = _baseline(fitted["coef"], _log_counts(X, self.terms_[target]), form)
        trees = np.zeros(len(X))
        if fitted["booster"] is not None:
            trees = fitted["booster"].predict(X.to_numpy(float))
        return base, trees

    def _predict_target(self, target: str, fitted: dict, X: pd.DataFrame) -> np.ndarray:
        base, trees = self._predict_parts(target, fitted, X)
        return base + trees

    def _folds(self, n: int, groups: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
        from sklearn.model_selection import GroupKFold, KFold

        if self.n_folds < 2 or n < 2 * self.n_folds:
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
        return _augment(X.loc[:, self.feature_names_in_].astype(float))


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


def normalized_seconds(rows: pd.DataFrame) -> tuple[np.ndarray, float]:
    """Compile seconds of dataset rows as if measured at the median reference time, and the
    power of `ref / median ref` divided out (fitted on these rows, within families).

    Rows are measured under varying load; this is the drift-free label evaluation uses.
    """
    seconds = pd.to_numeric(rows["compile_seconds"], errors="coerce").to_numpy(float)
    if "ref_seconds" not in rows:
        return seconds, 0.0
    ref = pd.to_numeric(rows["ref_seconds"], errors="coerce").to_numpy(float)
    keep = (seconds > 0) & (ref > 0)
    if keep.sum() < 3:
        return seconds, 0.0
    drift = np.where(ref > 0, np.log(np.where(ref > 0, ref, 1.0) / np.median(ref[keep])), 0.0)
    logs = _log_counts(_augment(features_frame(rows)), DRIFT_TERMS)
    power = drift_power(logs[keep], np.log(seconds[keep]), drift[keep],
                        families(rows)[keep])
    return seconds * np.exp(-power * drift), power


def overhead_power_law(logs: np.ndarray, z: np.ndarray,
                       groups: np.ndarray | None = None) -> np.ndarray:
    """`[a0, a1, b...]` of `z ~ log(exp(a0) + exp(a1 + logs @ b))`: a fixed cost plus a power
    law, exponent of the first term in [0, 2] (HLO passes are at most quadratic), the
    others in [0, 1].

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
    upper = np.r_[np.inf, np.full(n_groups, np.inf), 2.0, np.ones(k - 1)]
    slope = np.clip(start[1:], lower[1 + n_groups:] + 1e-6, upper[1 + n_groups:] - 1e-6)
    p0 = np.r_[np.log(np.exp(z).min()), np.full(n_groups, np.median(z - logs @ slope)), slope]
    p = least_squares(residual, p0, bounds=(lower, upper), loss="soft_l1", f_scale=0.5).x
    a0, b = p[0], p[1 + n_groups:]
    a1 = least_squares(lambda a: np.logaddexp(a0, a[0] + logs @ b) - z,
                       [np.median(p[1:1 + n_groups])], loss="soft_l1", f_scale=0.5).x[0]
    return np.r_[a0, a1, b]


def _baseline(coef: np.ndarray, logs: np.ndarray, form: str) -> np.ndarray:
    if form == "overhead" and logs.shape[1]:
        return np.logaddexp(coef[0], coef[1] + logs @ coef[2:])
    return coef[0] + logs @ coef[1:]


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


def families(rows: pd.DataFrame) -> np.ndarray:
    """Program family per row ("unknown" where a row has none)."""
    if "family" not in rows:
        return np.full(len(rows), "unknown", dtype=object)
    return rows["family"].fillna("unknown").astype(str).to_numpy()


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
                                          groups=families(rows), reference=reference)


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
                    metrics=result.report, name=f"costmodel-{out.name}")
    figures = plots.write_all(result.predictions, rows, estimator, out)
    write_card(out / "MODEL_CARD.md", artifact.manifest, result.report, rows, figures)
    return artifact
