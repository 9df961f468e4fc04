"""bench/evaluations/outside_libraries.py on its committed runs: 40 programs from 11 libraries no corpus
family or other bench uses, measured on an AMD EPYC in fresh processes, for CPU after
`costmodel calibrate` and deviceless for the H100, scored by the shipped models."""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "bench/data/outside_libraries"
RESULT = ROOT / "bench/results/outside_libraries.json"
# target -> (run, result)
RUNS = {"": (RUN, RESULT),
        "h100": (ROOT / "bench/data/outside_libraries_h100",
                 ROOT / "bench/results/outside_libraries_h100.json")}
# the CPU run measured again an hour and a half later (same machine, same programs)
PASS2 = (ROOT / "bench/data/outside_libraries_pass2", ROOT / "bench/results/outside_libraries_pass2.json")
# six of its builders at 20-50 s (`bench/evaluations/outside_top_programs.py`), and right after them the
# same builders at the run's own sizes, on the same machine a day later
TOP, TOP_BASELINE = ROOT / "bench/data/outside_top", ROOT / "bench/data/outside_top_baseline"


@pytest.fixture(scope="module")
def bench():
    from conftest import bench_module

    return bench_module("outside_libraries")


@pytest.fixture(scope="module")
def report(bench):
    return bench.score(RUN)


@pytest.fixture(scope="module", params=["", "h100", "pass2"])
def each_report(request, bench):
    run, result = PASS2 if request.param == "pass2" else RUNS[request.param]
    target = "" if request.param == "pass2" else request.param
    return bench.score(run, target), json.loads(result.read_text())


def test_the_run_holds_forty_programs_of_eleven_libraries_none_in_training(report):
    assert report["programs"] == 40 and len(report["libraries"]) == 11
    assert report["machine"]["cpu_model"] == "AMD EPYC"
    import pandas as pd

    training = pd.read_parquet(ROOT / "training/data/cpu/rows.parquet", columns=["library"])
    assert not set(report["libraries"]) & set(training["library"].dropna())
    measured = [row["measured_s"] for row in report["rows"]]
    assert min(measured) < 0.2 and max(measured) > 20  # a tenth of a second to tens of seconds


def test_scores_follow_from_the_rows(report):
    rows = report["rows"]
    point = np.array([r["predicted_s"] for r in rows])
    measured = np.array([r["measured_s"] for r in rows])
    fold = np.maximum(point / measured, measured / point)
    calibrated = report["compile_seconds"]["calibrated"]
    assert calibrated["median_fold"] == pytest.approx(np.median(fold))
    assert calibrated["max_fold"] == pytest.approx(fold.max())
    baseline = np.array([r["power_law_s"] for r in rows])
    assert report["compile_seconds"]["power_law_leave_one_out"]["median_fold"] == \
        pytest.approx(np.median(np.maximum(baseline / measured, measured / baseline)))


def test_the_power_law_is_fitted_without_the_program_it_predicts(bench):
    ops = np.array([10.0, 100.0, 1000.0, 10000.0])
    measured = 1e-3 * ops  # exactly linear: leave-one-out recovers each point
    assert bench.power_law_leave_one_out(ops, measured) == pytest.approx(measured)
    measured[-1] *= 10  # an outlier is predicted from the others, not from itself
    assert bench.power_law_leave_one_out(ops, measured)[-1] == pytest.approx(10.0, rel=1e-6)


def test_each_committed_result_is_what_its_committed_run_scores(each_report):
    report, stored = each_report
    assert (report["backend"], report["target"]) == (stored["backend"], stored["target"])
    if stored["model"] != report["model"]:
        pytest.skip("the shipped model changed since the result was written; re-run score")
    for target in ("compile_seconds", "peak_rss_bytes"):
        for kind, scores in report[target].items():
            assert scores == pytest.approx(stored[target][kind]), (target, kind)


# cpu-9cc05d83-b65272 before the ceiling held captured bytes: the same figures here
CPU_MODEL = "cpu-9cc05d83-4aa542"


