"""bench/evaluations/device_pairs.py on its committed run: 30 programs of the library and unseen benches
compiled on an H200 (autotuning on and off) and deviceless for the H100 on that machine's
CPU (jax 0.11.2 there), scored by the shipped H100 model."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "bench/data/device_pairs"


@pytest.fixture(scope="module")
def bench():
    from conftest import bench_module

    return bench_module("device_pairs")


@pytest.fixture(scope="module")
def report(bench):
    rows = [json.loads(line) for path in sorted(RUN.glob("*.jsonl"))
            for line in path.read_text().splitlines()]
    return bench.score(rows)


def test_medians_take_each_placements_rounds(bench):
    rows = [{"mode": "autotune", "placement": "device", "program": "p", "round": r, "seconds": s}
            for r, s in enumerate((1.0, 3.0, 2.0))]
    rows.append({"mode": "autotune", "placement": "device", "program": "p", "round": 3,
                 "error": "refused"})
    assert bench.medians(rows) == {("autotune", "device", "p"): 2.0}


def test_on_device_compiles_are_faster_than_deviceless(report):
    # the same 30 programs on one machine: the H200 compile (autotuning on) took a median
    # 0.37 of the deviceless H100 compile, the one the H100 model is trained on
    ratio = report["device_over_deviceless"]
    assert ratio["programs"] == 30
    assert ratio["median"] == pytest.approx(0.368, abs=0.005)
    assert report["no_autotune_over_deviceless"]["median"] == pytest.approx(0.382, abs=0.005)
    # a GPU in the process leaves the deviceless compile as it is without one
    assert report["deviceless_no_gpu_over_with_gpu"]["median"] == pytest.approx(1.057, abs=0.005)


def test_the_h100_model_predicts_deviceless_compiles_not_on_device_ones(report):
    """Read on a GPU machine the H100 model is an upper estimate: it follows the deviceless
    compiles there and over-predicts the on-device ones about 2.5x (exact figures:
    `tests/model_figures.json`)."""
    deviceless, device = report["model_vs_deviceless_there"], report["model_vs_device"]
    assert deviceless["median_fold"] < 1.5
    assert device["measured_over_predicted"] < 0.6 < deviceless["measured_over_predicted"]
