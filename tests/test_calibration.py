"""Calibration: the record predictions read, the reference speed it applies, the part
factors it records beside from the calibration set, the phase shares."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from costmodel.features.environment import cpu_model, host_cpu_count
from costmodel.models.calibration import Calibration, load_calibration
from costmodel.models.table import Table
from costmodel.training.fitting.phase_model import TERMS, fit_phase_shares
from costmodel.training.measure.calibrate import (
    calibrate,
    median_reference,
    part_scales,
    reference_speed_scale,
    training_set,
)
from costmodel.training.measure.phases import part_seconds

# Shares of the five calibration programs on the training machine (hlo, backend, other),
# as its sweep measured them, and their compile seconds there.
TRAINING = {"reference": (0.10, (0.15, 0.45, 0.40)), "fold": (0.40, (0.77, 0.02, 0.21)),
            "mixed": (0.54, (0.22, 0.56, 0.22)), "codegen": (1.53, (0.02, 0.95, 0.03)),
            "train_step": (1.78, (0.23, 0.66, 0.11))}


def _training():
    return {p: {"compile_seconds": s, "parts": dict(zip(("hlo", "backend", "other"),
                                                        np.multiply(s, shares)))}
            for p, (s, shares) in TRAINING.items()}


def _here(factors, refs=None):
    refs = refs or [None] * len(TRAINING)
    return {p: {"compile_seconds": sum(v * factors[k] for k, v in t["parts"].items()),
                "ref_seconds": ref, "parts": None}
            for (p, t), ref in zip(_training().items(), refs)}


def test_part_factors_come_back_from_a_machine_slower_in_the_backend_only():
    overall, parts = part_scales(_here({"hlo": 1.0, "backend": 2.0, "other": 1.0}), _training())
    assert overall == pytest.approx(1.56)  # median of the five programs' ratios
    # the true factors are 1, 2, 1; the ridge that keeps noise out pulls them a little
    # toward the overall factor (the part "other" most, as fewest programs lean on it)
    assert parts == pytest.approx({"hlo": 1.01, "backend": 1.92, "other": 1.21}, abs=0.01)
    # one tiny reference program would have said 1.45 for every program
    assert _here({"hlo": 1.0, "backend": 2.0, "other": 1.0})["reference"]["compile_seconds"] \
        / 0.10 == pytest.approx(1.45)


def test_a_machine_uniformly_faster_gets_that_factor_for_every_part():
    overall, parts = part_scales(_here(dict.fromkeys(("hlo", "backend", "other"), 0.6)),
                                 _training())
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
    assert median_reference(_here(dict.fromkeys(("hlo", "backend", "other"), 1.0),
                                  (0.11, None, 0.15, 0.12, 0.14))) == pytest.approx(0.13)


def test_calibrate_applies_the_reference_speed_and_records_the_sets_factors(tmp_path,
                                                                             monkeypatch):
    from costmodel.training.measure import calibrate as module

    here = _here({"hlo": 1.0, "backend": 2.0, "other": 1.0}, (0.11, 0.12, 0.13, 0.14, 0.15))
    monkeypatch.setattr(module, "measure_set", lambda programs, progress=None: here)
    manifest = {"version": "test", "calibration_set": _training(), "reference_seconds": 0.1,
                "reference_power": 0.8}
    record = calibrate(path=tmp_path / "calibration.json", manifest=manifest, rounds=1)
    assert record["scale_from"] == "reference_speed"
    assert record["scale"] == pytest.approx(1.3 ** 0.8)  # median reference 0.13 against 0.1
    assert record["reference_seconds"] == {"here": pytest.approx(0.13), "model": 0.1}
    assert record["set_scale"] == pytest.approx(1.56)
    assert record["part_scales"]["backend"] == pytest.approx(1.92, abs=0.01)
    assert load_calibration(tmp_path / "calibration.json") == Calibration(
        pytest.approx(1.3 ** 0.8))
    # a model that records no reference power: the set's median ratio
    del manifest["reference_power"]
    record = calibrate(path=tmp_path / "calibration.json", manifest=manifest, rounds=1)
    assert (record["scale_from"], record["scale"]) == ("calibration_set", pytest.approx(1.56))


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
    # the model's figures: this machine's own, so the factors come out near 1
    manifest = {"version": "test", "calibration_set": _training()}
    record = calibrate(path=tmp_path / "calibration.json", manifest=manifest, rounds=2)
    assert set(record["programs"]) == set(TRAINING)
    assert all(p["here"]["parts"] for p in record["programs"].values())
    assert set(record["part_scales"]) == {"hlo", "backend", "other"}
    assert record["scale_from"] == "calibration_set"  # the manifest has no reference speed
    assert 0.2 < record["scale"] < 5 and 0.02 < record["reference_seconds"]["here"] < 1
    assert load_calibration(tmp_path / "calibration.json").scale == pytest.approx(record["scale"])


def test_rounds_combine_into_each_programs_median():
    from costmodel.training.measure.calibrate import combine_rounds

    def figure(seconds, ref, hlo):
        return {"compile_seconds": seconds, "ref_seconds": ref,
                "parts": None if hlo is None else {"hlo": hlo, "backend": seconds - hlo}}

    rounds = [{"a": figure(1.0, 0.1, 0.2), "b": figure(3.0, None, 1.0)},
              {"a": figure(1.6, 0.3, 0.4), "b": figure(2.0, 0.2, None)},
              {"a": figure(1.2, 0.2, 0.3), "b": figure(2.5, 0.4, 0.5)}]
    combined = combine_rounds(rounds)
    assert combined["a"] == {"compile_seconds": 1.2, "ref_seconds": 0.2,
                             "parts": {"hlo": 0.3, "backend": pytest.approx(0.9)}}
    # a round without a reference time is left out of that median; one without parts
    # leaves the program without them
    assert combined["b"] == {"compile_seconds": 2.5, "ref_seconds": pytest.approx(0.3),
                             "parts": None}
    with pytest.raises(ValueError, match="rounds"):
        calibrate(manifest={"calibration_set": _training()}, rounds=0)


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
