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

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

# Imported here, not where used: threadpoolctl can only limit an OpenMP runtime that is
# already loaded, and trees spinning on more threads than a busy machine grants run 50x
# slower.
from sklearn.ensemble import HistGradientBoostingRegressor

from costmodel.features import MODEL_FEATURES
from costmodel.models.forest import FlatForest
from costmodel.models.novelty import Novelty
from costmodel.models.predictor import (
    LOG_OFFSETS,
    TARGETS,
    Anchor,
    Bands,
    Predictor,
    TargetModel,
    column_sum,
    from_log,
    to_log,
)
from costmodel.models.table import Table, augment

from .baseline import drift_power, overhead_power_law, power_law_coef

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LOG_OFFSETS", "TARGETS", "CompileCostModel", "Table", "augment", "from_log",
           "to_log"]
# How each target's baseline is fitted (see `CompileCostModel`).
BASELINE_FORMS = {"compile_seconds": "overhead", "peak_rss_bytes": "overhead",
                  "executable_memory_bytes": "within"}
# Size terms of the regression that estimates how much load drift shows in compile seconds.
DRIFT_TERMS = ("hlo_ops_inlined", "hlo_ops_trip_weighted")
# Size counts of the baseline, per target (each enters as log(1 + count)).
# Compile seconds also scale with the emulated fusions' ops in all (`fused_ops`), which
# follow XLA's optimized instruction count where op counts do not (an unrolled recurrent
# net's backward fusions recompute a growing chain at every step). Schema 9, CPU, against
# the op count alone: library held out, median fold 1.19 either way, p90 1.62 -> 1.54,
# within 2x 95.9% -> 97.9%, Spearman 0.953 -> 0.964, but the max 5.1 -> 6.5 (sympy2jax
# with 4 outputs, which the emulator over-counts 4x); family held out 1.24 -> 1.22;
# extrapolation 2.32 -> 2.17. The GPU baseline keeps its own terms (`BACKEND_TERMS`).
# Host memory too follows the fused ops (XLA compiles each fusion as one LLVM function)
# better than loop-weighted op counts and tensor sizes. Schema 11, against (ops, ops x
# trips, elements): CPU library held out median fold 1.313 -> 1.289, p90 2.18 -> 2.00,
# Spearman 0.877 -> 0.899; the outside-libraries runs' mean |log error| (of MB + 1)
# 0.406 -> 0.332 and 0.412 -> 0.340 (median 1.315 -> 1.286, 1.435 -> 1.328); H100 held out
# 1.218 either way, p90 1.71 -> 1.67, Spearman 0.934 -> 0.954, its outside run 0.337 ->
# 0.315 (median 1.261 -> 1.331). Adding elements, ops x trips or the fusion count back did
# worse on both.
BASELINE_TERMS = {
    "compile_seconds": ("hlo_ops_inlined", "fused_ops"),
    "peak_rss_bytes": ("hlo_ops_inlined", "fused_ops"),
    "executable_memory_bytes": ("hlo_ops_inlined", "tensor_sum_elements",
                                "tensor_max_elements", "io_bytes"),
}
# Counts whose cost adds to the rest of the compile instead of scaling it (see
# `overhead_power_law`), per target with an "overhead" baseline. On XLA:CPU: embedded
# constants; matrix-vector dots (emitted as LLVM loops, not library calls); big fusions
# (LLVM optimizes each as one function); kernels run as one sequence (the runtime orders
# them by checking every pair for shared buffers, then prunes redundant edges: 80% of a
# 4000-kernel unrolled loop's compile, `bench/archive/perf_compile.py`); case ops' results x
# branches squared (HLO ordering relates each result's definitions across branches: 89%
# of a 64-branch switch gradient's compile went to call-graph dominance checks and branch
# lookups). The sequence term replaced values-with-many-uses squared, which had
# stood in for it on unrolled loops. Schema 6, leave-one-family-out, adding the sequence
# term and then the case term: Spearman 0.924 -> 0.930 -> 0.934, p90 1.97 -> 1.92 -> 1.85,
# extrapolation 2.28 -> 1.94 -> 1.77. `layout_transposes` stays a tree input: as an added
# term (32 families, schema 5) it took over the fixed cost and traded extrapolation
# (median fold 2.28 -> 2.50) for leave-one-family-out (Spearman 0.924 -> 0.935, p90
# 1.97 -> 1.95).
# Constant folding (schema 7) is a cost of its own too: XLA's interpreter evaluates the
# folded ops element by element (9 elementwise steps over 2048^2 tables: 9.3 s), and hands
# dots to a library (nine 2048^3 products: 5.7 s). Trees alone cannot carry it past the
# largest fold measured: with the `constant_fold` family held out, median fold 4.3 / max
# 32 without these terms, 3.7 / 19 with them (nothing else in the corpus folds much).
# Distinct fusions (schema 15) are a cost of their own: XLA:CPU compiles a fusion it has
# compiled before almost for free (`bench/archive/kernel_reuse.py`: 0.46 ms per repeated fusion
# against 6.9-14.4 ms per distinct one), so a model that grows with all fusions
# over-predicts long unrolled programs. As a tree input only, trained on programs under
# 3 s and tested on those of 10 s or more, median fold 1.81 / p90 18.9; as an added term,
# 1.67 / 3.5 (libraries held out: 1.179 -> 1.157).
# Since schema 16 the fusion term counts array ops only (XLA:CPU compiles scalar fusions in
# linear time, `bench/archive/scalar_fusions.py`): over 148 bench programs of libraries in no
# corpus, mean |log error| 0.225 -> 0.214; libraries held out 1.16 -> 1.17. Offered both
# (schema 15's all-op squares as a second term), the corpus fit took the all-op one
# (exponent 0.95) and dropped the array-only one (0.01), back to 0.226 on those programs.
# Since schema 17 the fusion term is each fusion's cost times its inputs, not its cost
# squared: one fusion of 1024 `sin(a) + w_i` steps compiles in 0.26 s on one addend and
# 12.4 s on 1024 separate arrays (`bench/archive/fusion_shapes.py`). Over the 184 stored bench
# programs of libraries in no corpus, mean |log error| 0.260 -> 0.242 (three fits with 31
# random real rows left out: 0.238-0.248 against 0.257-0.264); offered as a second term
# beside the squares, 0.266 (0.255-0.260). The trees do not read it (as a tree input too:
# 0.240, host memory 0.322 -> 0.329).
ADDED_TERMS = {"compile_seconds": ("dense_constant_bytes", "dot_matrix_vector",
                                   "fusion_cost_inputs", "sequence_kernel_squares",
                                   "case_result_branch_squares", "fold_elements",
                                   "fold_dot_flops", "fusion_distinct")}
