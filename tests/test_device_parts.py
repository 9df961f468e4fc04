"""Part models of the TPU device correction: one model per compile part on the sweep
machine's phase rows, a factor per part for the chip's host, blended with the step."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from costmodel.features import MODEL_FEATURES
from costmodel.models.device_correction import DeviceCorrection, PartModels
from costmodel.training.fitting import device_correction as dc
from costmodel.training.fitting import device_parts

LIBRARIES = [f"lib{i}" for i in range(6)]
HLO_FACTOR, BACKEND_FACTOR = 4.0, 0.5  # the chip's host: HLO passes slower, backend faster


def _data(n=120, seed=1):
    """Sweep rows with libtpu's stage split, held-out predictions and chip rows. Whether a
    program spends its compile in HLO passes (80%) or the backend (80%) follows
    `fold_elements`, an input the step does not read; the chip's host runs HLO passes 4x
    slower and the backend 2x faster, so only the parts can tell the two kinds apart."""
    from conftest import make_rows

    rng = np.random.default_rng(seed)
    rows = make_rows(np.geomspace(200, 3000, n), seed=seed)
    rows["key"] = [f"k{i}" for i in range(n)]
    rows["library"] = [LIBRARIES[i % len(LIBRARIES)] for i in range(n)]
    rows["backend"], rows["target"] = "tpu", "v5e"
    total = rows["compile_seconds"].to_numpy()
    hlo_heavy = rows["f_fold_elements"].to_numpy() > 50
    hlo = total * np.where(hlo_heavy, 0.8, 0.2)
    backend = total - hlo
    rows["phase_wall_seconds"] = total
    rows["phase_tpu_hlo_seconds"] = hlo
    rows["phase_tpu_backend_seconds"] = 0.7 * backend
    rows["phase_tpu_codegen_seconds"] = 0.3 * backend
    rows["phase_tpu_end_to_end_seconds"] = total
    base = total * np.exp(rng.normal(0, 0.05, n))
    chip_seconds = (HLO_FACTOR * hlo + BACKEND_FACTOR * backend) * np.exp(rng.normal(0, 0.05, n))
    predictions = pd.DataFrame({"split": dc.SPLIT, "model": "costmodel",
                                "target": "compile_seconds", "key": rows["key"],
                                "point": base})
    chip = [{"key": k, "device_s": [float(s)], "status": "ok"}
            for k, s in zip(rows["key"], chip_seconds)]
    return rows, predictions, chip, hlo_heavy


@pytest.fixture(scope="module")
def fitted():
    rows, predictions, chip, hlo_heavy = _data()
    p = dc.pairs(rows, predictions, chip)
    parts = device_parts.part_rows(rows)
    return p, parts, hlo_heavy


@pytest.fixture(scope="module")
def correction(fitted):
    p, parts, _ = fitted
    return dc.fit(p, {"programs": len(p.frame)}, parts)


def test_part_rows_split_each_compile_into_hlo_backend_and_the_rest(fitted):
    p, parts, hlo_heavy = fitted
    assert len(parts) == 120 and parts.X.shape == (120, len(MODEL_FEATURES))
    share = np.exp(parts.Y[:, 0]) / np.exp(parts.Y[:, :2]).sum(axis=1)
    np.testing.assert_allclose(share, np.where(hlo_heavy, 0.8, 0.2), rtol=1e-6)


def test_factors_are_recovered_from_exact_parts():
    rng = np.random.default_rng(0)
    seconds = rng.uniform(0.1, 5.0, (60, 3))
    chip = seconds @ np.array([4.0, 0.5, 1.5])
    np.testing.assert_allclose(device_parts.fit_factors(seconds, chip), [4.0, 0.5, 1.5],
                               rtol=0.02)


def test_the_blend_sees_what_the_step_cannot(fitted):
    p, parts, _ = fitted
    correction, held = dc.held_out_correction(p, parts)
    assert held.shape == (120, 3)
    with_parts = dc.score(p, correction)["all"]["corrected"]
    step_only = dc.score(p)["all"]["corrected"]
    # the step guesses between 4x*0.8+0.5x*0.2=3.3 and 4x*0.2+0.5x*0.8=1.2: off by ~1.7x
    assert step_only["median_fold"] > 1.4
    assert with_parts["median_fold"] < 1.25
    assert with_parts["p90_fold"] < step_only["p90_fold"]


def test_a_fitted_correction_carries_its_parts_and_loads_to_the_same_factors(
        fitted, correction, tmp_path):
    p = fitted[0]
    assert isinstance(correction.parts, PartModels)
    assert correction.parts_weight == device_parts.WEIGHT
    factors = dict(zip(correction.parts.parts, correction.parts.factors))
    assert factors["hlo"] == pytest.approx(HLO_FACTOR, rel=0.3)
    assert factors["backend"] == pytest.approx(BACKEND_FACTOR, rel=0.3)
    assert correction.about["part_factors"]["hlo"] == pytest.approx(factors["hlo"], abs=1e-3)
    correction.save(tmp_path / "c.npz")
    back = DeviceCorrection.load(tmp_path / "c.npz")
    inputs = [{n: float(v) for n, v in zip(MODEL_FEATURES, row)}
              for row in p.frame[list(MODEL_FEATURES)].to_numpy()[:8]]
    seconds = p.frame["base"].to_numpy()[:8]
    np.testing.assert_array_equal(back.log_factor(inputs, seconds),
                                  correction.log_factor(inputs, seconds))
    assert back.parts.factors == correction.parts.factors


def test_the_log_factor_is_the_weighted_blend_of_step_and_parts(fitted, correction):
    p = fitted[0]
    inputs = [{n: float(v) for n, v in zip(MODEL_FEATURES, row)}
              for row in p.frame[list(MODEL_FEATURES)].to_numpy()[:5]]
    seconds = p.frame["base"].to_numpy()[:5]
    step_only = DeviceCorrection(correction.feature_names, correction.forest,
                                 correction.lo, correction.hi)
    step = step_only.log_factor(inputs, seconds)
    by_parts = correction.parts.log_seconds(inputs) - np.log(seconds)
    w = correction.parts_weight
    np.testing.assert_allclose(correction.log_factor(inputs, seconds),
                               (1 - w) * step + w * by_parts)
    assert not np.allclose(step, by_parts)


def test_rows_without_a_phase_split_are_an_error_that_says_so():
    rows, *_ = _data(n=12)
    rows = rows.drop(columns=["phase_wall_seconds"])
    with pytest.raises(ValueError, match="no phase row"):
        device_parts.part_rows(rows)


def test_the_command_fits_parts_and_outside_programs_and_installs(tmp_path):
    """`python -m costmodel.training.fitting.device_correction` end to end, with phase rows
    and outside programs: the step, the part models and the outside pairs installed."""
    import json

    from costmodel.models.artifact import load
    from costmodel.training.fitting.fit import train
    from costmodel.training.fitting.publish import save

    rows, predictions, chip, _ = _data(n=60)
    model = train(rows, "tpu", "v5e", max_iter=20, n_folds=3)
    folder = tmp_path / "tpu-v5e"
    save(model, folder, backend="tpu", target="v5e", data=rows,
         metrics={"leave_family_out": {}}, name="test-tpu")
    rows.to_parquet(tmp_path / "rows.parquet")
    predictions.to_parquet(tmp_path / "predictions.parquet")
    (tmp_path / "chip.jsonl").write_text("\n".join(json.dumps(r) for r in chip) + "\n")
    # four outside programs of two libraries, twice their base prediction on the chip
    outside = rows.head(4).copy()
    outside["key"] = [f"o{i}" for i in range(4)]
    outside["library"] = ["outa", "outa", "outb", "outb"]
    outside["base"], outside["rss_pred"] = [1.0, 2.0, 3.0, 4.0], 1e8
    outside.to_parquet(tmp_path / "outside.parquet")
    (tmp_path / "outside.jsonl").write_text("\n".join(json.dumps(
        {"key": f"o{i}", "status": "ok", "device_s": [2.0 * (i + 1)]}) for i in range(4)) + "\n")
    assert dc.main(["--model", str(folder), "--rows", str(tmp_path / "rows.parquet"),
                    "--predictions", str(tmp_path / "predictions.parquet"),
                    "--device-rows", str(tmp_path / "chip.jsonl"),
                    "--phase-rows", str(tmp_path / "rows.parquet"),
                    "--outside", str(tmp_path / "outside.parquet"),
                    str(tmp_path / "outside.jsonl"),
                    "--json", str(tmp_path / "figures.json"),
                    "--held-out-out", str(tmp_path / "held.parquet")]) == 0
    figures = json.loads((tmp_path / "figures.json").read_text())
    assert figures["n"] == 64 and figures["outside"]["n"] == 4
    assert figures["corpus_real_libraries"]["n"] == 60
    # each program's held-out prediction, named: the figures are these rows' folds
    held = pd.read_parquet(tmp_path / "held.parquet")
    assert len(held) == 64 and set(held.loc[held["key"].str.startswith("o"), "library"]) == {
        "outa", "outb"}
    real = held[held["library"] != "synthetic"]
    assert np.median(real["fold"]) == pytest.approx(
        figures["real_libraries"]["corrected"]["median_fold"], rel=1e-9)
    assert np.allclose(real["fold"], np.exp(np.abs(np.log(real["device"] / real["predicted"]))))
    about = json.loads((folder / "manifest.json").read_text())["device_correction"]
    assert about["programs"] == 64 and about["outside_programs"] == 4
    correction = load(folder).device_correction
    assert correction.parts is not None and correction.parts_weight == device_parts.WEIGHT
