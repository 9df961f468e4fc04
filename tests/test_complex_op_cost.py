"""bench/archive/complex_op_cost.py: reading a compile time as an add chain's length."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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


