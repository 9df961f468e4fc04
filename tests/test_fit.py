"""The estimator: extrapolation through the baseline, intervals, input checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from costmodel.models.power_law import baseline_log
from costmodel.models.predictor import TargetModel
from costmodel.training.fitting.baseline import overhead_power_law, power_law_coef
from costmodel.training.fitting.estimator import CompileCostModel
from costmodel.training.fitting.fit import features_frame, labels, train
from costmodel.training.fitting.intervals import conformal_bounds, size_bands
from costmodel.training.fitting.recipe import ADDED_TERMS

# Small trees keep the suite fast; the behaviour under test does not depend on size.
FAST = {"max_iter": 30, "n_folds": 3, "learning_rate": 0.2}


@pytest.fixture(scope="module")
def quadratic():
    from conftest import make_rows

    rng = np.random.default_rng(0)
    return make_rows(rng.uniform(100, 2000, 150)), make_rows(np.array([5000.0, 20000.0]), seed=1)


def test_baseline_extrapolates_quadratic_compile_time_tenfold(quadratic):
    train_rows, big = quadratic
    model = train(train_rows, "cpu", "", **FAST)
    pred = model.predict(features_frame(big))["compile_seconds"]["point"]
    ratio = pred / labels(big)["compile_seconds"]  # ops 20000 is 10x the largest trained
    assert np.all((ratio > 1 / 1.5) & (ratio < 1.5)), ratio


def test_plain_trees_cannot_extrapolate(quadratic):
    train_rows, big = quadratic
    model = train(train_rows, "cpu", "", baseline_terms={"compile_seconds": ()}, **FAST)
    pred = model.predict(features_frame(big))["compile_seconds"]["point"]
    # Trees stop at the largest training compile, 1e-6 * 2000^2 = 4 s, against 400 s.
    assert pred[1] / labels(big)["compile_seconds"][1] < 0.02


def test_intervals_cover_ninety_percent_of_fresh_noisy_compiles():
    from conftest import make_rows

    rng = np.random.default_rng(3)
    rows, fresh = make_rows(rng.uniform(100, 2000, 300)), make_rows(rng.uniform(100, 2000, 2000))
    rows["compile_seconds"] *= np.exp(rng.normal(0, 0.3, len(rows)))
    fresh["compile_seconds"] *= np.exp(rng.normal(0, 0.3, len(fresh)))
    model = train(rows, "cpu", "", **FAST)
    pred = model.predict(features_frame(fresh))["compile_seconds"]
    inside = (fresh["compile_seconds"] >= pred["lo"]) & (fresh["compile_seconds"] <= pred["hi"])
    assert 0.85 <= inside.mean() <= 0.95
    # lognormal sigma 0.3: the central 90% band spans exp(2 * 1.645 * 0.3) = 2.68x
    width = np.median(pred["hi"] / pred["lo"])
    assert 2.2 < width < 3.3


def test_reference_timing_divides_out_drift():
    from conftest import make_rows

    rng = np.random.default_rng(4)
    rows = make_rows(rng.uniform(100, 2000, 200))
    slow = np.arange(len(rows)) % 5 >= 3  # 40% of rows measured on a machine twice as slow
    rows.loc[slow, "ref_seconds"] = 0.2
    rows.loc[slow, "compile_seconds"] *= 2
    probe = make_rows(np.array([500.0, 1500.0]), seed=2)
    expected = labels(probe)["compile_seconds"]  # seconds at the median reference, 0.1 s
    normalized = train(rows, "cpu", "", reference_power=1.0, **FAST)
    raw = train(rows, "cpu", "", reference_power=0.0, **FAST)
    ratio = normalized.predict(features_frame(probe))["compile_seconds"]["point"] / expected
    assert np.all(np.abs(ratio - 1) < 0.05), ratio
    assert normalized.reference_seconds_ == pytest.approx(0.1)
    raw_ratio = raw.predict(features_frame(probe))["compile_seconds"]["point"] / expected
    assert np.all(raw_ratio > 1.1), raw_ratio
    fitted = train(rows, "cpu", "", **FAST)  # the power is fitted: these rows say 1
    assert fitted.reference_power_ == pytest.approx(1.0, abs=1e-6)
    rows["compile_seconds"] = labels(make_rows(rows["f_hlo_ops"], seed=4))["compile_seconds"]
    assert train(rows, "cpu", "", **FAST).reference_power_ == pytest.approx(0.0, abs=1e-3)


def test_predict_names_missing_columns(quadratic):
    model = train(quadratic[0], "cpu", "", **FAST)
    X = features_frame(quadratic[1]).drop(columns=["hlo_ops_inlined", "dot_flops"])
    with pytest.raises(ValueError, match="missing feature columns.*hlo_ops_inlined, dot_flops"):
        model.predict(X)


def test_predict_before_fit_raises():
    with pytest.raises(NotFittedError, match="not fitted"):
        CompileCostModel().predict(pd.DataFrame({"hlo_ops": [1.0]}))


def test_conformal_bounds_pick_corrected_order_statistics():
    residual = np.arange(1.0, 40.0)  # n = 39: ranks floor(40 * .05) = 2, ceil(40 * .95) = 38
    assert conformal_bounds(residual[::-1], 0.9) == (2.0, 38.0)
    assert conformal_bounds(np.arange(1.0, 10.0), 0.9) == (-np.inf, np.inf)  # too few
    # coverage 0.68, n = 24: ranks floor(25 * .16) = 4 and ceil(25 * .84) = 21 (not 22)
    assert conformal_bounds(np.arange(1.0, 25.0), 0.68) == (4.0, 21.0)


def test_power_law_exponent_from_within_groups():
    x = np.array([[1.0], [2.0], [3.0], [2.0], [3.0], [4.0]])
    groups = np.array(["a", "a", "a", "b", "b", "b"])
    z = 2.0 * x[:, 0] + np.where(groups == "b", -3.0, 0.0)  # b: bigger programs, cheaper ops
    pooled = power_law_coef(x, z)
    within = power_law_coef(x, z, groups)
    assert within[1] == pytest.approx(2.0)
    assert within[0] == pytest.approx(np.mean(z - 2.0 * x[:, 0]))  # -1.5
    assert pooled[1] == pytest.approx(6.5 / 5.5)  # the level difference flattens it


def test_overhead_power_law_recovers_fixed_cost_and_exponent():
    ops = np.geomspace(100, 1e5, 40)
    z = np.log(0.1 + 1e-6 * ops**1.5)
    coef = overhead_power_law(np.log(ops)[:, None], z)
    assert coef == pytest.approx([np.log(0.1), np.log(1e-6), 1.5], abs=1e-3)


def test_overhead_power_law_adds_constant_bytes_instead_of_scaling():
    rng = np.random.default_rng(2)
    ops, constant = rng.uniform(10, 3000, 300), rng.choice([0.0, 1e5, 1e7, 1e8], 300)
    seconds = 0.03 + 1e-7 * ops**2 + 2e-9 * constant
    logs, extra = np.log1p(ops)[:, None], np.log1p(constant)[:, None]
    coef = overhead_power_law(logs, np.log(seconds), extra=extra)
    fitted = np.exp(baseline_log(coef, logs, "overhead", extra))
    np.testing.assert_allclose(fitted, seconds, rtol=0.02)
    assert coef[-1] == pytest.approx(1.0, abs=0.02)  # constant cost linear in bytes


def test_flat_forest_equals_sklearn_including_missing_values():
    from sklearn.ensemble import HistGradientBoostingRegressor

    from costmodel.models.forest import FlatForest

    rng = np.random.default_rng(5)
    X = rng.random((400, 6))
    X[::5, 2] = np.nan  # seen missing in training: NaN follows the learned side
    y = 3 * X[:, 0] + np.nan_to_num(X[:, 2], nan=2.0) + rng.normal(0, 0.1, 400)
    booster = HistGradientBoostingRegressor(max_iter=40, max_leaf_nodes=15).fit(X, y)
    fresh = rng.uniform(-0.5, 1.5, (300, 6))
    fresh[::3, 2] = np.nan
    fresh[::4, 4] = np.nan  # never missing in training
    np.testing.assert_allclose(FlatForest.from_booster(booster).predict(fresh), booster.predict(fresh),
                               rtol=0, atol=1e-12)


def test_predict_takes_feature_mappings_like_a_frame(quadratic):
    train_rows, big = quadratic
    model = train(train_rows, "cpu", "", **FAST)
    frame = features_frame(big)
    as_rows = frame.to_dict("records")
    np.testing.assert_array_equal(model.predict(as_rows)["compile_seconds"]["point"],
                                  model.predict(frame)["compile_seconds"]["point"])
    del as_rows[1]["hlo_ops"]
    with pytest.raises(ValueError, match="hlo_ops"):
        model.predict(as_rows)


def test_each_backend_fits_its_own_size_terms_and_overrides_keep_the_rest():
    from conftest import make_rows

    from costmodel.training.fitting.recipe import ADDED_TERMS, BACKEND_TERMS, BASELINE_TERMS

    cpu_rows = make_rows(np.linspace(100, 2000, 60))
    gpu_rows = cpu_rows.assign(backend="gpu", target="h100")
    cpu = train(cpu_rows, "cpu", "", **FAST)
    gpu = train(gpu_rows, "gpu", "h100", **FAST)
    assert cpu.added_["compile_seconds"] == ADDED_TERMS["compile_seconds"]
    assert "fusion_cost_inputs" in cpu.added_["compile_seconds"]
    assert "fusion_cost_squares" not in cpu.added_["compile_seconds"]
    assert gpu.added_["compile_seconds"] == BACKEND_TERMS["gpu"]["added_terms"]["compile_seconds"]
    assert gpu.terms_["compile_seconds"] == ("hlo_ops_inlined", "fanout_squares")
    assert gpu.tree_exclude == BACKEND_TERMS["gpu"]["tree_exclude"]
    assert cpu.tree_exclude == ("fusion_cost_inputs", "fft_points_max", "fft_odd_part_max",
                                "fft_odd_length_twos")
    # naming one target's terms leaves the other targets on their defaults
    plain = train(cpu_rows, "cpu", "", baseline_terms={"compile_seconds": ()}, **FAST)
    assert plain.terms_["compile_seconds"] == ()
    assert plain.terms_["peak_rss_bytes"] == BASELINE_TERMS["peak_rss_bytes"]


def test_trees_leave_out_excluded_features():
    from conftest import make_rows

    rows = make_rows(np.linspace(100, 2000, 120))
    # a residual only op_sine explains: e^0.5 above the power law where it is high
    rows["compile_seconds"] *= np.exp(np.where(rows["f_op_sine"] > 50, 0.5, -0.5))
    # no added costs, so that the residual is the trees' (eight power laws of noise
    # counts fitted on 120 rows take part of it: e^0.62 learned instead of e^0.82)
    for name in ADDED_TERMS["compile_seconds"]:
        rows[f"f_{name}"] = 0.0
    probe = features_frame(rows.iloc[[0, 0]]).copy()
    probe["op_sine"] = [10.0, 90.0]  # the same program but for op_sine
    reading = train(rows, "cpu", "", **FAST).predict(probe)["compile_seconds"]["point"]
    blind = train(rows, "cpu", "", tree_exclude=("op_sine",), **FAST).predict(probe)
    assert reading[1] / reading[0] > 2.0  # e^1 = 2.7 learned
    assert blind["compile_seconds"]["point"][1] == blind["compile_seconds"]["point"][0]


def test_size_bands_bound_each_tercile_by_its_own_residuals():
    # predicted log sizes 0..119; residuals spread 1x, 2x, 3x in the three terciles
    predicted = np.arange(120.0)
    spread = np.repeat([1.0, 2.0, 3.0], 40)
    residual = spread * np.tile(np.linspace(-1, 1, 40), 3)
    bands = size_bands(predicted, residual, 0.9)
    assert bands.edges == pytest.approx([39.6667, 79.3333], abs=1e-3)
    # n = 40 per band: ranks 2 and 39 of linspace(-1, 1, 40), i.e. -+(1 - 2/39)
    assert bands.hi == pytest.approx([s * (1 - 2 / 39) for s in (1, 2, 3)])
    assert bands.lo == pytest.approx([-s * (1 - 2 / 39) for s in (1, 2, 3)])
    fitted = TargetModel("overhead", (), (), np.zeros(1), lo=-9.0, hi=9.0, bands=bands)
    lo, hi = fitted.interval_offsets(np.array([5.0, 100.0]))
    assert hi.tolist() == pytest.approx([1 - 2 / 39, 3 * (1 - 2 / 39)])
    assert size_bands(predicted[:119], residual[:119], 0.9) is None  # under 3 x 40


def test_models_without_size_bands_keep_one_band():
    fitted = TargetModel("overhead", (), (), np.zeros(1), lo=-0.5, hi=0.7)
    lo, hi = fitted.interval_offsets(np.array([1.0, 50.0]))
    assert lo.tolist() == [-0.5, -0.5] and hi.tolist() == [0.7, 0.7]


def test_overhead_power_law_follows_the_rows_that_weigh_more():
    # half the rows grow as ops^1, half as ops^2: the weighted side sets the exponent
    ops = np.tile(np.geomspace(100, 1e5, 30), 2)
    z = np.log(np.r_[1e-4 * ops[:30], 1e-7 * ops[30:] ** 2])
    logs = np.log(ops)[:, None]
    linear = overhead_power_law(logs, z, weight=np.r_[np.full(30, 1000.0), np.ones(30)])
    square = overhead_power_law(logs, z, weight=np.r_[np.ones(30), np.full(30, 1000.0)])
    assert linear[2] == pytest.approx(1.0, abs=0.1)
    assert square[2] == pytest.approx(2.0, abs=0.1)


def test_real_programs_weigh_real_weight_times_a_synthetic_row(synthetic_rows):
    from costmodel.training.fitting.fit import row_weights, split_options

    rows = synthetic_rows(np.geomspace(100, 3000, 40))
    rows["library"] = [""] * 20 + ["flax"] * 20
    np.testing.assert_array_equal(row_weights(rows["library"], real_weight=4.0),
                                  np.r_[np.ones(20), np.full(20, 4.0)])
    assert split_options({"max_iter": 5, "real_weight": 4.0}) == ({"max_iter": 5},
                                                                  {"real_weight": 4.0})
    assert split_options({}) == ({}, {"real_weight": 3.0})
    # labels of the real half are 8x the synthetic law: weighting them pulls predictions up
    rows.loc[20:, "compile_seconds"] *= 8.0
    probe = features_frame(rows.iloc[[25]])
    low = train(rows, "cpu", **FAST, residual_model=False, real_weight=1.0).predict(probe)
    high = train(rows, "cpu", **FAST, residual_model=False, real_weight=50.0).predict(probe)
    assert high["compile_seconds"]["point"][0] > 1.5 * low["compile_seconds"]["point"][0]


def test_real_programs_residuals_alone_set_the_intervals_where_there_are_enough():
    from conftest import make_rows

    from costmodel.training.fitting.intervals import MIN_INTERVAL_RESIDUALS

    rng = np.random.default_rng(5)
    rows = make_rows(rng.uniform(100, 2000, 400), families=8)
    # synthetic families scatter 4x as much as the real programs around the same law
    real = np.arange(len(rows)) % 2 == 0
    rows["library"] = np.where(real, "lib" + (np.arange(len(rows)) % 8).astype(str), "")
    rows["compile_seconds"] *= np.exp(rng.normal(0, np.where(real, 0.1, 0.4)))
    probe = features_frame(make_rows(np.array([1000.0]), seed=2))

    def width(data):
        pred = train(data, "cpu", "", residual_model=False, **FAST).predict(probe)
        return float(pred["compile_seconds"]["hi"][0] / pred["compile_seconds"]["lo"][0])

    # central 90% of a lognormal: exp(2 * 1.645 * sigma); sigma 0.1 -> 1.39x, 0.4 -> 3.7x,
    # both together (sigma ~0.29) about 2.6x
    assert 1.2 < width(rows) < 1.7
    # with too few real residuals, every row's residual counts again
    few = rows[~real | (np.cumsum(real) <= MIN_INTERVAL_RESIDUALS - 20)]
    assert width(few) > 2.2
