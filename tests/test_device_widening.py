"""The chip interval's widening for programs of libraries no fit has seen: how it is
fitted on the outside suites as shipped, how a prediction applies it, and that a refit of
the device correction keeps it."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel.features import MODEL_FEATURES
from costmodel.features.sharding import placement_inputs
from costmodel.models import load_default
from costmodel.models.device_correction import CORRECTION_FILE, DeviceCorrection
from costmodel.models.novelty import Widening
from costmodel.training.evaluation import device_widening as dw
from costmodel.training.evaluation.interval_widening import fit_rule, inside
from costmodel.training.fitting.device_card import WIDENING_START, write_widening_line
from costmodel.training.fitting.device_correction import carried_widening
from costmodel.training.store import dataset

ROOT = Path(__file__).resolve().parents[1]
SUITES = [ROOT / "bench" / "results" / f"{name}.json" for name in
          ("tpu_outside", "tpu_outside_c", "tpu_outside_fft", "tpu_outside_de")]
DATA = ROOT / "bench" / "data" / "tpu_outside"
SHIPPED = ROOT / "models" / "default" / "tpu-v5e"


def _suite(errors, library, lo=0.5, hi=2.0):
    """A results file's rows: each program predicted 1 s with the interval (lo, hi), its
    chip seconds e^error."""
    return {"rows": [{"measured": math.exp(e), "ours": 1.0, "lo": lo, "hi": hi,
                      "library": lib, "key": f"k{i}"}
                     for i, (e, lib) in enumerate(zip(errors, library))]}


def test_a_ratio_is_the_error_over_the_offset_on_its_side():
    frame = dw.ratios(_suite([math.log(2.0), -math.log(2.0), math.log(4.0), 0.0],
                             ["a", "a", "b", "b"], lo=0.25, hi=2.0), "s")
    assert frame["ratio"].tolist() == pytest.approx([1.0, 0.5, 2.0, 0.0])
    assert frame["bench"].tolist() == ["s"] * 4 and frame["key"].tolist()[0] == "k0"


def test_without_held_out_programs_one_factor_covers_each_library_alike():
    # 20 programs of one library inside, 2 of another at 3x the offset
    errors = [0.1] * 20 + [3 * math.log(2.0)] * 2
    frame = dw.ratios(_suite(errors, ["big"] * 20 + ["small"] * 2), "s")
    # pooled by program 91% are inside already; each library weighing half, the small
    # one must be covered too
    report = dw.fit(frame)
    assert (report["factor"], report["power"]) == (pytest.approx(3.0), 0.0)
    assert dw.fit(frame[frame["library"] == "big"])["factor"] == 1.0  # never narrower
    assert report["coverage_before"] == {"s": pytest.approx(20 / 22, abs=1e-3)}
    assert report["coverage_after"] == {"s": 1.0}
    # the small library held out of its own rule falls outside it
    assert report["coverage_library_held_out"] == pytest.approx(20 / 22, abs=1e-3)


def _inputs():
    return [{**dict.fromkeys(MODEL_FEATURES, 10.0), **placement_inputs("v5e", None)}]


def test_a_prediction_reaches_the_widened_offsets():
    correction = DeviceCorrection.load(SHIPPED / CORRECTION_FILE)
    plain = replace(correction, widening=Widening())
    point, lo, hi = plain.apply(_inputs(), np.array([2.0]))
    point2, lo2, hi2 = replace(correction, widening=Widening(2.0)).apply(_inputs(), [2.0])
    assert point2 == pytest.approx(point)
    assert np.log(point / lo2) == pytest.approx(2 * np.log(point / lo))
    assert np.log(hi2 / point) == pytest.approx(2 * np.log(hi / point))
    # a rule that grows with the distance: x1 up to its onset, x4 at four times it
    growing = replace(correction, widening=Widening(1.0, 5.0, 1.0))
    with pytest.raises(ValueError, match="distance"):
        growing.apply(_inputs(), [2.0])
    _, near, _ = growing.apply(_inputs(), [2.0], np.array([3.0]))
    _, far, _ = growing.apply(_inputs(), [2.0], np.array([20.0]))
    assert near == pytest.approx(lo)
    assert np.log(point / far) == pytest.approx(4 * np.log(point / lo))


def test_the_shipped_model_widens_strangers_and_leaves_near_programs_as_they_were():
    artifact = load_default("tpu", "v5e")
    rule = artifact.device_correction.widening
    inputs = _inputs()
    distance = artifact.predictor.distance(inputs)
    out = artifact.predict(inputs)["compile_seconds"]
    scale = np.log(out["hi"] / out["point"]) / artifact.device_correction.hi
    assert scale == pytest.approx(rule.scale(distance))
    assert rule.scale(np.array([1.0, 6.0, 25.0])) == pytest.approx([1.053, 1.053, 2.93], abs=0.01)


def test_the_widening_survives_saving_and_a_refit(tmp_path):
    correction = DeviceCorrection.load(SHIPPED / CORRECTION_FILE)
    assert correction.widening.uses_distance
    correction.save(tmp_path / CORRECTION_FILE)
    assert DeviceCorrection.load(tmp_path / CORRECTION_FILE).widening == correction.widening
    # a bare factor, as the first widened step saved it, reads as one factor
    replace(correction, widening=Widening(1.5)).save(tmp_path / "factor.npz")
    assert DeviceCorrection.load(tmp_path / "factor.npz").widening == Widening(1.5)
    # a step saved before the widening existed reads as none
    fresh = replace(correction, widening=Widening(), about={})
    assert carried_widening(fresh, tmp_path / "nowhere").widening == Widening()
    # a refit installed over a widened step keeps its rule and its record
    kept = carried_widening(fresh, tmp_path)
    assert kept.widening == correction.widening
    assert kept.about["widening"] == correction.about["widening"]


@pytest.fixture(scope="module")
def stored():
    """The four outside suites' ratios with distances, and the correction's held-out
    real-library programs', as the shipped rule was fitted on them."""
    artifact = load_default("tpu", "v5e")
    names = artifact.predictor.feature_names
    bench = pd.concat([dw.ratios(json.loads(p.read_text()), p.stem) for p in SUITES],
                      ignore_index=True)
    inputs = dw.inputs_by_key(pd.concat(
        [pd.read_parquet(DATA / f"features{s}.parquet") for s in ("", "_de", "_fft")]), names)
    bench = dw.with_distance(bench, artifact.predictor, inputs)
    rows = dataset.load([ROOT / "training" / "data" / "tpu-v5e"])
    corpus = dw.held_out_ratios(pd.read_parquet(DATA / "correction_held_out.parquet"),
                                rows[rows["status"] == "ok"], inputs,
                                artifact.device_correction, names)
    return artifact, bench, corpus


