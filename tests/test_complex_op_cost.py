"""bench/archive/complex_op_cost.py: reading a compile time as an add chain's length, and the
stored run (`bench/results/complex_op_cost.json`) `bench/FINDINGS.md`'s "Complex numbers" quotes."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STORED = json.loads((ROOT / "bench/results/complex_op_cost.json").read_text())


@pytest.fixture(scope="module")
def bench():
    from conftest import bench_module

    return bench_module("complex_op_cost")


def test_equivalent_adds_interpolates_and_extrapolates_on_a_log_log_curve(bench):
    # seconds growing as adds ** 1.5 from 128 adds at 0.1 s
    curve = {n: 0.1 * (n / 128) ** 1.5 for n in (128, 512, 2048)}
    assert bench.equivalent_adds(0.1 * 2 ** 1.5, curve) == pytest.approx(256)
    assert bench.equivalent_adds(0.1 * 32 ** 1.5, curve) == pytest.approx(4096)  # past the end
    assert bench.equivalent_adds(0.1 / 8, curve) == pytest.approx(32)  # before the start


def test_every_complex_op_costs_more_than_its_float32_kind_at_both_lengths():
    """The stored run: a complex add 1.9-3.2 float32 adds per step, multiply and divide
    2.4-4.4, and each complex kind above its float32 counterpart at both chain lengths."""
    costs = STORED["adds_per_step"]
    assert set(costs) == {"add", "multiply", "divide", "exp", "log", "sqrt", "tanh", "abs"}
    for kind, by_dtype in costs.items():
        for steps, real in by_dtype["float32"].items():
            assert by_dtype["complex64"][steps] > real * 1.5, (kind, steps)
    assert [round(v, 2) for v in costs["add"]["complex64"].values()] == [1.94, 3.18]
    for kind in ("multiply", "divide"):
        assert all(2.4 <= v <= 4.4 for v in costs[kind]["complex64"].values())
    assert min(costs["sqrt"]["complex64"].values()) > 200
