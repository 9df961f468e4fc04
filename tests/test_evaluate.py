"""Metrics with closed-form answers, and the shape of the evaluation report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from costmodel.cli.training_commands import shipped_data
from costmodel.training.evaluation import metrics
from costmodel.training.evaluation.evaluate import evaluate, folds, holdout_score
from costmodel.training.evaluation.model_card import markdown_table
from costmodel.training.fitting.fit import holdout_groups, select_rows
from costmodel.training.store import dataset


def test_fold_errors_are_symmetric_ratios():
    np.testing.assert_allclose(metrics.fold_errors([2.0, 1.0, 3.0], [1.0, 4.0, 3.0]), [2, 4, 1])


def test_median_and_p90_fold():
    actual = np.ones(11)
    pred = np.arange(1.0, 12.0)  # fold errors 1..11
    assert metrics.median_fold(pred, actual) == pytest.approx(6.0)
    assert metrics.p90_fold(pred, actual) == pytest.approx(10.0)  # 1 + 0.9 * (11 - 1)
    assert metrics.median_abs_log_error(pred, actual) == pytest.approx(math.log(6.0))


def test_within_2x_counts_the_boundary():
    assert metrics.within([1.0, 2.0, 0.5, 2.01, 3.0], np.ones(5)) == pytest.approx(3 / 5)


def test_spearman():
    x = np.array([1.0, 2.0, 3.0, 4.0])
    assert metrics.spearman(x, np.exp(x)) == pytest.approx(1.0)
    assert metrics.spearman(x, -x) == pytest.approx(-1.0)
    # one swapped pair: 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 2 / 60
    assert metrics.spearman(x, [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)
    # ties share their average rank: ranks (1.5, 1.5, 3) against (1, 2, 3)
    assert metrics.spearman([5.0, 5.0, 7.0], [1.0, 2.0, 3.0]) == pytest.approx(math.sqrt(3) / 2)


def test_coverage_is_inclusive():
    assert metrics.coverage([0, 1, 2, 3], [1, 2, 3, 4], [0, 2, 3.5, 2]) == pytest.approx(0.5)


def test_noise_floor_of_repeats():
    # medians 2 and 10; fold errors (2, 1, 2) and (1, 1, 1.25); the single repeat is skipped
    floor = metrics.noise_floor(["[1, 2, 4]", [10.0, 10.0, 12.5], [7.0]])
    assert floor["n"] == 6
    assert floor["median_fold"] == pytest.approx(1.125)


def test_summarize_without_interval():
    out = metrics.summarize([1.0, 2.0], [1.0, 1.0])
    assert out == {"median_fold": 1.5, "p90_fold": pytest.approx(1.9), "within_2x": 1.0,
                   "spearman": pytest.approx(math.nan, nan_ok=True), "coverage": None, "n": 2}


class _Doubling:
    """An estimator that predicts twice the true compile time (ops^2 * 1e-6 s)."""

    def predict(self, X):
        return {"compile_seconds": {"point": 2e-6 * X["hlo_ops_inlined"].to_numpy() ** 2}}


def test_holdout_score_is_median_abs_log_error(synthetic_rows):
    rows = synthetic_rows(np.geomspace(10, 1000, 3))
    rows.loc[[0, 1], ["status", "compile_seconds"]] = ["error", 1.0]  # not measurements
    assert holdout_score(_Doubling(), rows) == pytest.approx(math.log(2))


def test_report_shape_and_numbers(synthetic_rows):
    rng = np.random.default_rng(5)
    # 1e-6 * ops^2 s: ops < 1732 trains the extrapolation split, ops >= 3163 tests it
    rows = synthetic_rows(np.concatenate([rng.uniform(100, 1700, 60), [2000, 2500, 3000],
                                          rng.uniform(3200, 5000, 12)]), families=3)
    # 40 noisier programs: repeats (s, 1.2 s, 0.8 s) -> fold errors 1, 1.2, 1.25
    rows.loc[:39, "compile_seconds_all"] = [json.dumps([s, 1.2 * s, 0.8 * s])
                                            for s in rows.loc[:39, "compile_seconds"]]
    # some programs measured while the machine ran at half speed, as the reference shows
    slow = rows.index[rows["f_hlo_ops"] < 1000][::2]
    rows.loc[slow, "ref_seconds"] = 0.2
    rows.loc[slow, "compile_seconds"] *= 2
    report = evaluate(rows, "cpu", "", params={"max_iter": 20, "n_folds": 3})
    assert set(report) == {"leave_family_out", "leave_library_out", "leave_library_out_over_1s",
                           "extrapolation", "noise_floor", "data", "drift"}
    # no row says which library built it: that split has nothing to hold out
    assert report["leave_library_out"]["cpu"]["compile_seconds"]["costmodel"]["n"] == 0
    assert report["drift"]["cpu"]["reference_power"] == pytest.approx(1.0, abs=1e-6)
    assert report["drift"]["cpu"]["reference_seconds"] == 0.1
    lofo = report["leave_family_out"]["cpu"]["compile_seconds"]
    assert set(lofo) == {"costmodel", "power_law", "linear"}
    assert lofo["power_law"]["coverage"] is None
    assert lofo["costmodel"]["coverage"] is not None
    assert lofo["costmodel"]["n"] == 75
    # labels are a power law in ops, the baseline's log(1 + ops) is within 0.2% of it
    assert lofo["power_law"]["median_fold"] == pytest.approx(1.0, abs=0.002)
    assert lofo["costmodel"]["median_fold"] < 1.05
    measured = report["drift"]["cpu"]["leave_family_out_measured"]  # against raw seconds
    assert measured["median_fold"] < 1.05  # 18 of 75 rows were measured at half speed:
    assert measured["p90_fold"] == pytest.approx(2.0, rel=0.05)  # they are 2x off
    assert report["extrapolation"]["cpu"]["compile_seconds"]["costmodel"]["n"] == 12
    assert report["data"]["cpu"]["extrapolation_train"] == 60  # 4-9 s rows in neither
    # the other 35 repeat (s, 1.1 s, 0.95 s): 75 errors of 1, then 35 of 1/0.95, 35 of 1.1,
    # 40 of 1.2 and 40 of 1.25; the 113th of 225 is 1.1
    assert report["noise_floor"]["cpu"]["compile_seconds"]["median_fold"] == pytest.approx(1.1)
    table = markdown_table(report)
    assert "| leave_family_out | cpu | compile_seconds | power_law | 1 |" in table


def test_scaling_plot_shows_drift_free_seconds_on_the_shipped_gpu_rows():
    # Raw seconds put a 2-layer transformer forward (6.7 s, swept under load) above a
    # 16-layer one (4.2 s); at the median reference speed depth orders them.
    from costmodel.training.evaluation.plots import measured_curves

    data = dataset.load([shipped_data("gpu", "h100")])
    rows = select_rows(data, "gpu", "h100").reset_index(drop=True)
    part, label = measured_curves(rows)["transformer"]["forward"]
    assert label == "seq=128, width=256"
    assert part["_knob"].tolist() == [2, 4, 8, 16]
    assert part["compile_seconds"].round(2).tolist() == [6.73, 2.44, 2.78, 4.21]
    assert part["_seconds"].iloc[-1] > 1.4 * part["_seconds"].iloc[0]
    # 2 and 4 layers come out within 1% of each other; deeper ones are slower
    seconds = part["_seconds"].to_numpy()
    assert seconds[0] < seconds[2] < seconds[3] and seconds[1] < seconds[2]


def test_leave_library_out_holds_each_library_out_whole(synthetic_rows):
    # 1e-6 * ops^2 s: 40 synthetic rows, then 3 libraries of 10 programs of 0.25-4 s each
    rng = np.random.default_rng(7)
    rows = synthetic_rows(np.concatenate([rng.uniform(100, 3000, 40),
                                          np.tile(np.geomspace(500, 2000, 10), 3)]))
    rows["library"] = [""] * 40 + [lib for lib in ("flax", "haiku", "optax") for _ in range(10)]
    held = {name: (set(train), set(test)) for name, train, test in
            folds(rows, "leave_library_out")}
    assert sorted(held) == ["flax", "haiku", "optax"]
    train, test = held["haiku"]
    assert test == set(range(50, 60)) and train == set(range(60)) - test | set(range(60, 70))
    report = evaluate(rows, "cpu", "", params={"max_iter": 20, "n_folds": 3})
    lolo = report["leave_library_out"]["cpu"]["compile_seconds"]
    assert lolo["costmodel"]["n"] == lolo["power_law"]["n"] == 30
    assert lolo["power_law"]["median_fold"] == pytest.approx(1.0, abs=0.002)
    # 1000-2000 ops compile in 1-4 s: the 5 largest of each library's 10
    long = report["leave_library_out_over_1s"]["cpu"]["compile_seconds"]["costmodel"]
    assert long["n"] == 15


def test_interval_residuals_hold_out_libraries_where_rows_have_one(synthetic_rows):
    rows = synthetic_rows(np.geomspace(100, 1000, 6), families=2)
    rows["library"] = ["", "", "flax", "flax", "keras", ""]
    assert holdout_groups(rows).tolist() == ["fam0", "fam1", "flax", "flax", "keras", "fam1"]


def test_folds_fitted_in_parallel_processes_predict_what_one_process_does(synthetic_rows):
    from costmodel.training.evaluation.evaluate import predictions

    rows = synthetic_rows(np.geomspace(100, 3000, 40))
    params = {"max_iter": 10, "n_folds": 3}
    serial = predictions(rows, "leave_family_out", params=params)
    parallel = predictions(rows, "leave_family_out", params=params, jobs=2)
    assert len(serial) == len(parallel) > 0
    np.testing.assert_array_equal(serial["point"].to_numpy(), parallel["point"].to_numpy())
    np.testing.assert_array_equal(serial["hi"].to_numpy(), parallel["hi"].to_numpy())


def test_the_cards_headline_says_so_when_rows_were_timed_once():
    # a dataset swept with --max-repeats 1 has no repeats: no noise floor, and the card says
    from costmodel.training.evaluation.model_card import headline

    def scores(fold):
        return {"median_fold": fold, "p90_fold": 2 * fold, "spearman": 0.9, "coverage": 0.9,
                "n": 10}

    report = {"leave_family_out": {"cpu": {"compile_seconds": {
        "costmodel": scores(1.3), "power_law": scores(2.0)}}},
        "extrapolation": {"cpu": {"compile_seconds": {"costmodel": scores(2.5)}}},
        "noise_floor": {"cpu": {"compile_seconds": {"median_fold": None, "p90_fold": None,
                                                    "n": 0}}}}
    text = headline(report, "cpu")
    assert "each program was timed once, so the rows give no noise floor." in text
    assert "median factor of 1.30 (90th percentile 2.60" in text
    report["noise_floor"]["cpu"]["compile_seconds"]["median_fold"] = 1.04
    assert "differ from their median by a factor of 1.04." in headline(report, "cpu")