def test_the_shipped_model_on_libraries_it_never_saw(report):
    """The figures the note, README and `bench/FINDINGS.md` give (model cpu-9cc05d83-4aa542,
    schema 17: a fusion's cost times its inputs in place of its squared cost, scalar ops add no fusion
    cost, a cost per distinct kernel, host memory following the fused ops, both intervals
    widened by distance): a median under the op-count power law fitted on these very
    programs (1.18 against 1.30; schema 16: 1.19; schema 15: 1.265; schema 14: 1.226), no
    program past 1.8x (schema 16: 1.82x; schema 14: the largest
    spline flow over-predicted 2.3 times; 2.5 with schema 13, 2.4 with schema 12, 2.8 with
    schema 11, 5.1 with schema 10), intervals that cover 38 of 40 (schema 16: all 40;
    schema 15: 92.5%), host memory under its power law (1.21 against 1.35, with its
    ceiling from compile time; 1.213 before it). The widenings
    were fitted on this run, its second pass, the top-end runs and the library and unseen
    benches' programs, so these coverages are not held-out figures
    (`test_interval_widening`)."""
    if report["model"] != CPU_MODEL:
        pytest.skip("figures of the model the run was scored with")
    time = report["compile_seconds"]
    assert time["calibrated"]["median_fold"] == pytest.approx(1.181, abs=0.001)
    assert time["power_law_leave_one_out"]["median_fold"] == pytest.approx(1.30, abs=0.005)
    assert time["calibrated"]["coverage_90"] == 0.95
    assert time["calibrated"]["max_fold"] == pytest.approx(1.79, abs=0.01)
    memory = report["peak_rss_bytes"]
    assert memory["model"]["median_fold"] == pytest.approx(1.208, abs=0.005)
    assert memory["power_law_leave_one_out"]["median_fold"] == pytest.approx(1.35, abs=0.005)
    assert memory["model"]["coverage_90"] == 0.925


def test_the_h100_model_on_libraries_it_never_saw(bench):
    """The deviceless H100 run's figures (model gpu-h100-301d6d76-13a2a2, schema 17; the
    same with -195230, before its ceiling held captured bytes): under
    the power law in median (1.22 against 1.44; schema 16's model: 1.29; schema 15's:
    1.205; schema 14's: 1.364), but the Python-unrolled PPO update compiles 15x longer than
    predicted (229 s deviceless, against 21 s for the CPU). Its compile-time interval covers
    34 of 40 (schema 16: 35). Host memory, with its ceiling from compile time (weight
    0.25), is under its power law here (1.24 against 1.28; 1.33 without the ceiling), and
    its widened interval covers 39 of 40 (36 without the ceiling)."""
    report = bench.score(RUNS["h100"][0], "h100")
    if report["model"] != "gpu-h100-301d6d76-13a2a2":
        pytest.skip("figures of the model the run was scored with")
    assert report["programs"] == 40 and report["machine"]["cpu_model"] == "AMD EPYC"
    time = report["compile_seconds"]
    assert time["calibrated"]["median_fold"] == pytest.approx(1.224, abs=0.005)
    assert time["power_law_leave_one_out"]["median_fold"] == pytest.approx(1.44, abs=0.005)
    assert time["calibrated"]["coverage_90"] == pytest.approx(0.85, abs=0.005)
    worst = max(report["rows"], key=lambda row: row["fold"])
    assert worst["family"] == "outside_gymnax_ppo_update" and worst["measured_s"] > 200
    assert worst["predicted_s"] < 20
    memory = report["peak_rss_bytes"]
    assert memory["model"]["median_fold"] == pytest.approx(1.236, abs=0.005)
    assert memory["power_law_leave_one_out"]["median_fold"] == pytest.approx(1.279, abs=0.005)
    assert memory["model"]["coverage_90"] == 0.975


def test_host_memory_repeats_within_a_tenth_between_the_passes():
    """The label's own noise, which no host-memory prediction gets under: the 40 programs'
    peak RSS growth in the two passes, on bytes + 1 MiB as models are scored."""
    import pandas as pd

    first = pd.read_parquet(RUN / "measured.parquet")
    both = first.merge(pd.read_parquet(PASS2[0] / "measured.parquet"), on=["family", "params"],
                       suffixes=("", "_again"))
    assert len(both) == 40
    offset = 2.0**20
    fold = np.exp(np.abs(np.log((both["peak_rss_bytes"] + offset)
                                / (both["peak_rss_bytes_again"] + offset))))
    assert np.median(fold) == pytest.approx(1.107, abs=0.001)
    assert np.quantile(fold, 0.9) == pytest.approx(1.52, abs=0.01)
    small = (both["peak_rss_bytes"] < 50 * 2**20).to_numpy()
    assert small.sum() == 11 and np.median(fold[small]) == pytest.approx(1.353, abs=0.001)