# Where a backend's compiler differs (`fit.model_params` applies these). For the GPU
# target, fusion size added nothing and fan-out fitted best as a scaling term; index
# changes inside a fusion (associative scans are all strided slices and pads: 95 ops took
# 4-5 s) are a cost of their own. Leave-one-family-out on the deviceless H100 rows gave
# median fold 1.32 / p90 2.47 this way against 1.39 / 2.96 with the CPU terms (schema 4,
# the 500 rows before the library families).
# On CPU the indexing term made it worse (p90 1.93 -> 2.34).
# Kernels per sequence describe XLA:CPU's runtime; as GPU tree inputs they only added
# noise (schema 6, 1140 rows: p90 2.05 -> 2.13). HLO ordering is shared: the case term
# helps there too (Spearman 0.904 -> 0.909, p90 2.05 -> 2.03, extrapolation 2.00 -> 2.02).
BACKEND_TERMS = {"gpu": {
    "baseline_terms": {"compile_seconds": ("hlo_ops_inlined", "fanout_squares")},
    "added_terms": {"compile_seconds": ("dense_constant_bytes", "dot_matrix_vector",
                                        "fusion_indexing_squares",
                                        "case_result_branch_squares", "fold_elements",
                                        "fold_dot_flops", "fusion_distinct")},
    "tree_exclude": ("sequence_kernels_max", "sequence_kernel_squares", "fusion_cost_inputs"),
}, "cpu": {"tree_exclude": ("fusion_cost_inputs",)}}
# Targets whose prediction has a ceiling drawn from another target's (`Anchor`), moved
# down toward it by the weight that best predicts the out-of-fold rows (`ANCHOR_WEIGHTS`;
# 0 leaves the target as it was). Host memory follows compile time: real programs of 10 s
# or more use 26-62 MB per compile second (10th to 90th percentile), yet the memory model
# alone, whose trees read the op mix, predicted 1.5-3.5 GB for bench programs of 20-30 s
# that used 0.5-1.4 GB. CPU, schema 17, over the 184 stored bench programs of libraries in
# no corpus (`bench/archive/memory_anchor.py`, fits only; three draws leave 31 random real rows
# out): host memory's mean |log error| 0.322 -> 0.287 (draws 0.327 -> 0.293, 0.329 ->
# 0.294, 0.316 -> 0.307), on those of 10-100 s 0.606 -> 0.400; fitted weight 0.85 (draws
# 0.7-0.9; the margin above the line, chosen with it, 0 in every fit). Better on six of the
# eight benches (the top-end programs 0.591 -> 0.291), worse on two: simulators and RL
# 0.223 -> 0.329, whose compile time is under-predicted 1.5-1.9x and the ceiling with it,
# and the unseen programs 0.259 -> 0.292. Pulled toward the line from below too it was
# worse than none (0.361): small programs' memory sits above a line through all sizes.
ANCHORS = {"peak_rss_bytes": "compile_seconds"}
ANCHOR_WEIGHTS = np.round(np.linspace(0.0, 1.0, 21), 2)
# How far above the line the ceiling may sit (log scale), chosen with the weight.
ANCHOR_MARGINS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
# Bytes a compile holds whatever its time, which raise the ceiling (`Anchor.held`): by as
# many bytes per held byte as the rows that hold at least `ANCHOR_HELD_MIN` of them use
# at the low end (`ANCHOR_HELD_QUANTILE` of their memory over held bytes), so that the
# ceiling does not cut below what such programs hold. CPU, schema 17: 69 rows of five
# families (captured tables, folded constants, lookup tables, NetKet), 1.4-8.7 bytes per
# held byte, median 3.0, 10th percentile 1.95. Chosen, as tried first, on the out-of-fold
# rows with the weight, it came out 0-1.5 from draw to draw. With none, the ceiling took
# the product of two captured 1024x1024 tables (0.35 s to compile, 101 MB) to 44 MB; with
# it, 84 MB (`bench/archive/memory_anchor.py`: the 13 failure-class programs 0.440 -> 0.360 mean
# |log error|, three draws that leave 31 real rows out alike, no other bench moved).
ANCHOR_HELD = ("dense_constant_bytes", "fold_bytes")
ANCHOR_HELD_MIN = 4 * 2**20
ANCHOR_HELD_QUANTILE = 0.1
ANCHOR_HELD_ROWS = 10  # fewer such rows: no bytes held


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
        self.added_terms = added_terms
        self.residual_model = residual_model
        self.tree_exclude = tuple(tree_exclude)
        self.anchors = anchors
        self.anchor_held = anchor_held
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.n_threads = n_threads
        self.random_state = random_state

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
        self.feature_names_in_ = list(MODEL_FEATURES)
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
        seen = interval_rows(np.isfinite(base), calibrating)
        return with_intervals(fitted, (base + trees)[seen], z[seen], self.coverage), base + trees

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
                      for w in ANCHOR_WEIGHTS for margin in ANCHOR_MARGINS]
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


# Interval bands by predicted size: three, each from at least this many residuals.
SIZE_BANDS = 3
MIN_BAND_RESIDUALS = 40
# Fewest out-of-fold residuals of the `interval_rows` that set the intervals on their own
# (enough for every size band); with fewer, every row's residual counts.
MIN_INTERVAL_RESIDUALS = SIZE_BANDS * MIN_BAND_RESIDUALS


def held_per_byte(used: np.ndarray, held: np.ndarray) -> float:
    """Bytes a ceiling allows per held byte: the `ANCHOR_HELD_QUANTILE` of `used` over
    `held` bytes among rows holding at least `ANCHOR_HELD_MIN` (0 with fewer than
    `ANCHOR_HELD_ROWS` of them), rounded to 0.05."""
    holding = np.isfinite(used) & (held >= ANCHOR_HELD_MIN)
    if holding.sum() < ANCHOR_HELD_ROWS:
        return 0.0
    return float(np.round(np.quantile(used[holding] / held[holding], ANCHOR_HELD_QUANTILE) * 20) / 20)


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
