"""The TPU device correction: fitted on programs compiled deviceless and on the chip,
scored with each library held out, installed beside a model and applied by predict."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from costmodel.features import MODEL_FEATURES, Features
from costmodel.models import ArtifactError, load
from costmodel.models.device_correction import CORRECTION_FILE, DeviceCorrection
from costmodel.training.fitting import device_correction as dc

LIBRARIES = [f"lib{i}" for i in range(6)]


def _pairs(n=72, seed=0):
    """Sweep rows, held-out base predictions and chip rows where the chip's host is 3x
    faster than the base on programs with many convolution flops and 1.5x slower on the
    rest: a ratio that depends on a feature, as the v5e's host does."""
    from conftest import make_rows

    rng = np.random.default_rng(seed)
    rows = make_rows(np.geomspace(100, 3000, n), seed=seed)
    rows["key"] = [f"k{i}" for i in range(n)]
    rows["library"] = [LIBRARIES[i % len(LIBRARIES)] for i in range(n)]
    base = rows["compile_seconds"].to_numpy() * np.exp(rng.normal(0, 0.05, n))
    conv = rows["f_conv_flops"].to_numpy() > 50
    device = base * np.where(conv, 1 / 3, 1.5) * np.exp(rng.normal(0, 0.05, n))
    predictions = pd.DataFrame({"split": dc.SPLIT, "model": "costmodel",
                                "target": "compile_seconds", "key": rows["key"],
                                "point": base})
    chip = [{"key": k, "device_s": [float(s)], "device_rss_bytes": 1e8, "status": "ok"}
            for k, s in zip(rows["key"], device)]
    chip.append({"key": "k0", "status": "error", "message": "a failed compile is no pair"})
    return rows, predictions, chip, conv


def test_held_out_step_learns_a_ratio_that_depends_on_the_program():
    rows, predictions, chip, _ = _pairs()
    p = dc.pairs(rows, predictions, chip)
    assert len(p.frame) == 72 and set(p.frame["library"]) == set(LIBRARIES)
    figures = dc.score(p)["all"]
    # one constant cannot serve both kinds: those it does not fit are off by 4.5x
    assert figures["model_times_constant"]["p90_fold"] > 3.5
    assert figures["corrected"]["median_fold"] < 1.15
    assert figures["corrected"]["p90_fold"] < 1.4
    assert figures["corrected"]["spearman"] > 0.95
    assert 0.7 <= figures["corrected"]["coverage"] <= 1.0


def test_a_program_measured_twice_keeps_the_median_of_its_chip_seconds():
    rows, predictions, chip, _ = _pairs()
    chip += [{"key": "k1", "device_s": [9.0, 11.0], "status": "ok"}]
    frame = dc.pairs(rows, predictions, chip).frame
    assert frame.loc["k1", "device"] == pytest.approx(np.median([chip[1]["device_s"][0], 9, 11]))


def test_no_matching_rows_is_an_error_that_says_so():
    rows, predictions, chip, _ = _pairs()
    with pytest.raises(ValueError, match="no chip row matches"):
        dc.pairs(rows, predictions, [{"key": "elsewhere", "device_s": [1.0], "status": "ok"}])


@pytest.fixture(scope="module")
def tpu_model(tmp_path_factory):
    from costmodel.training.fitting.fit import train
    from costmodel.training.fitting.publish import save

    rows, predictions, chip, conv = _pairs()
    rows["backend"], rows["target"] = "tpu", "v5e"
    model = train(rows, "tpu", "v5e", max_iter=20, n_folds=3)
    folder = tmp_path_factory.mktemp("tpu") / "tpu-v5e"
    save(model, folder, backend="tpu", target="v5e", data=rows,
         metrics={"leave_family_out": {}}, name="test-tpu")
    p = dc.pairs(rows, predictions, chip)
    dc.install(folder, dc.fit(p, {"programs": len(p.frame)}))
    return folder, rows, conv


def test_predict_moves_compile_time_to_the_chip_and_keeps_memory(tpu_model):
    from costmodel import predict_features

    folder, rows, conv = tpu_model
    art = load(folder)
    assert isinstance(art.device_correction, DeviceCorrection)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["device_correction"]["programs"] == 72
    sha = manifest["device_correction"]["sha256"]
    assert art.version.endswith(f"+chip-{sha[:6]}") and art.version.count("+") == 1
    ratios = []
    for i in (int(np.argmax(conv)), int(np.argmin(conv))):
        values = {name: float(rows[f"f_{name}"].iloc[i]) for name in MODEL_FEATURES}
        feats = Features(values=values, backend="tpu", target="v5e")
        inputs = feats.model_inputs()
        base = art.predictor.predict([inputs])
        got = predict_features(feats, model=folder)
        ratios.append(got.compile_seconds / base["compile_seconds"]["point"][0])
        lo, hi = got.compile_seconds_interval
        assert lo < got.compile_seconds < hi
        assert got.calibration_scale == 1.0
        assert got.peak_memory_bytes == pytest.approx(base["peak_rss_bytes"]["point"][0])
    # the convolution-heavy program is stepped down, the other up, as fitted
    assert ratios[0] < 0.5 and ratios[1] > 1.2