def test_a_second_pass_moves_the_headline_by_the_machines_drift(bench, report):
    """The same 40 programs an hour and a half later: their seconds moved 0.69-1.31x (median
    0.93) while the calibration said the machine had slowed (x1.18 against x1.11), so the
    calibrated median differs by a few hundredths and stays near the power law's."""
    if report["model"] != CPU_MODEL:
        pytest.skip("figures of the model the runs were scored with")
    second = bench.score(PASS2[0])
    assert second["programs"] == 40
    first_s = {(r["family"], r["params"]): r["measured_s"] for r in report["rows"]}
    ratio = np.array([r["measured_s"] / first_s[(r["family"], r["params"])]
                      for r in second["rows"]])
    assert np.median(ratio) == pytest.approx(0.93, abs=0.005)
    assert second["calibration_scale"] == pytest.approx(1.18, abs=0.005)
    assert second["compile_seconds"]["calibrated"]["median_fold"] == pytest.approx(1.161, abs=0.005)
    assert second["compile_seconds"]["calibrated"]["coverage_90"] == pytest.approx(1.0)
    # host memory's intervals: 35 of 40 (37 before its ceiling from compile time)
    assert second["peak_rss_bytes"]["model"]["coverage_90"] == pytest.approx(0.875)
    assert second["compile_seconds"]["power_law_leave_one_out"]["median_fold"] == \
        pytest.approx(1.32, abs=0.005)


def test_the_largest_outside_programs_are_within_about_half(bench):
    """The top end issue #19 found over-predicted 10-25x: six outside programs of 20-50 s
    (an MPNN of 96 layers, a 32-layer spline flow, L-BFGS through a 96-layer MLP, a 16-view
    SimCLR step, 300 unrolled jax-md steps, a 10-epoch PPO update). Calibrated as a user
    would (`costmodel calibrate` before them), with the schema-17 model three are
    over-predicted, 1.25-2.08x (the spline flow most), the PPO update under by 1.06x, SimCLR
    by 1.47x and L-BFGS by 1.65x; median 1.56, measured over predicted 0.93, the widened
    interval covering all six. Schema 16: four over, 1.16-3.3x (the spline flow 3.3x), median
    1.55, 0.80, covering 4 of 6; schema 15: five over, 1.08-3.3x, median 1.51. The same
    builders at the outside run's sizes, measured right after on the same machine, land on
    1.11 with little bias (schema 16: 1.16; schema 15: 1.31)."""
    if bench.score(RUN)["model"] != CPU_MODEL:
        pytest.skip("figures of the model the runs were scored with")
    top, baseline = bench.score(TOP), bench.score(TOP_BASELINE)
    assert (top["programs"], len(top["libraries"]), baseline["programs"]) == (6, 6, 11)
    assert top["machine"]["cpu_model"] == baseline["machine"]["cpu_model"] == "AMD EPYC"
    measured = [row["measured_s"] for row in top["rows"]]
    assert 19 < min(measured) and max(measured) < 48
    time = top["compile_seconds"]["calibrated"]
    assert time["median_fold"] == pytest.approx(1.56, abs=0.01)
    assert time["measured_over_predicted"] == pytest.approx(0.93, abs=0.01)
    assert time["coverage_90"] == pytest.approx(6 / 6)
    over = [row["fold"] for row in top["rows"] if row["predicted_s"] > row["measured_s"]]
    assert len(over) == 3 and max(over) == pytest.approx(2.08, abs=0.01)
    near = baseline["compile_seconds"]["calibrated"]
    assert near["median_fold"] == pytest.approx(1.11, abs=0.01)
    assert near["measured_over_predicted"] == pytest.approx(0.97, abs=0.01)


def test_the_model_grows_faster_with_size_than_the_outside_programs_do():
    """`bench/archive/top_end_growth.py`: each builder of the top-end run at its top size and at the
    outside run's size, compiled interleaved in one process (three rounds), so the drift
    that the two runs' calibrations could not separate cancels. From the smaller to the
    larger size the measured compile grew less than predicted for five of six builders (the
    MPNN x5.8 against x8.0, the spline flow x2.3 against x3.1), SimCLR more (x3.0 against
    x2.4): median 0.85 of the predicted growth. So part of the top end's over-prediction is
    a size law steeper than XLA's on these programs."""
    result = json.loads((ROOT / "bench/results/top_end_growth.json").read_text())
    assert result["rounds"] == 3 and len(result["pairs"]) == 6
    ratios = {row["builder"]: row["growth_ratio"] for row in result["pairs"]}
    assert result["median_growth_ratio"] == pytest.approx(0.85, abs=0.01)
    assert sum(ratio < 1 for ratio in ratios.values()) == 5
    assert ratios["jraph_mpnn_step"] == pytest.approx(0.73, abs=0.01)
    assert ratios["pix_simclr_step"] == pytest.approx(1.22, abs=0.01)
    for row in result["pairs"]:  # each figure is the medians' ratio of its own rounds
        times = result["times_s"]
        top = np.median(times[f"{row['builder']} top"])
        base = np.median(times[f"{row['builder']} baseline"])
        assert row["measured_growth"] == pytest.approx(top / base)

