"""How sure a calibration is: the ways of calibrating (the model ratio, the reference speed,
the calibration set) compared, intervals widened where they disagree, and what the
`calibrate` command says about it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from calibration_figures import TRAINING, OpsModel, measured_here, training_figures, with_inputs

from costmodel.training.measure.calibrate import calibrate

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """A model folder fitted on exact synthetic rows, and a StableHLO module to predict."""
    import jax
    import jax.numpy as jnp
    from conftest import make_rows

    from costmodel.training.fitting.fit import train
    from costmodel.training.fitting.publish import save

    rows = make_rows(np.geomspace(100, 3000, 60))
    folder = tmp_path_factory.mktemp("model")
    save(train(rows, "cpu", "", max_iter=10, n_folds=2).predictor, folder, backend="cpu",
         target="", data=rows, metrics={}, name="small")
    return folder, jax.jit(jnp.sin).lower(jnp.ones(8)).as_text()


def _calibrated_here(reference_seconds: float) -> dict:
    """The set measured here 0.6 times the training machine's seconds in every part, the
    OpsModel predicting each program as the training machine measured it (so the set and
    the model ratio both say 0.6), with the reference beside them at `reference_seconds`."""
    here = measured_here(dict.fromkeys(("hlo", "backend", "other"), 0.6), [reference_seconds] * 5)
    return with_inputs(here, [t * 1e3 for t in TRAINING_SECONDS])


TRAINING_SECONDS = [seconds for seconds, _ in TRAINING.values()]


@pytest.mark.parametrize("reference_seconds, agree", [(0.1 * 0.6 ** (1 / 0.8), True),
                                                      (0.13, False)])
def test_intervals_widen_when_the_ways_of_calibrating_disagree(
        small_model, tmp_path, monkeypatch, reference_seconds, agree):
    import costmodel
    from costmodel.training.measure import calibrate as module

    folder, text = small_model
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("COSTMODEL_CALIBRATION", str(path))
    plain = costmodel.predict_stablehlo(text, model=folder)
    here = _calibrated_here(reference_seconds)
    monkeypatch.setattr(module, "measure_set", lambda programs, progress=None: here)
    manifest = {"version": "test", "calibration_set": training_figures(), "reference_seconds": 0.1,
                "reference_power": 0.8}
    record = calibrate(manifest=manifest, model=OpsModel(), rounds=1)
    # applied: the model ratio 0.6 times the factor for programs the model never saw
    assert record["scale"] == pytest.approx(0.6 * 1.07)
    scaled = costmodel.predict_stablehlo(text, model=folder)
    assert scaled.compile_seconds == pytest.approx(plain.compile_seconds * 0.642)
    low, high = (v * 0.642 for v in plain.compile_seconds_interval)
    if agree:  # the reference speed says 0.6 too: the interval as fitted, scaled
        assert record["spread"] == pytest.approx(1.0) and record["log_uncertainty"] == 0.0
        assert scaled.compile_seconds_interval == (pytest.approx(low), pytest.approx(high))
    else:  # the reference speed says 1.3 ** 0.8 = 1.23: 2.06x apart, 1.79x past agreeing
        assert record["spread"] == pytest.approx(1.3 ** 0.8 / 0.6)
        uncertainty = np.log(1.3 ** 0.8 / 0.6 / 1.15)
        point = scaled.compile_seconds
        expected = (point * np.exp(-np.hypot(np.log(point / low), uncertainty)),
                    point * np.exp(np.hypot(np.log(high / point), uncertainty)))
        assert scaled.compile_seconds_interval == pytest.approx(expected)
        assert scaled.compile_seconds_interval[0] < low and scaled.compile_seconds_interval[1] > high
    # host memory is not a calibration's business
    assert scaled.peak_memory_bytes_interval == plain.peak_memory_bytes_interval


def test_calibrate_command_says_how_sure_it_is(tmp_path, monkeypatch, capsys):
    from costmodel import cli
    from costmodel.models import load_default
    from costmodel.training.fitting.fit import features_frame, select_rows
    from costmodel.training.measure import calibrate as module

    # the shipped model's own predictions of the set (from its training rows' features),
    # each program measured here 0.7 times that and the reference beside it at 0.09 s
    rows = select_rows(pd.read_parquet(ROOT / "training/data/cpu/rows.parquet"), "cpu")
    rows = rows[rows["family"] == "calibration_set"]
    inputs = features_frame(rows).to_dict("records")
    points = load_default("cpu").predict(inputs)["compile_seconds"]["point"]
    here = {json.loads(params)["program"]: {
        "compile_seconds": 0.7 * p, "ref_seconds": 0.09, "parts": None, "model_inputs": i}
        for params, p, i in zip(rows["params"], points, inputs)}
    monkeypatch.setattr(module, "measure_set", lambda programs, progress=None: here)
    monkeypatch.setenv("COSTMODEL_CALIBRATION", str(tmp_path / "calibration.json"))
    assert cli.main(["calibrate", "--rounds", "1"]) == 0
    first, second = capsys.readouterr().out.strip().splitlines()
    assert first.startswith("calibration scale 0.749 (the calibration set's compiles here "
                            "over the model's predictions of them, median of 5 programs, "
                            "0.700, times 1.07 for programs it never saw)")
    record = json.loads((tmp_path / "calibration.json").read_text())
    # the reference says (0.09 / 0.1026) ** 0.83 = 0.90, the set's median ratio to the
    # training machine 0.68: 1.31x apart, 1.14x past agreeing
    assert record["candidates"]["reference_speed"] == pytest.approx(
        (0.09 / 0.10263006899913307) ** 0.8308235706629756)
    assert record["log_uncertainty"] == pytest.approx(np.log(record["spread"] / 1.15))
    assert second == (
        "how sure: the ways of calibrating are 1.31x apart (model ratio 0.70, reference speed "
        "0.90, calibration set 0.68); they disagree, so each bound of a 90% interval moves "
        "out by up to 1.14x; on 25 stored calibrations of 11 runs the model ratio left "
        "held-out programs predicted 0.78-1.17x their compile")