def test_the_shipped_tpu_model_is_widened_as_the_stored_suites_ask(stored):
    artifact, bench, corpus = stored
    report = dw.fit(bench, corpus)
    assert Widening.from_dict(report) == artifact.device_correction.widening
    assert (report["onset"], report["power"]) == (pytest.approx(6.39, abs=0.01), 0.75)
    assert report["programs"] == 195 and report["libraries"] == 56
    assert report["held_out_programs"] == 313
    # the fourth and fifth suites (72 programs no fit had seen) 72% inside as shipped
    assert report["coverage_before"]["tpu_outside_de"] == pytest.approx(0.722, abs=1e-3)
    assert report["coverage_after"]["tpu_outside_de"] == pytest.approx(0.931, abs=1e-3)
    assert report["coverage_library_held_out"] == pytest.approx(0.913, abs=1e-3)
    # the libraries held out of the correction: 93% before, 96.5% after, their offsets
    # grown less than the strangers'
    assert report["held_out_coverage_before"] == pytest.approx(0.930, abs=1e-3)
    assert report["held_out_coverage_after"] == pytest.approx(0.965, abs=1e-3)
    assert report["held_out_mean_scale"] < report["mean_scale"] - 0.2


def test_fitted_on_the_earlier_suites_the_rule_covers_the_later_one(stored):
    _, bench, corpus = stored
    later = bench["bench"] == "tpu_outside_de"
    rule = fit_rule(bench[~later], corpus)
    assert inside(bench[later], rule).mean() == pytest.approx(0.931, abs=1e-3)


def test_the_card_line_replaces_an_earlier_one(tmp_path):
    folder = tmp_path / "tpu"
    folder.mkdir()
    shutil.copy(SHIPPED / "MODEL_CARD.md", folder / "MODEL_CARD.md")
    report = {**load_default("tpu", "v5e").device_correction.about["widening"], "power": 0.0,
              "factor": 2.5}
    for _ in range(2):
        write_widening_line(folder, report)
    text = (folder / "MODEL_CARD.md").read_text()
    assert text.count(WIDENING_START) == 1 and "by 2.50:" in text
    write_widening_line(folder, load_default("tpu", "v5e").device_correction.about["widening"])
    assert (folder / "MODEL_CARD.md").read_text() == (SHIPPED / "MODEL_CARD.md").read_text()
