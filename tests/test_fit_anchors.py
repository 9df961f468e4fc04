"""Anchored targets: a target that follows another gets a ceiling from it (holding the bytes
a program captures), kept through save and load; a target unrelated to another is left alone."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.training.fitting.estimator import CompileCostModel
from costmodel.training.fitting.fit import features_frame, train

# Small trees keep the suite fast; the behaviour under test does not depend on size.
FAST = {"max_iter": 30, "n_folds": 3, "learning_rate": 0.2}


def _anchor_inputs(rng, n: int, relation: float):
    """Modelled labels and out-of-fold predictions for a source target predicted within
    0.1 and a target that follows it as `relation` (1: exactly 0.9 * source + 2, 0: not at
    all) but whose own prediction is too high by up to 1.5 (log scale)."""
    z_source = rng.uniform(-3, 3, n)
    z = relation * (0.9 * z_source + 2.0) + (1 - relation) * rng.uniform(-3, 3, n)
    return (z_source, z, z_source + rng.normal(0, 0.1, n), z + rng.uniform(0, 1.5, n))


def test_a_target_that_follows_another_gets_a_ceiling_from_it():
    from costmodel.models.predictor import TargetModel

    rng = np.random.default_rng(6)
    z_source, z, predicted_source, predicted = _anchor_inputs(rng, 400, relation=1.0)
    plain = TargetModel(form="overhead", terms=(), added=(), coef=np.zeros(1), lo=-1.0, hi=1.0)
    model = CompileCostModel(**FAST)
    anchored = model._anchored(plain, "compile_seconds", z_source, z, predicted_source,
                               predicted, np.ones(400, bool))
    anchor = anchored.anchor
    assert anchor.slope == pytest.approx(0.9, abs=1e-6)
    assert anchor.intercept == pytest.approx(2.0, abs=1e-6)
    # the line errs by 0.09 where the target's own prediction errs by 0.75 on average:
    # (nearly) all the way down to the line itself
    assert anchor.weight >= 0.9 and anchor.margin == 0.0
    pulled = anchor.pull(predicted, predicted_source)
    assert np.mean(np.abs(z - pulled)) < 0.2 * np.mean(np.abs(z - predicted))
    # intervals come from the pulled predictions' residuals, not the +-1 it had
    assert -0.5 < anchored.lo < 0 < anchored.hi < 0.3
    # a prediction below the ceiling is left alone
    assert anchor.pull(np.array([0.0]), np.array([0.0]))[0] == 0.0


def test_a_ceiling_holds_the_bytes_a_program_captures():
    """Rows that hold captured bytes (3 per byte, beside what their compile time says) keep
    their memory under a ceiling raised by 3 bytes per held byte; without that, the ceiling
    would take them far below, and the fit keeps none."""
    from dataclasses import replace

    from costmodel.models.predictor import TargetModel

    rng = np.random.default_rng(9)
    n = 400
    z_source, z, predicted_source, predicted = _anchor_inputs(rng, n, relation=1.0)
    held = np.where(np.arange(n) % 4 == 0, np.exp(rng.uniform(17, 20, n)), 0.0)
    z = np.log(np.exp(z) + 3.0 * held)
    predicted = np.where(held > 0, z + rng.normal(0, 0.05, n), np.log(np.exp(predicted) + 3.0 * held))
    plain = TargetModel(form="overhead", terms=(), added=(), coef=np.zeros(1), lo=-1.0, hi=1.0)
    model = CompileCostModel(**FAST)
    columns = ("dense_constant_bytes", "fold_bytes")
    anchor = model._anchored(plain, "compile_seconds", z_source, z, predicted_source, predicted,
                             np.ones(n, bool), columns, held, 3.0).anchor
    assert anchor.held == columns and anchor.per_held_byte == 3.0 and anchor.weight >= 0.9
    holding = held > 0
    assert np.mean(np.abs(z - anchor.pull(predicted, predicted_source, held))[holding]) < 0.1
    bare = replace(anchor, held=(), per_held_byte=0.0)
    assert np.mean(np.abs(z - bare.pull(predicted, predicted_source))[holding]) > 1.0
    assert model._anchored(plain, "compile_seconds", z_source, z, predicted_source, predicted,
                           np.ones(n, bool)) is plain


def test_held_bytes_count_as_the_low_end_of_what_holding_rows_use():
    from costmodel.training.fitting.recipe import ANCHOR_HELD_MIN, held_per_byte

    rng = np.random.default_rng(10)
    held = np.concatenate([rng.uniform(1, 8, 200) * ANCHOR_HELD_MIN, np.zeros(200),
                           np.full(50, ANCHOR_HELD_MIN / 2)])
    used = held * rng.uniform(2.0, 4.0, len(held)) + rng.uniform(0, 2e6, len(held))
    used[-50:] = 1e3  # rows holding too little to count
    # the 10th percentile of 2-4 bytes per byte (a little more for the rest they use)
    assert 2.1 <= held_per_byte(used, held) <= 2.4
    assert held_per_byte(used, held) * 20 == pytest.approx(round(held_per_byte(used, held) * 20))
    assert held_per_byte(used[:9], held[:9]) == 0.0  # too few rows holding bytes
    assert held_per_byte(used[200:], held[200:]) == 0.0


def test_a_target_unrelated_to_another_is_left_as_it_was():
    from costmodel.models.predictor import TargetModel

    rng = np.random.default_rng(7)
    z_source, z, predicted_source, predicted = _anchor_inputs(rng, 400, relation=0.0)
    predicted = z + rng.normal(0, 0.05, 400)  # its own prediction is good
    plain = TargetModel(form="overhead", terms=(), added=(), coef=np.zeros(1), lo=-1.0, hi=1.0)
    anchored = CompileCostModel(**FAST)._anchored(
        plain, "compile_seconds", z_source, z, predicted_source, predicted, np.ones(400, bool))
    assert anchored is plain


def test_an_anchored_model_predicts_the_pulled_value_and_saves_it(tmp_path):
    from conftest import make_rows

    from costmodel.models.predictor import Anchor, Predictor

    rng = np.random.default_rng(8)
    rows = make_rows(rng.uniform(100, 2000, 200))
    plain = train(rows, "cpu", "", anchors={}, **FAST).predictor
    assert plain.targets["peak_rss_bytes"].anchor is None
    anchor = Anchor(source="compile_seconds", weight=0.5, slope=0.5, intercept=1.0)
    from dataclasses import replace

    anchored = replace(plain, targets={**plain.targets, "peak_rss_bytes": replace(
        plain.targets["peak_rss_bytes"], anchor=anchor)})
    probe = features_frame(rows.iloc[:5])
    logs = plain.predict_log(probe)
    expected = 0.5 * logs["peak_rss_bytes"] + 0.5 * (0.5 * logs["compile_seconds"] + 1.0)
    assert anchored.predict_log(probe)["peak_rss_bytes"] == pytest.approx(expected)
    # other targets are not touched
    assert anchored.predict_log(probe)["compile_seconds"] == pytest.approx(logs["compile_seconds"])
    with open(tmp_path / "m.npz", "wb") as handle:
        anchored.save(handle)
    loaded = Predictor.load(tmp_path / "m.npz")
    assert loaded.targets["peak_rss_bytes"].anchor == anchor
    assert loaded.predict_log(probe)["peak_rss_bytes"] == pytest.approx(expected)
    # a ceiling that holds bytes keeps them through save and load
    holding = replace(anchor, held=("dense_constant_bytes",), per_held_byte=2.0)
    kept = replace(plain, targets={**plain.targets, "peak_rss_bytes": replace(
        plain.targets["peak_rss_bytes"], anchor=holding)})
    with open(tmp_path / "held.npz", "wb") as handle:
        kept.save(handle)
    assert Predictor.load(tmp_path / "held.npz").targets["peak_rss_bytes"].anchor == holding


def test_a_format_4_anchor_loads_without_held_bytes():
    import json

    from costmodel.models import load_default
    from costmodel.models.predictor import Predictor

    arrays = load_default("cpu").predictor.arrays()
    meta = json.loads(str(arrays["meta"][()]))
    meta["format"] = 4
    anchor = meta["targets"]["peak_rss_bytes"]["anchor"]
    for key in ("held", "per_held_byte"):
        anchor.pop(key, None)
    arrays["meta"] = np.array(json.dumps(meta))
    loaded = Predictor.from_arrays(arrays).targets["peak_rss_bytes"].anchor
    assert loaded.held == () and loaded.per_held_byte == 0.0
    assert loaded.pull(np.array([30.0]), np.array([0.0]), np.array([1e9]))[0] == pytest.approx(
        (1 - loaded.weight) * 30.0 + loaded.weight * (loaded.intercept + loaded.margin))
