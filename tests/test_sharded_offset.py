"""The TPU model's sharded offset: the median out-of-fold residual of the programs compiled
over several chips, added to their predictions, kept through save and load."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.models.predictor import Predictor, sharded
from costmodel.models.table import Table
from costmodel.training.fitting.estimator import MIN_SHARDED_RESIDUALS, CompileCostModel
from costmodel.training.fitting.fit import features_frame, train

FAST = {"max_iter": 30, "n_folds": 3, "learning_rate": 0.2}


def _tpu_rows(make_rows, factor: float):
    """One-chip rows and the same programs over a 2x2 topology, whose compiles take
    `factor` times as long."""
    import pandas as pd

    one = make_rows(np.random.default_rng(3).uniform(100, 2000, 120), families=6)
    split = one.assign(row_id=one["row_id"] + "-2x2", target="v5e:2x2",
                       compile_seconds=one["compile_seconds"] * factor,
                       sharded_args=2.0, sharded_input_share=0.5)
    return pd.concat([one.assign(sharded_args=0.0, sharded_input_share=0.0), split],
                     ignore_index=True).assign(backend="tpu", target=lambda r: r["target"]
                                               .replace("", "v5e"))


def test_the_offset_is_the_median_residual_of_the_sharded_rows_alone():
    chips = np.array([1.0] * 40 + [4.0] * 20 + [16.0] * 20)
    table = Table(("chips",), chips[:, None])
    z = np.linspace(0, 1, len(chips))
    # over-predicted by 0.3 to 0.35 over several chips, under by 0.1 to 0.05 on one
    predicted = z + np.where(chips > 1, 0.3, -0.1) + np.linspace(-0.05, 0.05, len(chips))
    from costmodel.models.predictor import TargetModel

    plain = TargetModel(form="overhead", terms=(), added=(), coef=np.zeros(1))
    got, moved = CompileCostModel(**FAST)._sharded_offset(plain, table, z, predicted,
                                                np.ones(len(z), bool))
    assert got.sharded_offset == pytest.approx(-0.325, abs=0.001)
    assert moved[chips == 1] == pytest.approx(predicted[chips == 1])
    assert moved[chips > 1] == pytest.approx(predicted[chips > 1] + got.sharded_offset)
    # too few sharded rows with a residual: no offset
    few = np.ones(len(z), bool)
    few[40 + MIN_SHARDED_RESIDUALS - 1:] = False
    got, moved = CompileCostModel(**FAST)._sharded_offset(plain, table, z, predicted, few)
    assert got.sharded_offset == 0.0 and moved == pytest.approx(predicted)
    # a table without a chips input (a CPU or GPU model) has no sharded rows
    assert sharded(Table(("hlo_ops",), np.ones((3, 1)))).tolist() == [0.0, 0.0, 0.0]


def test_a_tpu_model_moves_its_sharded_predictions_by_the_offset(synthetic_rows, tmp_path):
    rows = _tpu_rows(synthetic_rows, factor=0.5)
    # a baseline alone cannot read the chips: it puts both placements at one level, and the
    # out-of-fold residuals of the sharded rows say how far below it they sit
    with_offset = train(rows, "tpu", "v5e", residual_model=False, **FAST)
    without = train(rows, "tpu", "v5e", residual_model=False, sharded_offset=False, **FAST)
    offset = with_offset.predictor.targets["compile_seconds"].sharded_offset
    assert offset == pytest.approx(-np.log(2) / 2, abs=0.1)
    assert without.predictor.targets["compile_seconds"].sharded_offset == 0.0
    X = features_frame(rows)
    split = (rows["target"] != "v5e").to_numpy()
    ours = with_offset.predictor.predict_log(X)["compile_seconds"]
    theirs = without.predictor.predict_log(X)["compile_seconds"]
    assert ours[~split] == pytest.approx(theirs[~split])
    assert ours[split] == pytest.approx(theirs[split] + offset)
    error = np.abs(ours - np.log(rows["compile_seconds"].to_numpy()))
    assert np.median(error[split]) < 0.1 < np.median(np.abs(
        theirs - np.log(rows["compile_seconds"].to_numpy()))[split])
    # other targets keep no offset
    assert with_offset.predictor.targets["peak_rss_bytes"].sharded_offset == 0.0
    with open(tmp_path / "m.npz", "wb") as handle:
        with_offset.predictor.save(handle)
    loaded = Predictor.load(tmp_path / "m.npz")
    assert loaded.targets["compile_seconds"].sharded_offset == offset
    assert loaded.predict_log(X)["compile_seconds"] == pytest.approx(ours)


def test_a_cpu_model_has_no_offset(synthetic_rows):
    model = CompileCostModel(sharded_offset=True, **FAST)
    rows = synthetic_rows(np.random.default_rng(4).uniform(100, 2000, 60))
    model.fit(features_frame(rows), {"compile_seconds": rows["compile_seconds"]})
    assert model.predictor.targets["compile_seconds"].sharded_offset == 0.0


def test_a_format_5_model_loads_with_no_offset():
    import json

    from costmodel.models import load_default

    arrays = load_default("cpu").predictor.arrays()
    meta = json.loads(str(arrays["meta"][()]))
    meta["format"] = 5
    for described in meta["targets"].values():
        del described["sharded_offset"]
    arrays["meta"] = np.array(json.dumps(meta))
    old = Predictor.from_arrays(arrays)
    assert {t.sharded_offset for t in old.targets.values()} == {0.0}
