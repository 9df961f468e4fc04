"""Which sweep programs `bench/evaluations/tpu_device.py export` sends to the chip."""

from __future__ import annotations

import pandas as pd


def _rows():
    """Two real libraries of 10 programs each and 100 synthetic ones."""
    libraries = ["liba"] * 10 + ["libb"] * 10 + [""] * 100
    return pd.DataFrame({"key": [f"k{i}" for i in range(len(libraries))],
                         "status": "ok", "library": libraries,
                         "compile_seconds": [0.1 * (i + 1) for i in range(len(libraries))]})


def test_the_selection_spreads_over_libraries_and_fills_n():
    from conftest import bench_module

    select = bench_module("tpu_device").select
    rows = _rows()
    picked = select(rows, 20)
    assert len(picked) == len(set(picked)) == 20
    libs = rows.loc[picked, "library"].replace("", "synthetic").value_counts().to_dict()
    assert libs == {"liba": 8, "libb": 8, "synthetic": 4}


def test_what_measured_libraries_cannot_fill_goes_to_the_rest():
    from conftest import bench_module

    select = bench_module("tpu_device").select
    rows = _rows()
    # all but one program of each real library measured before
    done = [f"k{i}" for i in range(20) if i not in (0, 10)]
    picked = select(rows, 40, exclude=done)
    assert len(picked) == 40
    assert not set(rows.loc[picked, "key"]) & set(done)
    libs = rows.loc[picked, "library"].replace("", "synthetic").value_counts().to_dict()
    assert libs == {"liba": 1, "libb": 1, "synthetic": 38}


def test_a_second_pass_takes_every_fast_real_program_and_no_synthetic_one():
    from conftest import bench_module

    again = bench_module("tpu_device").again
    rows = _rows()
    device = ([{"key": f"k{i}", "status": "ok", "device_s": [1.0 + i]} for i in range(20)]
              + [{"key": "k30", "status": "ok", "device_s": [0.5]},  # synthetic
                 {"key": "k5", "status": "ok", "device_s": [2.0]},   # a second run of k5
                 {"key": "k6", "status": "error"}])
    picked = again(device, rows, below_s=15.0)
    # k0..k13 compiled under 15 s (k5's median of 6 and 2 is 4); k14..k19 did not
    assert sorted(rows.loc[picked, "key"], key=lambda k: int(k[1:])) == [
        f"k{i}" for i in range(14)]
    assert picked != sorted(picked)  # shuffled: a run cut short loses a random part
    assert again(device, rows, below_s=15.0) == picked  # the same order each time
    # a pass of the longer ones only
    assert sorted(rows.loc[again(device, rows, below_s=15.0, from_s=10.0), "key"]) == [
        "k10", "k11", "k12", "k13", "k9"]
