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
