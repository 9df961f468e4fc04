"""bench/evaluations/outside_libraries.py on the second set of outside programs (`--programs
bench/evaluations/outside_programs_b1.py` and `_b2.py`): 49 programs from 13 libraries that no corpus
family, training row or other bench uses, measured on the AMD EPYC in fresh processes
after `costmodel calibrate` (2026-12-04), scored by the shipped CPU model."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
# simulators and RL (brax, mujoco-mjx, craftax, xminigrid, jumanji, flashbax); state-space
# models, Gaussian processes, nested sampling, interpolation, quadrature and Lie groups
RUNS = {"b1": ROOT / "bench/data/outside_libraries_b1", "b2": ROOT / "bench/data/outside_libraries_b2"}
# cpu-9cc05d83-b65272 before the ceiling held captured bytes: the same figures here
CPU_MODEL = "cpu-9cc05d83-4aa542"


@pytest.fixture(scope="module")
def reports():
    from conftest import bench_module

    bench = bench_module("outside_libraries")
    return {name: bench.score(run) for name, run in RUNS.items()}


def test_the_second_set_uses_only_libraries_nothing_else_here_uses(reports):
    assert [reports[n]["programs"] for n in RUNS] == [24, 25]
    libraries = set(reports["b1"]["libraries"]) | set(reports["b2"]["libraries"])
    assert len(libraries) == 13
    training = pd.read_parquet(ROOT / "training/data/cpu/rows.parquet", columns=["library"])
    first_set = json.loads((ROOT / "bench/results/outside_libraries.json").read_text())
    assert not libraries & (set(training["library"].dropna()) | set(first_set["libraries"]))
    measured = [row["measured_s"] for n in RUNS for row in reports[n]["rows"]]
    assert min(measured) < 0.2 and max(measured) > 30


@pytest.mark.parametrize("name", RUNS)
def test_each_committed_result_is_what_its_committed_run_scores(reports, name):
    report = reports[name]
    stored = json.loads((ROOT / f"bench/results/outside_libraries_{name}.json").read_text())
    if stored["model"] != report["model"]:
        pytest.skip("the shipped model changed since the result was written; re-run score")
    for target in ("compile_seconds", "peak_rss_bytes"):
        for kind, scores in report[target].items():
            assert scores == pytest.approx(stored[target][kind]), (target, kind)


def test_the_shipped_model_on_the_second_set(reports):
    """Calibrated as a user would: on the simulators and RL environments the model is worse
    than an op-count power law fitted on those very programs (median fold 1.48 against
    1.28, 92% within 2x; schema 16: 1.51, 75%); on the numerical libraries it is better
    (1.24 against 1.62, 96% within 2x; schema 16: 1.27). These runs were kept out of the
    interval widening's fit: held-out coverage 24 of 24 and 24 of 25 (schema 16: 20 of 24
    and 24 of 25). Host memory: on the simulators worse than its power law since its
    ceiling from compile time (1.35 against 1.18; 1.16 before: their compile time is
    under-predicted and the ceiling follows it), about the power law on the numerical set
    (1.35 against 1.34; 1.33 before)."""
    if reports["b1"]["model"] != CPU_MODEL:
        pytest.skip("figures of the model the runs were scored with")
    b1, b2 = (reports[n]["compile_seconds"] for n in RUNS)
    assert b1["calibrated"]["median_fold"] == pytest.approx(1.48, abs=0.01)
    assert b1["power_law_leave_one_out"]["median_fold"] == pytest.approx(1.28, abs=0.01)
    assert b1["calibrated"]["within_2x"] == pytest.approx(22 / 24)
    assert b1["calibrated"]["coverage_90"] == pytest.approx(24 / 24)
    assert b2["calibrated"]["median_fold"] == pytest.approx(1.24, abs=0.01)
    assert b2["power_law_leave_one_out"]["median_fold"] == pytest.approx(1.62, abs=0.01)
    assert b2["calibrated"]["coverage_90"] == pytest.approx(24 / 25)
    memory = [reports[n]["peak_rss_bytes"] for n in RUNS]
    assert [m["model"]["median_fold"] for m in memory] == pytest.approx([1.35, 1.35], abs=0.01)
    assert [m["power_law_leave_one_out"]["median_fold"] for m in memory] == \
        pytest.approx([1.18, 1.34], abs=0.01)


def test_two_failure_classes_brax_under_and_xminigrid_over(reports):
    """Brax's physics steps are under-predicted 1.5-1.9x (schema 16: up to 2.4x) although
    the fusion emulator finds as many fusions as XLA makes; xminigrid's grid-world steps
    are over-predicted 1.7-3.1x (schema 16: 2-3.5x) and the emulator makes 1.5-2.6 times
    XLA's fusions there."""
    if reports["b1"]["model"] != CPU_MODEL:
        pytest.skip("figures of the model the runs were scored with")
    rows = reports["b1"]["rows"]
    under = [r["measured_s"] / r["predicted_s"] for r in rows
             if r["library"] == "brax"]
    over = [r["predicted_s"] / r["measured_s"] for r in rows if r["library"] == "xminigrid"]
    assert min(under) > 1.5 and max(under) == pytest.approx(1.88, abs=0.01)
    assert min(over) > 1.7 and max(over) == pytest.approx(3.05, abs=0.01)
    measured = pd.read_parquet(RUNS["b1"] / "measured.parquet")
    emulated_over_xla = (measured["f_fusion_groups"] / measured["hlo_fusions"]).groupby(
        measured["library"]).agg(list)
    assert np.round(emulated_over_xla["xminigrid"], 2).tolist() == [2.6, 1.65, 1.49]
    assert max(abs(np.log(emulated_over_xla["brax"]))) < 0.1


def test_the_h100_model_on_the_second_set():
    """Deviceless for the H100, the same programs (timed beside the reference program, no
    `costmodel calibrate`): under the power law on both sets (1.30 against 1.33, 1.23
    against 1.86; schema 16: 1.24 and 1.27). Two do not compile there: tinygp's celerite
    fit asks for a GPU while tracing, and XLA finds no tile sizes for a dot of jumanji's TSP policy."""
    from conftest import bench_module

    bench = bench_module("outside_libraries")
    reports = [bench.score(ROOT / f"bench/data/outside_libraries_{name}_h100", "h100") for name in RUNS]
    if reports[0]["model"] != "gpu-h100-301d6d76-13a2a2":
        pytest.skip("figures of the model the runs were scored with")
    assert [r["programs"] for r in reports] == [23, 24]
    time = [r["compile_seconds"] for r in reports]
    assert [t["calibrated"]["median_fold"] for t in time] == pytest.approx([1.30, 1.23], abs=0.01)
    assert [t["power_law_leave_one_out"]["median_fold"] for t in time] == \
        pytest.approx([1.33, 1.86], abs=0.01)
    failed = pd.concat([pd.read_parquet(ROOT / f"bench/data/outside_libraries_{name}_h100/measured.parquet")
                        for name in RUNS])
    failed = failed[failed.status != "ok"]
    assert sorted(failed.family) == ["outside_b_jumanji_tsp_reinforce", "outside_b_tinygp_celerite_fit"]
