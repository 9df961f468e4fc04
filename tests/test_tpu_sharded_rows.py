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
    assert sharded["median_fold"] == pytest.approx(1.385, abs=0.001)
    assert single["median_fold"] == pytest.approx(1.315, abs=0.001)
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
    assert trained["rows"] == len(rows) == 952


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