def test_a_tampered_correction_is_refused(tpu_model, tmp_path):
    import shutil

    folder = shutil.copytree(tpu_model[0], tmp_path / "tpu-v5e")
    with open(folder / CORRECTION_FILE, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(ArtifactError, match="device correction"):
        load(folder)


def test_saved_correction_loads_to_the_same_factors(tpu_model, tmp_path):
    art = load(tpu_model[0])
    art.device_correction.save(tmp_path / "c.npz")
    back = DeviceCorrection.load(tmp_path / "c.npz")
    rows = tpu_model[1].head(5)
    inputs = [{n: float(rows[f"f_{n}"].iloc[i]) for n in MODEL_FEATURES} for i in range(5)]
    seconds = rows["compile_seconds"].to_numpy()
    np.testing.assert_array_equal(back.log_factor(inputs, seconds),
                                  art.device_correction.log_factor(inputs, seconds))
    assert (back.lo, back.hi) == (art.device_correction.lo, art.device_correction.hi)


def test_the_card_section_replaces_an_earlier_one_before_the_limits(tmp_path):
    rows, predictions, chip, _ = _pairs()
    figures = dc.score(dc.pairs(rows, predictions, chip))
    card = tmp_path / "MODEL_CARD.md"
    card.write_text("# model\n\n## Evaluation\n\nfigures\n\n## Limits\n\nsome\n")
    for _ in range(2):
        dc.write_card_section(tmp_path, dc.card_section(figures, {"chip": "TPU v5 lite"}))
    text = card.read_text()
    assert text.count(dc.CARD_HEADING) == 1
    assert text.index("## Evaluation") < text.index(dc.CARD_HEADING) < text.index("## Limits")
    fold = figures["real_libraries"]["corrected"]["median_fold"]
    assert f"| the model with the device correction | {fold:.2f} |" in text


def test_a_fresh_process_rss_is_preferred_to_a_warm_ones():
    rows, predictions, chip, _ = _pairs()
    chip[0]["fresh_deviceless_rss_bytes"] = 3e8
    frame = dc.pairs(rows, predictions, chip).frame
    assert frame.loc["k0", "rss"] == 3e8 and frame.loc["k1", "rss"] == 1e8


def _with_memory(added=30e6, seed=1):
    """`_pairs` with held-out host-memory predictions and, in rows of their own (as
    `tpu_device_run.py --fresh-rss-only` writes), fresh-process RSS on the chip's host that
    is the prediction plus `added` bytes, give or take 5%."""
    rows, predictions, chip, conv = _pairs()
    rng = np.random.default_rng(seed)
    memory = np.geomspace(20e6, 2e9, len(rows))
    predictions = pd.concat([predictions, pd.DataFrame({
        "split": dc.SPLIT, "model": "costmodel", "target": "peak_rss_bytes",
        "key": rows["key"], "point": memory})])
    chip += [{"key": k, "status": "ok", "fresh_deviceless_rss_bytes": float(m)}
             for k, m in zip(rows["key"], (memory + added) * np.exp(rng.normal(0, 0.05, len(rows))))]
    return rows, predictions, chip, memory


def test_a_fresh_rss_row_without_chip_seconds_still_gives_the_program_its_memory():
    rows, predictions, chip, memory = _with_memory()
    frame = dc.pairs(rows, predictions, chip).frame
    assert len(frame) == 72  # the RSS-only rows add no program of their own
    assert frame.loc["k5", "fresh_rss"] == pytest.approx(frame.loc["k5", "rss"])
    assert frame.loc["k5", "fresh_rss"] / (memory[5] + 30e6) == pytest.approx(1, abs=0.2)


def test_the_chip_hosts_added_bytes_are_fitted_scored_and_applied(tmp_path):
    from costmodel import predict_features
    from costmodel.training.fitting.fit import train
    from costmodel.training.fitting.publish import save

    rows, predictions, chip, memory = _with_memory(added=30e6)
    p = dc.pairs(rows, predictions, chip)
    scores = dc.score(p)["all"]["fresh_rss_over_50MB"]
    # the additive host bytes fix the small programs the prediction alone misses
    assert scores["n"] == 72 and scores["with_host_bytes"]["median_fold"] < 1.06
    assert scores["model"]["p90_fold"] > 1.3
    correction = dc.fit(p, {"programs": len(p.frame)})
    assert correction.rss_added_bytes == pytest.approx(30e6, rel=0.25)
    rows["backend"], rows["target"] = "tpu", "v5e"
    model = train(rows, "tpu", "v5e", max_iter=20, n_folds=3)
    folder = tmp_path / "tpu-v5e"
    save(model, folder, backend="tpu", target="v5e", data=rows,
         metrics={"leave_family_out": {}}, name="test-tpu")
    dc.install(folder, correction)
    art = load(folder)
    assert art.device_correction.rss_added_bytes == correction.rss_added_bytes
    values = {name: float(rows[f"f_{name}"].iloc[3]) for name in MODEL_FEATURES}
    feats = Features(values=values, backend="tpu", target="v5e")
    base = art.predictor.predict([feats.model_inputs()])["peak_rss_bytes"]["point"][0]
    got = predict_features(feats, model=folder)
    assert got.peak_memory_bytes == pytest.approx(base + correction.rss_added_bytes)


def test_a_step_fitted_without_fresh_rss_adds_no_bytes():
    rows, predictions, chip, _ = _pairs()
    assert dc.fit(dc.pairs(rows, predictions, chip), {}).rss_added_bytes == 0.0
