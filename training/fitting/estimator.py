"""The cost model: a size-aware power-law baseline plus boosted trees on its residual.

Trees cannot extrapolate: past the largest compile in the sweep they predict the value of
their last leaf. Users care most about compiles bigger than any we measured, so each
target is modelled in log space as `baseline(size) + trees(features)`, where the baseline
is a least-squares power law in a few size counts (it carries the growth) and the trees
only correct its residual (bounded). Intervals are split-conformal: quantiles of
out-of-fold residuals, with folds that hold out whole program families (or libraries, for
real programs) so the interval reflects a program unlike any in training, taken per
tercile of predicted size where there are enough residuals; where enough real programs
are in the data, their residuals alone set the intervals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

# Imported here, not where used: threadpoolctl can only limit an OpenMP runtime that is
# already loaded, and trees spinning on more threads than a busy machine grants run 50x
# slower.
from sklearn.ensemble import HistGradientBoostingRegressor

from costmodel.features import MODEL_FEATURES
from costmodel.features.sharding import PLACEMENT_INPUTS
from costmodel.models.device_correction import CHIP_HOST_INPUT
from costmodel.models.forest import FlatForest
from costmodel.models.novelty import Novelty
from costmodel.models.predictor import (
    LOG_OFFSETS,
    TARGETS,
    Anchor,
    Predictor,
    TargetModel,
    column_sum,
    from_log,
    sharded,
    to_log,
)
from costmodel.models.table import Table, augment

from .baseline import drift_power, overhead_power_law, power_law_coef
from .intervals import MIN_INTERVAL_RESIDUALS, interval_rows, with_intervals
from .recipe import (
    ADDED_TERMS,
    ANCHOR_HELD,
    ANCHOR_MARGINS,
    ANCHOR_WEIGHTS,
    ANCHORS,
    BASELINE_FORMS,
    BASELINE_TERMS,
    DRIFT_TERMS,
    held_per_byte,
)

if TYPE_CHECKING:
    import pandas as pd

# Fewest sharded rows with an out-of-fold prediction that set a `sharded_offset`.
MIN_SHARDED_RESIDUALS = 30

__all__ = ["LOG_OFFSETS", "TARGETS", "CompileCostModel", "Table", "augment", "from_log",
           "to_log"]


class CompileCostModel:
    """Predicts compile seconds, peak host-RSS growth and executable bytes, with intervals.

    Args:
        coverage: Nominal coverage of the prediction intervals.
        n_folds: Folds for the out-of-fold residuals the intervals come from.
        reference_power: Exponent of the reference timing divided out of compile seconds
            (1: model `compile / ref`, 0: raw seconds; None: fit it). Removes drift and
            load; predictions are for a machine whose reference takes the median time.
        baseline_terms: Size counts of the power law for the targets named (others keep
            `BASELINE_TERMS`); an empty tuple leaves only an intercept (a plain tree).
        baseline: Form of the baseline per target (defaults: `BASELINE_FORMS`).
            "within": the power law's exponents come from how programs of one family scale
            as they grow, its level from all rows (the trees learn each kind of program's
            level from its op mix); "pooled": one least-squares fit of all rows;
            "overhead": a fixed cost plus a power law (see `overhead_power_law`), whose
            growth past the fixed cost is steeper than a plain power law's, plus the
            added terms of `added_terms` (each a cost of its own).
        added_terms: Counts added to an "overhead" baseline, for the targets named
            (others keep `ADDED_TERMS`; `BACKEND_TERMS` holds a backend's own).
        residual_model: Fit boosted trees on the baseline's residual (False: baseline only).
        tree_exclude: Features the trees do not read (`BACKEND_TERMS` holds a backend's own).
        anchors: Target -> the target whose prediction gives it a ceiling (`Anchor`;
            defaults: `ANCHORS`; `{}`: none).
        anchor_held: Columns of bytes that raise an anchor's ceiling (`Anchor.held`;
            default: `ANCHOR_HELD`; `()`: none).
        anchor_margins: Margins an anchor's ceiling may sit above its line, chosen with
            its weight (default: `ANCHOR_MARGINS`; `BACKEND_TERMS` holds a backend's own).
        max_iter, learning_rate, max_leaf_nodes, min_samples_leaf, l2_regularization:
            Passed to `HistGradientBoostingRegressor`.
        n_threads: OpenMP and BLAS threads while fitting; on small data one is as
            fast, and many spin badly on a busy machine. Predictions use numpy only.
        random_state: Seed for fold shuffling and the trees.

    Example:
        >>> model = CompileCostModel().fit(X, {"compile_seconds": seconds})
        >>> model.predict(X_new)["compile_seconds"]["hi"]
    """

    def __init__(self, *, coverage: float = 0.9, n_folds: int = 5,
                 reference_power: float | None = None,
                 baseline_terms: Mapping[str, Sequence[str]] | None = None,
                 baseline: Mapping[str, str] | None = None,
                 added_terms: Mapping[str, Sequence[str]] | None = None,
                 residual_model: bool = True,
                 tree_exclude: Sequence[str] = (),
                 anchors: Mapping[str, str] | None = None,
                 anchor_held: Sequence[str] | None = None,
                 anchor_margins: Sequence[float] | None = None,
                 max_iter: int = 100,
                 learning_rate: float = 0.1,
                 max_leaf_nodes: int = 15, min_samples_leaf: int = 10,
                 l2_regularization: float = 1.0, n_threads: int = 1,
                 random_state: int = 0, sharded_offset: bool = False) -> None:
        self.coverage = coverage
        self.n_folds = n_folds
        self.reference_power = reference_power
        self.baseline_terms = baseline_terms
        self.baseline = baseline
        self.added_terms = added_terms
        self.residual_model = residual_model
        self.tree_exclude = tuple(tree_exclude)
        self.anchors = anchors
        self.anchor_held = anchor_held
        self.anchor_margins = None if anchor_margins is None else tuple(anchor_margins)
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.n_threads = n_threads
        self.random_state = random_state
        self.sharded_offset = sharded_offset

    def fit(self, X: pd.DataFrame | Sequence[Mapping[str, float]], y: Mapping[str, Sequence[float]], *,
            groups: Sequence | None = None,
            reference: Sequence[float] | None = None,
            sample_weight: Sequence[float] | None = None,
            interval_rows: Sequence[bool] | None = None) -> CompileCostModel:
        """Fit one model per target of `y` (rows with a missing label are skipped).

        Args:
            X: One row per program, a column per name of `MODEL_FEATURES` (a DataFrame,
                or one feature mapping per row).
            y: Natural-unit labels by target name (seconds, bytes).
            groups: Program family per row; out-of-fold residuals hold out whole groups.
            reference: Seconds of the reference compile measured with each row.
            sample_weight: How much each row counts in the baseline's least squares and
                the trees (default: equally); intervals weigh residuals equally.
            interval_rows: The rows whose out-of-fold residuals set the intervals, where
                at least `MIN_INTERVAL_RESIDUALS` of them have one (default: all rows).
                Real programs are what users compile: intervals from synthetic families'
                residuals as well covered 95% of held-out libraries, not 90%.
        """
        from threadpoolctl import threadpool_limits

        # BLAS too: the baseline's bounded least squares takes an SVD of its Jacobian each
        # step, and OpenBLAS spinning two threads on a busy 2-core machine made each one
        # 60x slower (20 ms -> 1.25 s; 270 s of a 314 s fit)
        with threadpool_limits(limits=self.n_threads):
            return self._fit(X, y, groups, reference, sample_weight, interval_rows)

    def _fit(self, X, y: Mapping[str, Sequence[float]], groups: Sequence | None,
             reference: Sequence[float] | None,
             sample_weight: Sequence[float] | None,
             interval_rows: Sequence[bool] | None) -> CompileCostModel:
        # a frame of TPU rows carries the placement inputs too (`fit.features_frame`)
        extra = [n for n in (*PLACEMENT_INPUTS, CHIP_HOST_INPUT)
                 if hasattr(X, "columns") and n in X.columns]
        self.feature_names_in_ = list(MODEL_FEATURES) + extra
        table = self._checked(X)
        unknown = sorted(set(y) - set(TARGETS))
        if unknown:
            raise ValueError(f"unknown targets: {', '.join(unknown)}; known: {', '.join(TARGETS)}")
        groups = None if groups is None else np.asarray(groups)
        weight = (np.ones(len(table)) if sample_weight is None
                  else np.asarray(sample_weight, float))
        calibrating = (np.ones(len(table), bool) if interval_rows is None
                       else np.asarray(interval_rows, bool))
        drift = np.zeros(len(table))
        self.reference_seconds_ = None
        if reference is not None:
            reference = np.asarray(reference, float)
            self.reference_seconds_ = float(np.nanmedian(reference))
            drift = np.nan_to_num(np.log(reference / self.reference_seconds_))
        terms = {**BASELINE_TERMS, **(self.baseline_terms or {})}
        added = {**ADDED_TERMS, **(self.added_terms or {})}
        self.terms_ = {t: tuple(terms.get(t, ())) for t in y}
        self.added_ = {t: tuple(added.get(t, ())) for t in y}
        self.forms_ = {t: {**BASELINE_FORMS, **(self.baseline or {})}[t] for t in y}
        self.reference_power_ = 0.0
        fitted: dict[str, TargetModel] = {}
        # each target's modelled label and out-of-fold prediction, NaN where it has none
        modelled = {t: np.full(len(table), np.nan) for t in y}
        out_of_fold = {t: np.full(len(table), np.nan) for t in y}
        for target, values in y.items():
            values = np.asarray(values, float)
            keep = np.isfinite(values) & (values >= 0)
            if target == "compile_seconds":
                keep &= values > 0
            if keep.sum() < 2:
                raise ValueError(f"too few rows with a {target} label ({int(keep.sum())})")
            z = to_log(target, values[keep])
            rows = table.rows(keep)
            if target == "compile_seconds" and reference is not None:
                self.reference_power_ = self._drift_power(
                    rows, z, drift[keep], None if groups is None else groups[keep])
                z = z - self.reference_power_ * drift[keep]
            fitted[target], out_of_fold[target][keep] = self._fit_target(
                target, rows, z, None if groups is None else groups[keep], weight[keep],
                calibrating[keep])
            modelled[target][keep] = z
        anchors = ANCHORS if self.anchors is None else self.anchors
        for target, source in anchors.items():
            if target in fitted and source in fitted:
                columns = ANCHOR_HELD if self.anchor_held is None else tuple(self.anchor_held)
                held = column_sum(table, columns)
                per_byte = held_per_byte(from_log(target, modelled[target]), held)
                fitted[target] = self._anchored(
                    fitted[target], source, modelled[source], modelled[target],
                    out_of_fold[source], out_of_fold[target], calibrating,
                    columns if per_byte else (), held, per_byte)
        self.targets_ = tuple(y)
        self.predictor_ = Predictor(
            feature_names=tuple(self.feature_names_in_), targets=fitted,
            tree_exclude=self.tree_exclude, reference_power=self.reference_power_,
            reference_seconds=self.reference_seconds_, recipe=self.get_params(),
            novelty=Novelty.of(table.values[:, :len(self.feature_names_in_)]))
        return self

    def get_params(self) -> dict:
        """The constructor arguments, as given (what refitting the same model takes)."""
        import inspect

        names = [n for n in inspect.signature(type(self).__init__).parameters if n != "self"]
        return {name: getattr(self, name) for name in names}

    @property
    def predictor(self) -> Predictor:
        """The fitted model as plain data (what an artifact stores and predictions read)."""
        if not hasattr(self, "predictor_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("CompileCostModel is not fitted yet; call fit() first")
        return self.predictor_

    def predict(self, X) -> dict[str, dict[str, np.ndarray]]:
        """Point estimate and interval per target, in natural units (`Predictor.predict`)."""
        return self.predictor.predict(X)

    def predict_log(self, X) -> dict[str, np.ndarray]:
        """Point estimates on the modelled (log) scale, per target."""
        return self.predictor.predict_log(X)

    def _drift_power(self, X: Table, z: np.ndarray, drift: np.ndarray,
                     groups: np.ndarray | None) -> float:
        if self.reference_power is not None:
            return float(self.reference_power)
        return drift_power(X.log_counts(DRIFT_TERMS), z, drift, groups)

    def _fit_target(self, target: str, X: Table, z: np.ndarray,
                    groups: np.ndarray | None, weight: np.ndarray,
                    calibrating: np.ndarray) -> tuple[TargetModel, np.ndarray]:
        """The target's model, intervals from out-of-fold residuals, and each row's
        out-of-fold prediction (NaN for rows no fold held out)."""
        fitted = self._fit_parts(target, X, z, groups, weight)
        base, trees = np.full(len(z), np.nan), np.zeros(len(z))
        for train, test in self._folds(len(z), groups):
            parts = self._fit_parts(target, X.rows(train), z[train],
                                    None if groups is None else groups[train], weight[train])
            base[test], trees[test] = parts.parts(X.rows(test), self._tree_columns(X))
        predicted = base + trees
        seen = interval_rows(np.isfinite(base), calibrating)
        if self.sharded_offset and target == "compile_seconds":
            fitted, predicted = self._sharded_offset(fitted, X, z, predicted, seen)
        return with_intervals(fitted, predicted[seen], z[seen], self.coverage), predicted

    def _sharded_offset(self, fitted: TargetModel, X: Table, z: np.ndarray,
                        predicted: np.ndarray, seen: np.ndarray
                        ) -> tuple[TargetModel, np.ndarray]:
        """`fitted` with the median out-of-fold residual of its sharded rows (those of
        `seen`) as its `sharded_offset`, and the out-of-fold predictions moved by it:
        trees put the sharded programs of a library they never saw too high, though not
        those of libraries they saw (bench/FINDINGS.md, "Sharded programs of a library
        never seen")."""
        split = sharded(X) > 0
        residual = (z - predicted)[split & seen]
        if len(residual) < MIN_SHARDED_RESIDUALS:
            return fitted, predicted
        offset = float(np.median(residual))
        return replace(fitted, sharded_offset=offset), predicted + offset * split

    def _anchored(self, fitted: TargetModel, source: str, z_source: np.ndarray,
                  z: np.ndarray, predicted_source: np.ndarray, predicted: np.ndarray,
                  calibrating: np.ndarray, held_columns: Sequence[str] = (),
                  held: np.ndarray | None = None, per_held_byte: float = 0.0) -> TargetModel:
        """`fitted` with a ceiling from `source`'s modelled label (`Anchor`): the line
        fitted to the rows' own labels, raised by `per_held_byte` per byte each row holds
        (`held`, of `held_columns`); its weight and margin the ones whose out-of-fold
        predictions err least (mean |log error|), intervals from those predictions'
        residuals; as it was where no weight beats leaving it alone. Real programs alone
        decide where there are enough of them, as they alone set intervals."""
        held = np.zeros(len(z)) if held is None else held
        both = interval_rows(np.isfinite(z_source) & np.isfinite(z), calibrating)
        seen = both & np.isfinite(predicted_source) & np.isfinite(predicted)
        if seen.sum() < MIN_INTERVAL_RESIDUALS:
            return fitted
        slope, intercept = np.polyfit(z_source[both], z[both], 1)
        candidates = [Anchor(source, float(w), float(slope), float(intercept), margin,
                             tuple(held_columns), float(per_held_byte))
                      for w in ANCHOR_WEIGHTS
                      for margin in (self.anchor_margins or ANCHOR_MARGINS)]
        errors = [np.mean(np.abs(z[seen] - a.pull(predicted[seen], predicted_source[seen],
                                                  held[seen]))) for a in candidates]
        anchor = candidates[int(np.argmin(errors))]
        if anchor.weight == 0.0:
            return fitted
        return with_intervals(replace(fitted, anchor=anchor),
                              anchor.pull(predicted[seen], predicted_source[seen], held[seen]),
                              z[seen], self.coverage)

    def _fit_parts(self, target: str, X: Table, z: np.ndarray,
                   groups: np.ndarray | None, weight: np.ndarray) -> TargetModel:
        form, terms, added_terms = self.forms_[target], self.terms_[target], self.added_[target]
        inputs, added = X.log_counts(terms), X.log_counts(added_terms)
        if form == "overhead" and inputs.shape[1]:
            coef = overhead_power_law(inputs, z, groups, added, weight)
        else:
            coef = power_law_coef(inputs, z, groups if form == "within" else None)
        baseline = TargetModel(form=form, terms=terms, added=added_terms, coef=coef)
        if not (self.residual_model and len(z) >= 2 * self.min_samples_leaf):
            return baseline
        base, _ = baseline.parts(X, None)
        booster = HistGradientBoostingRegressor(
            max_iter=self.max_iter, learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes, min_samples_leaf=self.min_samples_leaf,
            l2_regularization=self.l2_regularization, early_stopping=False,
            random_state=self.random_state)
        columns = self._tree_columns(X)
        inputs = X.values if columns is None else X.values[:, columns]
        # only its trees are kept: predictions read the flat copy
        forest = FlatForest.from_booster(booster.fit(*_weighted(inputs, z - base, weight)))
        return replace(baseline, forest=forest)

    def _tree_columns(self, X: Table) -> list[int] | None:
        if not self.tree_exclude:
            return None
        return [i for i, name in enumerate(X.names) if name not in self.tree_exclude]

    def _folds(self, n: int, groups: np.ndarray | None) -> list[tuple[np.ndarray, np.ndarray]]:
        from sklearn.model_selection import GroupKFold, KFold

        if self.n_folds < 2 or n < 2 * self.n_folds:
            return []
        if groups is not None and len(np.unique(groups)) >= 2:
            splitter = GroupKFold(n_splits=min(self.n_folds, len(np.unique(groups))))
            return list(splitter.split(np.zeros(n), groups=groups))
        splitter = KFold(self.n_folds, shuffle=True, random_state=self.random_state)
        return list(splitter.split(np.zeros(n)))

    def _checked(self, X) -> Table:
        return augment(Table.of(X, self.feature_names_in_))


def _weighted(X: np.ndarray, target: np.ndarray, weight: np.ndarray) -> tuple:
    """Booster `fit` arguments for weighted rows: whole-number weights as repeated rows
    (the same squared-error fit, and sklearn's weighted binning, a weighted percentile per
    feature and bin, made each fit 5x slower), other weights as `sample_weight`."""
    if np.all(weight == weight[0]):
        return X, target
    if np.all(weight == np.round(weight)) and weight.min() >= 1:
        repeats = weight.astype(int)
        return np.repeat(X, repeats, axis=0), np.repeat(target, repeats)
    return X, target, weight
