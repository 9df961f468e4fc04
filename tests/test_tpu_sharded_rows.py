"""The sharded TPU rows the shipped TPU model trains on, and the figure its card gives
for them, recomputed from the committed held-out predictions (no compile)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import bench_module

from costmodel.models import load_default
from costmodel.training.store import dataset

ROOT = Path(__file__).resolve().parents[1]
TPU_ROWS = ROOT / "training/data/tpu-v5e"
LOADED = ROOT / "bench/data/tpu_sharded/loaded_rows.parquet"


def _tpu_rows() -> pd.DataFrame:
    rows = dataset.load([TPU_ROWS])
    return rows[(rows["status"] == "ok") & (rows["backend"] == "tpu")]


def test_the_cards_sharded_figure_follows_from_the_held_out_predictions():
    held = pd.read_parquet(ROOT / "bench/data/tpu_sharded/heldout.parquet")
    got = bench_module("tpu_sharded").scores(held, _tpu_rows())
    sharded, single = got["sharded, 4-16 chips"]["costmodel"], got["single chip"]["costmodel"]
    assert sharded["n"] == 325 and single["n"] == 198
    # (1.385 and 1.315 with the model before the thin convolutions joined its rows, 1.373
    # before its sharded offset, 1.358 and 1.289 before the FFT programs joined)
    assert sharded["median_fold"] == pytest.approx(1.331, abs=0.001)
    assert single["median_fold"] == pytest.approx(1.285, abs=0.001)
    card = (ROOT / "models/default/tpu-v5e/MODEL_CARD.md").read_text()
    assert f"| sharded, 4-16 chips | costmodel | {sharded['median_fold']:.2f} |" in card


def test_the_model_trains_on_the_quiet_sharded_rows_alone():
    rows, loaded = _tpu_rows(), pd.read_parquet(LOADED)
    sharded = rows[rows["target"].str.contains(":")]
    assert not sharded["key"].duplicated().any()
    # every program of the first, loaded measurement was measured again
    assert set(loaded.loc[loaded["status"] == "ok", "key"]) <= set(sharded["key"])
    assert sharded["ref_seconds"].median() < 0.6 * loaded["ref_seconds"].median()
    trained = load_default("tpu", "v5e").manifest["training_data"]
    # 32 of them the thin convolutions, 20 the FFT programs
    assert trained["rows"] == len(rows) == 1004


def test_a_programs_two_topologies_agree_better_measured_quiet():
    def scatter(frame: pd.DataFrame) -> float:
        frame = frame[frame["status"] == "ok"]
        both = pd.DataFrame({"program": frame["family"] + "|" + frame["params"],
                             "target": frame["target"], "seconds": frame["compile_seconds"]})
        both = both.pivot_table(index="program", columns="target", values="seconds").dropna()
        ratio = np.log(both["v5e:4x4"] / both["v5e:2x2"])
        return float(np.median(np.abs(ratio - np.median(ratio))))

    quiet, loaded = dataset.load([TPU_ROWS / "sharded.parquet"]), pd.read_parquet(LOADED)
    # the same programs and strategies, measured on both topologies both times
    assert scatter(quiet[quiet["key"].isin(loaded["key"])]) == pytest.approx(0.154, abs=0.002)
    assert scatter(loaded) == pytest.approx(0.382, abs=0.002)
    assert json.loads(quiet["params"].iloc[0]).get("sharding") in ("dp", "fsdp", "tp")


def test_a_second_pass_relabels_rows_and_predictions_by_the_geometric_mean():
    with_passes = bench_module("tpu_sharded").with_passes
    rows = pd.DataFrame({"key": ["a", "b"], "compile_seconds": [2.0, 3.0],
                         "ref_seconds": [0.05, 0.05]})
    again = pd.DataFrame({"key": ["a", "c"], "status": ["ok", "ok"],
                          "compile_seconds": [8.0, 1.0], "ref_seconds": [0.2, 0.05]})
    held = pd.DataFrame({"key": ["a", "a", "b"], "target": ["compile_seconds",
                                                            "peak_rss_bytes", "compile_seconds"],
                         "actual": [40.0, 7.0, 60.0]})
    new_rows, new_held = with_passes(rows, held, [again])
    # a: 2/0.05 and 8/0.2 normalize alike (40), so its label stays; its seconds are the
    # geometric means 4.0 and 0.1
    assert new_rows["compile_seconds"].tolist() == pytest.approx([4.0, 3.0])
    assert new_rows["ref_seconds"].tolist() == pytest.approx([0.1, 0.05])
    assert new_held["actual"].tolist() == pytest.approx([40.0, 7.0, 60.0])
    again.loc[0, "compile_seconds"] = 32.0  # 4x slower than its reference now: label 2x
    _, new_held = with_passes(rows, held, [again])
    assert new_held["actual"].tolist() == pytest.approx([80.0, 7.0, 60.0])


def test_the_sharded_figure_against_both_quiet_passes():
    tpu_sharded = bench_module("tpu_sharded")
    held = pd.read_parquet(ROOT / "bench/data/tpu_sharded/heldout.parquet")
    again = pd.read_parquet(ROOT / "bench/data/tpu_sharded/pass2_rows.parquet")
    rows, held = tpu_sharded.with_passes(_tpu_rows(), held, [again])
    got = tpu_sharded.scores(held, rows)
    sharded, single = got["sharded, 4-16 chips"]["costmodel"], got["single chip"]["costmodel"]
    # (1.328 with the model before the thin convolutions joined its rows, 1.359 before its
    # sharded offset, 1.315 before the FFT programs joined)
    assert sharded["n"] == 325 and sharded["median_fold"] == pytest.approx(1.302, abs=0.001)
    assert single["median_fold"] == pytest.approx(1.285, abs=0.001)  # one-chip rows: one pass


def test_sharded_programs_of_libraries_no_row_uses():
    """The third outside suite's programs compiled deviceless over a v5e:2x2 topology (12
    libraries, no training row of them): the shipped model's stored scores."""
    rows = pd.read_parquet(ROOT / "bench/data/tpu_sharded/outside_c_rows.parquet")
    ok = rows[rows["status"] == "ok"].reset_index(drop=True)
    assert len(ok) == 116 and ok["library"].nunique() == 12
    assert set(rows.loc[rows["status"] != "ok", "message"].str.split(":").str[0]) == {
        "NotSharded"}
    assert not set(ok["library"]) & set(_tpu_rows()["library"])
    got = bench_module("tpu_sharded_outside").score(ok, load_default("tpu", "v5e").predictor)
    # (1.591, p90 2.67, measured/predicted 0.945 with the model before its sharded offset;
    # 1.536, 3.05, 1.091 before the FFT programs joined its rows; 1.504, 3.22, 0.981 on
    # the programs' schema-18 inputs)
    assert got["median_fold"] == pytest.approx(1.490, abs=0.001)
    assert got["p90_fold"] == pytest.approx(3.22, abs=0.01)
    assert got["measured_over_predicted"] == pytest.approx(0.988, abs=0.001)


def test_more_sharded_programs_of_the_trained_libraries():
    """41 more programs of the sharded rows' families (not trained on), over both
    topologies: the shipped model has their one-chip twins and their libraries' other
    sharded programs."""
    more = pd.read_parquet(ROOT / "bench/data/tpu_sharded/more_rows.parquet")
    ok = more[more["status"] == "ok"].reset_index(drop=True)
    assert len(ok) == 230 and not set(ok["key"]) & set(_tpu_rows()["key"])
    got = bench_module("tpu_sharded_outside").score(ok, load_default("tpu", "v5e").predictor)
    # (1.233 and 1.069x under on average with the model before its sharded offset: for
    # libraries it has seen, there is no level to move; 1.266 and 1.234 before the FFT
    # programs joined its rows; 1.345 and 1.305 on their schema-18 inputs)
    assert got["median_fold"] == pytest.approx(1.342, abs=0.001)
    assert got["measured_over_predicted"] == pytest.approx(1.303, abs=0.001)
