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
from costmodel.training.evaluation import device_widening as dw
from costmodel.training.fitting.device_card import WIDENING_START, write_widening_line
from costmodel.training.fitting.device_correction import carried_widening

ROOT = Path(__file__).resolve().parents[1]
SUITES = [ROOT / "bench" / "results" / f"{name}.json" for name in
          ("tpu_outside", "tpu_outside_c", "tpu_outside_fft", "tpu_outside_de")]
SHIPPED = ROOT / "models" / "default" / "tpu-v5e"


def _suite(errors, library, lo=0.5, hi=2.0):
    """A results file's rows: each program predicted 1 s with the interval (lo, hi), its
    chip seconds e^error."""
    return {"rows": [{"measured": math.exp(e), "ours": 1.0, "lo": lo, "hi": hi,
                      "library": lib} for e, lib in zip(errors, library)]}


def test_a_ratio_is_the_error_over_the_offset_on_its_side():
    frame = dw.ratios(_suite([math.log(2.0), -math.log(2.0), math.log(4.0), 0.0],
                             ["a", "a", "b", "b"], lo=0.25, hi=2.0), "s")
    assert frame["ratio"].tolist() == pytest.approx([1.0, 0.5, 2.0, 0.0])
    assert frame["suite"].tolist() == ["s"] * 4


def test_the_factor_covers_each_library_alike_and_never_narrows():
    # 20 programs of one library inside, 2 of another at 3x the offset
    errors = [0.1] * 20 + [3 * math.log(2.0)] * 2
    frame = dw.ratios(_suite(errors, ["big"] * 20 + ["small"] * 2), "s")
    # pooled by program 91% are inside already; each library weighing half, the small
    # one must be covered too
    assert dw.factor(frame) == pytest.approx(3.0)
    assert dw.factor(frame[frame["library"] == "big"]) == 1.0
    report = dw.fit(frame)
    assert report["coverage_before"] == {"s": pytest.approx(20 / 22, abs=1e-3)}
    assert report["coverage_after"] == {"s": 1.0}
    # the small library held out of its own factor falls outside it
    assert report["coverage_library_held_out"] == pytest.approx(20 / 22, abs=1e-3)


def test_a_prediction_reaches_the_widened_offsets():
    correction = DeviceCorrection.load(SHIPPED / CORRECTION_FILE)
    plain, wide = replace(correction, widening=1.0), replace(correction, widening=2.0)
    inputs = [{**dict.fromkeys(MODEL_FEATURES, 10.0), **placement_inputs("v5e", None)}]
    point, lo, hi = plain.apply(inputs, np.array([2.0]))
    point2, lo2, hi2 = wide.apply(inputs, np.array([2.0]))
    assert point2 == pytest.approx(point)
    assert np.log(point / lo2) == pytest.approx(2 * np.log(point / lo))
    assert np.log(hi2 / point) == pytest.approx(2 * np.log(hi / point))


def test_the_widening_survives_saving_and_a_refit(tmp_path):
    correction = DeviceCorrection.load(SHIPPED / CORRECTION_FILE)
    assert correction.widening > 1.0
    correction.save(tmp_path / CORRECTION_FILE)
    assert DeviceCorrection.load(tmp_path / CORRECTION_FILE).widening == correction.widening
    # a step saved before the widening existed reads as none
    fresh = replace(correction, widening=1.0, about={})
    assert carried_widening(fresh, tmp_path / "nowhere").widening == 1.0
    # a refit installed over a widened step keeps its factor and its record
    kept = carried_widening(fresh, tmp_path)
    assert kept.widening == correction.widening
    assert kept.about["widening"] == correction.about["widening"]


def test_the_shipped_tpu_model_is_widened_as_the_stored_suites_ask():
    frame = pd.concat([dw.ratios(json.loads(p.read_text()), p.stem) for p in SUITES],
                      ignore_index=True)
    report = dw.fit(frame)
    shipped = load_default("tpu", "v5e").device_correction
    assert shipped.widening == report["factor"] == pytest.approx(1.593, abs=1e-3)
    assert report["programs"] == 195 and report["libraries"] == 56
    # the fourth and fifth suites (72 programs no fit had seen) 72% inside as shipped
    assert report["coverage_before"]["tpu_outside_de"] == pytest.approx(0.722, abs=1e-3)
    assert report["coverage_after"]["tpu_outside_de"] == pytest.approx(0.931, abs=1e-3)
    assert report["coverage_library_held_out"] == pytest.approx(0.913, abs=1e-3)
    # fitted on the three earlier suites alone, the factor covers the later one too
    earlier = frame[frame["suite"] != "tpu_outside_de"]
    later = frame[frame["suite"] == "tpu_outside_de"]
    assert (later["ratio"] <= dw.factor(earlier)).mean() == pytest.approx(0.944, abs=1e-3)


def test_the_card_line_replaces_an_earlier_one(tmp_path):
    folder = tmp_path / "tpu"
    folder.mkdir()
    shutil.copy(SHIPPED / "MODEL_CARD.md", folder / "MODEL_CARD.md")
    report = {**load_default("tpu", "v5e").device_correction.about["widening"], "factor": 2.5}
    for _ in range(2):
        write_widening_line(folder, report)
    text = (folder / "MODEL_CARD.md").read_text()
    assert text.count(WIDENING_START) == 1 and "by 2.50:" in text
    before = (SHIPPED / "MODEL_CARD.md").read_text()
    assert text.replace("by 2.50:", "by 1.59:") == before
