"""Widening the intervals by the stored bench programs (`training.evaluation.interval_widening`)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from costmodel.models import load_default
from costmodel.training.evaluation import interval_widening as widening

ROOT = Path(__file__).resolve().parents[1]


def test_the_factor_is_the_library_weighted_quantile_with_the_correction_in_libraries():
    # 20 libraries of one program each: the 0.9 * 21/20 = 0.945 quantile is the 19th ratio
    ratio = np.arange(1, 21) / 10.0
    assert widening.widening_factor(ratio, [f"lib{i}" for i in range(20)]) == pytest.approx(1.9)
    # ten: 0.99 of them, the largest
    assert widening.widening_factor(ratio[:10], [f"lib{i}" for i in range(10)]) == \
        pytest.approx(1.0)
    assert widening.widening_factor([0.5] * 9 + [2.5], [f"lib{i}" for i in range(10)]) == \
        pytest.approx(2.5)


def test_a_library_of_many_programs_weighs_as_much_as_one_of_one():
    # one library's nine programs miss by 3x their interval; nineteen others sit inside.
    # Counted by program 9 of 28 miss (the factor would be 3); by library 1 of 20 does.
    ratio = [3.0] * 9 + [0.5] * 19
    library = ["big"] * 9 + [f"lib{i}" for i in range(19)]
    assert widening.widening_factor(ratio, library) == 1.0


def test_the_factor_never_narrows_an_interval():
    assert widening.widening_factor([0.2, 0.3, 0.4], ["a", "b", "c"]) == 1.0
    assert widening.widening_factor([], []) == 1.0


def test_held_out_coverage_scores_each_library_against_a_factor_fitted_without_it():
    # 20 libraries; "far" misses by 5x. Fitted without it the factor is the 0.9 * 20/19
    # quantile of the other 19 ratios, the 18th: 1.8, so "far" stays outside; each other
    # library is scored against a factor fitted with 5.0 but without its own ratio.
    ratio = [*(np.arange(1, 20) / 10.0), 5.0]
    library = [f"lib{i}" for i in range(19)] + ["far"]
    frame = pd.DataFrame({"ratio": ratio, "library": library,
                          "bench": ["a"] * 10 + ["b"] * 10})
    shares = widening.held_out_coverage(frame)
    inside = [r <= widening.widening_factor(np.delete(ratio, i), np.delete(library, i))
              for i, r in enumerate(ratio)]
    assert shares["all"] == pytest.approx(np.mean(inside))
    assert shares["a"] == 1.0 and shares["b"] == pytest.approx(np.mean(inside[10:]))
    assert not inside[-1]
    assert widening.widening_factor(ratio[:-1], library[:-1]) == pytest.approx(1.8)


def test_widening_raises_the_interval_to_the_factors_power_around_the_same_point():
    model = load_default("gpu", "h100")
    rows = json.loads((ROOT / "bench/results/outside_libraries_h100.json").read_text())["results"]
    inputs = [row["model_inputs"] for row in rows[:5]]
    before = model.predictor.predict(inputs)["compile_seconds"]
    after = widening.widen(model.predictor, 1.5).predict(inputs)["compile_seconds"]
    assert after["point"] == pytest.approx(before["point"])
    assert after["hi"] / after["point"] == pytest.approx((before["hi"] / before["point"]) ** 1.5)
    assert after["lo"] / after["point"] == pytest.approx((before["lo"] / before["point"]) ** 1.5)
    memory = "peak_rss_bytes"
    assert widening.widen(model.predictor, 1.5).predict(inputs)[memory]["hi"] == \
        pytest.approx(model.predictor.predict(inputs)[memory]["hi"])


def test_widened_coverage_of_held_out_predictions():
    predictions = pd.DataFrame({
        "split": "leave_library_out", "target": "compile_seconds", "model": "costmodel",
        "point": [1.0, 1.0, 1.0, 1.0], "lo": [0.5] * 4, "hi": [2.0] * 4,
        "actual": [1.5, 3.0, 5.0, 0.3]})
    assert widening.widened_coverage(predictions, "leave_library_out", 1.0) == 0.25
    # widened 1.6x in log: [0.33, 3.03]
    assert widening.widened_coverage(predictions, "leave_library_out", 1.6) == 0.5


def test_a_bench_row_is_held_out_with_its_library_or_its_programs_first_word():
    assert widening.bench_library({"program": "outside_jraph_gcn {}", "library": "jraph"}) \
        == "jraph"
    assert widening.bench_library({"program": "haiku resnet18 train step"}) == "haiku"


def test_the_shipped_models_record_the_widening_their_benches_fitted():
    cpu = load_default("cpu").manifest["metrics"]["interval_widening"]
    assert cpu["factor"] == pytest.approx(1.416, abs=0.001)
    assert cpu["coverage_before"]["outside_libraries"] == pytest.approx(0.70)
    assert cpu["coverage_after"]["outside_libraries"] == pytest.approx(0.85)
    assert cpu["coverage_library_held_out"]["all"] == pytest.approx(0.873, abs=0.001)
    assert cpu["leave_library_out_coverage"] == pytest.approx(0.991, abs=0.001)
    h100 = load_default("gpu", "h100").manifest["metrics"]["interval_widening"]
    assert h100["factor"] == 1.0 and h100["coverage_before"]["outside_libraries_h100"] == 0.85


def test_the_shipped_cpu_interval_is_its_fitted_band_widened():
    """What the benches fitted is what predictions carry: the stored benches' programs
    fall inside as the manifest says."""
    from costmodel.training.evaluation.outside import score, stored_results

    model = load_default("cpu")
    recorded = model.manifest["metrics"]["interval_widening"]["coverage_after"]
    for name, data in stored_results(ROOT / "bench/results", "cpu").items():
        assert score(model, data)["coverage"] == pytest.approx(recorded[name]), name


def test_a_retrained_model_takes_the_shipped_models_widening():
    class Fitted:
        predictor = load_default("gpu", "h100").predictor

    widened, record = widening.with_shipped_widening(Fitted, "cpu")
    assert record == {"factor": pytest.approx(1.416, abs=0.001),
                      "from": load_default("cpu").version}
    inputs = json.loads((ROOT / "bench/results/outside_libraries_h100.json").read_text()
                        )["results"][0]["model_inputs"]
    before = Fitted.predictor.predict([inputs])["compile_seconds"]
    after = widened.predict([inputs])["compile_seconds"]
    assert after["hi"] / after["point"] == pytest.approx(
        (before["hi"] / before["point"]) ** record["factor"])
    assert widening.shipped_widening("tpu") == {"factor": 1.0, "from": None}


def test_refreshing_the_widening_of_a_saved_model_refits_the_same_factor(tmp_path):
    """`refresh_widening` on a copy of the shipped CPU model: the factor refitted from the
    same benches is the same, the interval the same, and the card says so."""
    import shutil

    from costmodel.models import load
    from costmodel.training.build import refresh_widening

    folder = tmp_path / "cpu"
    shutil.copytree(ROOT / "models/default/cpu", folder)
    refreshed = refresh_widening(folder, [ROOT / "training/data/cpu/rows.parquet"],
                                 ROOT / "bench/results")
    shipped = load_default("cpu")
    assert refreshed.manifest["metrics"]["interval_widening"]["factor"] == pytest.approx(
        shipped.manifest["metrics"]["interval_widening"]["factor"])
    bands, before = (model.predictor.targets["compile_seconds"].bands
                     for model in (load(folder), shipped))
    assert bands.hi == pytest.approx(before.hi) and bands.lo == pytest.approx(before.lo)
    card = (folder / "MODEL_CARD.md").read_text()
    assert "multiplied by 1.42" in card and "outside_libraries 70%" in card
