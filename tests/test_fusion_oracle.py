"""bench/archive/fusion_oracle.py: scaling a program's fusion inputs by XLA's counts over
the emulator's, on its stored ratios (`bench/results/fusion_oracle.json`)."""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
STORED = json.loads((ROOT / "bench/results/fusion_oracle.json").read_text())


@pytest.fixture(scope="module")
def oracle():
    from conftest import bench_module

    return bench_module("fusion_oracle")



def test_ratios_are_xla_over_the_emulator_per_count(oracle):
    """A scaled input is the stored one times XLA's count over the emulator's."""
    program = "outside_b_interpax_advection_rk4"
    (name,) = [key for key in STORED["xla_over_emulated"] if key.startswith(program)]
    ratio = STORED["xla_over_emulated"][name]
    assert set(ratio) == set(oracle.SCALED_INPUTS)
    # XLA fuses its table lookups and sort comparisons into fusions 6.5 times the
    # emulator's largest: its squared costs are 17 times the emulator's
    assert np.log(ratio["squares"]) == pytest.approx(2.83, abs=0.01)
    row = {"program": name, "model_inputs": {"fusion_cost_squares": 2.0, "fusion_groups": 3.0,
                                             "fusion_mean_size": 5.0}}
    scaled = oracle.with_xla_counts({"results": [row]}, STORED["xla_over_emulated"],
                                    ("squares",))
    assert scaled["results"][0]["model_inputs"]["fusion_cost_squares"] == 2.0 * ratio["squares"]
    assert row["model_inputs"]["fusion_cost_squares"] == 2.0  # the input is not changed
