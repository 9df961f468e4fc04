"""bench/archive/added_rows_effect.py: how it names extra rows and draws the noise fits it
compares them with (what its run found: `bench/FINDINGS.md`)."""

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    from conftest import bench_module

    return bench_module("added_rows_effect")



def test_a_set_names_a_file_and_optionally_its_libraries(bench, tmp_path):
    name, rows = bench.extra_rows(f"jaxsim={ROOT / 'bench/data/cpu_unshipped_real.parquet'}:jaxsim")
    assert name == "jaxsim" and len(rows) == 31 and set(rows["library"]) == {"jaxsim"}
    _, both = bench.extra_rows(f"all={ROOT / 'bench/data/cpu_unshipped_real.parquet'}")
    assert sorted(both["library"].value_counts().items()) == [("jaxsim", 31), ("pennylane", 12)]
    with pytest.raises(SystemExit, match="expected NAME=PATH"):
        bench.extra_rows("no-path")


def test_noise_draws_leave_out_only_real_rows(bench):
    from costmodel.training.store import dataset

    rows = dataset.load([ROOT / "training/data/cpu/rows.parquet"])
    kept = bench.without_random_real_rows(rows, 31, seed=0)
    assert len(rows) - len(kept) == 31
    synthetic = rows["library"].fillna("") == ""
    assert synthetic.sum() == (kept["library"].fillna("") == "").sum()
    assert not np.array_equal(kept.index, bench.without_random_real_rows(rows, 31, seed=1).index)


