"""Calibration: the record predictions read, the reference speed it applies, the part
factors it records beside from the calibration set, the phase shares."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from calibration_figures import TRAINING, OpsModel, measured_here, training_figures, with_inputs

from costmodel.features.environment import cpu_model, host_cpu_count
from costmodel.measure.phases import part_seconds
from costmodel.models.calibration import Calibration, load_calibration, widen_interval
from costmodel.models.table import Table
from costmodel.training.fitting.phase_model import TERMS, fit_phase_shares
from costmodel.training.measure.calibrate import (
    AGREEING_SPREAD,
    calibrate,
    candidate_spread,
    candidates,
    choose_scale,
    log_uncertainty,
    median_reference,
    model_ratio_scale,
    part_scales,
    reference_speed_scale,
    training_set,
)

ROOT = Path(__file__).resolve().parents[1]


def test_part_factors_come_back_from_a_machine_slower_in_the_backend_only():
    overall, parts = part_scales(measured_here({"hlo": 1.0, "backend": 2.0, "other": 1.0}),
                                 training_figures())
    assert overall == pytest.approx(1.56)  # median of the five programs' ratios
    # the true factors are 1, 2, 1; the ridge that keeps noise out pulls them a little
    # toward the overall factor (the part "other" most, as fewest programs lean on it)
    assert parts == pytest.approx({"hlo": 1.01, "backend": 1.92, "other": 1.21}, abs=0.01)
    # one tiny reference program would have said 1.45 for every program
    assert measured_here({"hlo": 1.0, "backend": 2.0, "other": 1.0})["reference"]["compile_seconds"] \
        / 0.10 == pytest.approx(1.45)


def test_a_machine_uniformly_faster_gets_that_factor_for_every_part():
    overall, parts = part_scales(measured_here(dict.fromkeys(("hlo", "backend", "other"), 0.6)),
                                 training_figures())
    assert overall == pytest.approx(0.6)
    assert parts == pytest.approx(dict.fromkeys(("hlo", "backend", "other"), 0.6))


def test_without_traced_training_figures_only_the_overall_factor():
    training = {"reference": {"compile_seconds": 0.1, "parts": None}}
    here = {"reference": {"compile_seconds": 0.13, "parts": None}}
    assert part_scales(here, training) == (pytest.approx(1.3), None)


def test_the_factor_is_the_reference_speed_here_to_the_models_power():
    assert reference_speed_scale(0.12, 0.10, 0.83) == pytest.approx(1.2 ** 0.83)
    assert reference_speed_scale(0.12, 0.10, 0.83) == pytest.approx(1.1634, abs=1e-4)
    # nothing to carry it by: no timing here, none for the model, or a model whose rows
    # showed no drift to divide out
    assert reference_speed_scale(None, 0.10, 0.83) is None
    assert reference_speed_scale(0.12, None, 0.83) is None
    assert reference_speed_scale(0.12, 0.10, 0.0) is None
    assert median_reference(measured_here(dict.fromkeys(("hlo", "backend", "other"), 1.0),
                                  (0.11, None, 0.15, 0.12, 0.14))) == pytest.approx(0.13)


def test_the_model_ratio_is_the_median_of_the_sets_ratios_to_the_models_predictions():
    here = measured_here({"hlo": 1.0, "backend": 2.0, "other": 1.0}, (0.11, 0.12, 0.13, 0.14, 0.15))
    seconds = [f["compile_seconds"] for f in here.values()]  # 0.145, 0.408, 0.8424, 2.98, 2.95
    predicted = dict(zip(here, (0.2, 0.5, 1.0, 4.0, 2.0)))
    ratios = sorted(s / p for s, p in zip(seconds, predicted.values()))
    assert model_ratio_scale(here, predicted) == pytest.approx(ratios[2])
    assert model_ratio_scale(here, predicted) == pytest.approx(0.8160)  # the fold program: 0.408 / 0.5
    manifest = {"reference_seconds": 0.1, "reference_power": 0.8}
    ways = candidates(here, training_figures(), manifest, predicted)
    assert ways == {"model_ratio": pytest.approx(0.8160), "reference_speed":
                    pytest.approx(1.3 ** 0.8), "calibration_set": pytest.approx(1.56),
                    "reference_only": pytest.approx(1.45)}
    # applied: the model ratio times 1.07; without predictions the reference speed;
    # without a reference power the set's median
    assert choose_scale(ways) == (pytest.approx(0.8160 * 1.07), "model_ratio")
    assert choose_scale({**ways, "model_ratio": None}) == (pytest.approx(1.2335, abs=1e-4),
                                                            "reference_speed")
    assert choose_scale({**ways, "model_ratio": None, "reference_speed": None}) == (
        pytest.approx(1.56), "calibration_set")
    # spread over model ratio, reference speed and set (not the reference alone)
    assert candidate_spread(ways) == pytest.approx(1.56 / 0.8160)
    assert log_uncertainty(1.56 / 0.8160) == pytest.approx(np.log(1.56 / 0.8160 / 1.15))
    assert log_uncertainty(AGREEING_SPREAD) == 0.0 and log_uncertainty(1.05) == 0.0
    assert candidate_spread({"model_ratio": 0.9, "reference_speed": None}) == 1.0


def test_calibrate_applies_the_model_ratio_and_records_every_candidate(tmp_path, monkeypatch):
    from costmodel.training.measure import calibrate as module

    here = with_inputs(measured_here({"hlo": 1.0, "backend": 2.0, "other": 1.0},
                              (0.11, 0.12, 0.13, 0.14, 0.15)), (200, 500, 1000, 4000, 2000))
    monkeypatch.setattr(module, "measure_set", lambda programs, progress=None: here)
    manifest = {"version": "test", "calibration_set": training_figures(), "reference_seconds": 0.1,
                "reference_power": 0.8}
    path = tmp_path / "calibration.json"
    record = calibrate(path=path, manifest=manifest, model=OpsModel(), rounds=1)
    assert (record["scale_from"], record["scale"]) == ("model_ratio", pytest.approx(0.8731, abs=1e-4))
    assert record["candidates"] == {"model_ratio": pytest.approx(0.8160), "reference_speed":
                                    pytest.approx(1.3 ** 0.8), "calibration_set":
                                    pytest.approx(1.56), "reference_only": pytest.approx(1.45)}
    assert record["spread"] == pytest.approx(1.56 / 0.8160)
    assert record["log_uncertainty"] == pytest.approx(np.log(1.56 / 0.8160 / 1.15))
    assert record["programs"]["mixed"]["predicted"] == pytest.approx(1.0)
    assert "model_inputs" not in record["programs"]["mixed"]["here"]
    assert record["reference_seconds"] == {"here": pytest.approx(0.13), "model": 0.1}
    assert record["set_scale"] == pytest.approx(1.56)
    assert record["part_scales"]["backend"] == pytest.approx(1.92, abs=0.01)
    assert load_calibration(path) == Calibration(pytest.approx(0.8731, abs=1e-4), pytest.approx(0.5083,
                                                                                       abs=1e-4))
    # no model to predict with: the reference speed; no reference power either: the set
    record = calibrate(path=path, manifest=manifest, rounds=1)
    assert (record["scale_from"], record["scale"]) == ("reference_speed",
                                                       pytest.approx(1.3 ** 0.8))
    assert record["candidates"]["model_ratio"] is None
    del manifest["reference_power"]
    record = calibrate(path=path, manifest=manifest, rounds=1)
    assert (record["scale_from"], record["scale"]) == ("calibration_set", pytest.approx(1.56))
    assert record["spread"] == 1.0 and record["log_uncertainty"] == 0.0


def test_an_interval_widens_by_the_calibrations_uncertainty_in_quadrature():
    assert widen_interval(1.0, 0.5, 2.0, 0.0) == (0.5, 2.0)
    low, high = widen_interval(3.0, 1.5, 6.0, 0.75 * np.log(2))
    # each side's log width log 2 becomes log 2 * sqrt(1 + 0.75^2) = 1.25 log 2
    assert (low, high) == (pytest.approx(3.0 / 2 ** 1.25), pytest.approx(3.0 * 2 ** 1.25))
    lopsided = widen_interval(1.0, 0.8, 4.0, np.log(1.2))
    assert lopsided[0] == pytest.approx(np.exp(-np.hypot(np.log(1.25), np.log(1.2))))
    assert lopsided[1] == pytest.approx(np.exp(np.hypot(np.log(4.0), np.log(1.2))))
    assert widen_interval(float("nan"), 1.0, 2.0, 0.5) == (1.0, 2.0)  # nothing to widen


def test_calibration_file_applies_only_on_the_machine_that_wrote_it(tmp_path, monkeypatch):
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("COSTMODEL_CALIBRATION", str(path))
    assert load_calibration() == Calibration(1.0)
    here = {"cpu_model": cpu_model(), "cpu_count": host_cpu_count()}
    path.write_text(json.dumps({"scale": 1.25, **here}))
    assert load_calibration() == Calibration(1.25)
    path.write_text(json.dumps({"scale": 1.25, "part_scales": {"hlo": 1.0, "backend": 1.5,
                                                              "other": 1.1}, **here}))
    assert load_calibration() == Calibration(1.25)  # the parts recorded are not applied
    path.write_text(json.dumps({"scale": 1.25, "log_uncertainty": 0.2, **here}))
    assert load_calibration() == Calibration(1.25, 0.2)
    path.write_text(json.dumps({"scale": 1.25, "log_uncertainty": -0.2, **here}))
    assert load_calibration() == Calibration(1.25, 0.0)
    path.write_text(json.dumps({"scale": 1.25, **{**here, "cpu_model": "another machine"}}))
    assert load_calibration() == Calibration(1.0)
    path.write_text(json.dumps({"scale": 1.25, **{**here, "cpu_count": 999}}))
    assert load_calibration() == Calibration(1.0)
    path.write_text(json.dumps({"scale": -1.0, **here}))
    assert load_calibration() == Calibration(1.0)


def _traced_row(seconds, hlo, backend, wall=1.0, **extra):
    return {"compile_seconds": seconds, "phase_wall_seconds": wall,
            "phase_hlo_through_layout_seconds": hlo / 2, "phase_hlo_after_layout_seconds": hlo / 2,
            "phase_backend_seconds": backend, **extra}


def test_part_seconds_split_the_compile_in_the_traced_proportions():
    assert part_seconds(_traced_row(2.0, 0.2, 0.7)) == pytest.approx(
        {"hlo": 0.4, "backend": 1.4, "other": 0.2})
    assert part_seconds({"compile_seconds": 2.0, "phase_wall_seconds": None}) is None


def test_training_set_takes_the_latest_row_at_the_models_reference_speed():
    rows = pd.DataFrame([
        {"family": "calibration_set", "status": "ok", "params": '{"program": "fold"}',
         "measured_at": "2026-12-01T10:00", "ref_seconds": 0.2, **_traced_row(9.0, 0.5, 0.4)},
        {"family": "calibration_set", "status": "ok", "params": '{"program": "fold"}',
         "measured_at": "2026-12-01T11:00", "ref_seconds": 0.2, **_traced_row(0.8, 0.5, 0.4)},
        {"family": "mlp", "status": "ok", "params": "{}", "measured_at": "2026-12-01T12:00",
         "ref_seconds": 0.1, **_traced_row(5.0, 0.5, 0.4)}])
    figures = training_set(rows, reference_seconds=0.1, reference_power=1.0)
    assert list(figures) == ["fold"]
    assert figures["fold"]["compile_seconds"] == pytest.approx(0.4)  # measured 2x slow
    assert figures["fold"]["parts"] == pytest.approx({"hlo": 0.2, "backend": 0.16,
                                                      "other": 0.04})


def test_phase_shares_follow_the_sizes_they_were_fitted_on():
    # HLO passes take a larger share as programs fold more constants
    rng = np.random.default_rng(0)
    fold = np.exp(rng.uniform(0, 16, 200))
    hlo = 0.05 + 0.85 * np.log1p(fold) / 16
    rows = pd.DataFrame([{**{f"f_{t}": 100.0 for t in TERMS}, "f_fold_elements": f,
                          **_traced_row(1.0, h, 0.95 - h)} for f, h in zip(fold, hlo)])
    shares = fit_phase_shares(rows)
    table = Table(TERMS, np.array([[100.0] * len(TERMS)] * 2))
    table.values[:, TERMS.index("fold_elements")] = [1.0, 1e6]
    predicted = shares.predict(table)
    assert predicted["hlo"] == pytest.approx([0.09, 0.78], abs=0.05)
    assert predicted["other"] == pytest.approx([0.05, 0.05], abs=0.02)
    assert fit_phase_shares(rows.iloc[:10]) is None  # too few traced rows


@pytest.mark.slow
def test_calibrate_measures_the_set_here(tmp_path):
    from costmodel.models import load_default

    # the model's figures: this machine's own, so the factors come out near 1
    manifest = {"version": "test", "calibration_set": training_figures()}
    record = calibrate(path=tmp_path / "calibration.json", manifest=manifest,
                       model=load_default("cpu"), rounds=2)
    assert set(record["programs"]) == set(TRAINING)
    assert all(p["here"]["parts"] for p in record["programs"].values())
    assert set(record["part_scales"]) == {"hlo", "backend", "other"}
    # the features each program's process extracted, predicted by the shipped model
    assert all(p["predicted"] > 0 for p in record["programs"].values())
    assert record["scale_from"] == "model_ratio"
    assert record["candidates"]["reference_speed"] is None  # the manifest has no reference
    assert 0.2 < record["scale"] < 5 and 0.02 < record["reference_seconds"]["here"] < 1
    assert load_calibration(tmp_path / "calibration.json").scale == pytest.approx(record["scale"])


def test_rounds_combine_into_each_programs_median():
    from costmodel.training.measure.calibrate import combine_rounds

    def figure(seconds, ref, hlo):
        return {"compile_seconds": seconds, "ref_seconds": ref,
                "parts": None if hlo is None else {"hlo": hlo, "backend": seconds - hlo}}

    rounds = [{"a": {**figure(1.0, 0.1, 0.2), "model_inputs": {"hlo_ops": 7.0}},
               "b": figure(3.0, None, 1.0)},
              {"a": figure(1.6, 0.3, 0.4), "b": figure(2.0, 0.2, None)},
              {"a": figure(1.2, 0.2, 0.3), "b": figure(2.5, 0.4, 0.5)}]
    combined = combine_rounds(rounds)
    assert combined["a"] == {"compile_seconds": 1.2, "ref_seconds": 0.2,
                             "parts": {"hlo": 0.3, "backend": pytest.approx(0.9)},
                             "model_inputs": {"hlo_ops": 7.0}}  # the first round's
    # a round without a reference time is left out of that median; one without parts
    # leaves the program without them
    assert combined["b"] == {"compile_seconds": 2.5, "ref_seconds": pytest.approx(0.3),
                             "parts": None, "model_inputs": None}
    with pytest.raises(ValueError, match="rounds"):
        calibrate(manifest={"calibration_set": training_figures()}, rounds=0)


def test_predictions_scale_by_the_records_one_factor(tmp_path, monkeypatch):
    from dataclasses import replace

    import jax
    import jax.numpy as jnp
    from conftest import make_rows

    import costmodel
    from costmodel.models.phase_shares import PhaseShares
    from costmodel.training.fitting.fit import train
    from costmodel.training.fitting.publish import save

    rows = make_rows(np.geomspace(100, 3000, 60))
    model = train(rows, "cpu", "", max_iter=10, n_folds=2)
    # every program: HLO passes 1/4, backend 1/2, the rest 1/4
    shares = PhaseShares(("hlo_ops",), ("hlo", "other"), np.array([[np.log(0.5), 0.0]] * 2))
    folder = tmp_path / "model"
    save(replace(model.predictor, phase_shares=shares), folder, backend="cpu", target="",
         data=rows, metrics={}, name="with-shares")
    text = jax.jit(jnp.sin).lower(jnp.ones(8)).as_text()
    plain = costmodel.predict_stablehlo(text, model=folder)
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("COSTMODEL_CALIBRATION", str(path))
    path.write_text(json.dumps({"scale": 1.7, "cpu_model": cpu_model(),
                                "cpu_count": host_cpu_count(),
                                "part_scales": {"hlo": 1.0, "backend": 2.0, "other": 1.2}}))
    scaled = costmodel.predict_stablehlo(text, model=folder)
    # not the parts weighted by this model's shares (0.25 * 1.0 + 0.5 * 2.0 + 0.25 * 1.2)
    assert scaled.calibration_scale == pytest.approx(1.7)
    assert scaled.compile_seconds == pytest.approx(plain.compile_seconds * 1.7)
