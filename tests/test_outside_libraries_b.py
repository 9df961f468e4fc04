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


def test_simulators_lose_to_the_power_law_and_numerical_libraries_do_not(reports):
    """A weak spot in `docs/accuracy.md`: on the simulators and RL environments an op-count power law
    fitted on those very programs beats the model; on the numerical libraries the model
    wins (exact figures: `tests/model_figures.json`)."""
    b1, b2 = (reports[n]["compile_seconds"] for n in RUNS)
    assert b1["calibrated"]["median_fold"] > b1["power_law_leave_one_out"]["median_fold"]
    assert b2["calibrated"]["median_fold"] < b2["power_law_leave_one_out"]["median_fold"]


def test_brax_is_under_predicted_and_xminigrid_no_longer_over(reports):
    """Brax's physics steps are all under-predicted although the fusion emulator finds
    about as many fusions as XLA makes. xminigrid's grid-world steps were all
    over-predicted (0.42-0.72 of the prediction) where the emulator made 1.5-2.6 times
    XLA's fusions: a third of their selects pick one value on both sides, which XLA drops
    and the emulator has dropped since schema 19 (1.3-1.9 times XLA's fusions now, and
    within 10% of the prediction)."""
    rows = reports["b1"]["rows"]
    assert all(r["measured_s"] > 1.7 * r["predicted_s"] for r in rows if r["library"] == "brax")
    xminigrid = [r["measured_s"] / r["predicted_s"] for r in rows if r["library"] == "xminigrid"]
    assert sorted(np.round(xminigrid, 2).tolist()) == [0.92, 1.06, 1.09]
    measured = pd.read_parquet(RUNS["b1"] / "measured.parquet")
    emulated_over_xla = (measured["f_fusion_groups"] / measured["hlo_fusions"]).groupby(
        measured["library"]).agg(list)
    assert np.round(emulated_over_xla["xminigrid"], 2).tolist() == [1.86, 1.38, 1.28]
    assert max(abs(np.log(emulated_over_xla["brax"]))) < 0.1
