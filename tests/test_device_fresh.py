"""A TPU prediction is for a fresh process: the chip labels' state times the factor fitted
on programs compiled each in a process of its own on the chip
(`training/fitting/device_fresh.py`, `bench/data/tpu_fresh`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from costmodel.models import load_default
from costmodel.models.device_correction import DeviceCorrection, FreshProcess
from costmodel.training.fitting import device_fresh

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench/data/tpu_fresh"


def _label_calls() -> list[str]:
    sys.path.insert(0, str(ROOT / "bench/evaluations"))
    import tpu_fresh_process

    return list(tpu_fresh_process.LABEL_CALLS)


def test_the_factor_follows_its_law_inside_the_range_it_was_fitted_on():
    fresh = FreshProcess(scale=2.0, power=-0.1, low_s=0.5, high_s=10.0)
    got = fresh.factor([0.1, 0.5, 1.0, 10.0, 100.0])
    assert got == pytest.approx([2.0 * 0.5 ** -0.1, 2.0 * 0.5 ** -0.1, 2.0,
                                 2.0 * 10 ** -0.1, 2.0 * 10 ** -0.1])
    warm = np.array([0.1, 0.5, 1.0, 3.0, 10.0, 100.0])
    assert fresh.at_labels_state(warm * fresh.factor(warm)) == pytest.approx(warm)
    assert FreshProcess.from_dict(fresh.as_dict()) == fresh
    assert FreshProcess.from_dict(None) is None


def test_the_shipped_correction_predicts_a_fresh_process_unless_asked_for_a_warm_one(tmp_path):
    artifact = load_default("tpu", "v5e")
    correction = artifact.device_correction
    assert correction.fresh.scale == pytest.approx(2.035, abs=0.001)
    assert correction.fresh.power == pytest.approx(-0.1156, abs=0.0001)
    assert (correction.fresh.low_s, correction.fresh.high_s) == pytest.approx((0.333, 10.63),
                                                                              abs=0.01)
    assert artifact.manifest["device_correction"]["fresh_process"]["about"]["programs"] == 46
    inputs = [dict(row) for row in _stored_inputs(artifact)]
    fresh = artifact.predict(inputs)["compile_seconds"]
    warm = artifact.predict(inputs, process_state="warm")["compile_seconds"]
    factor = correction.fresh.factor(warm["point"])
    assert fresh["point"] == pytest.approx(warm["point"] * factor)
    assert fresh["lo"] == pytest.approx(warm["lo"] * factor)
    assert fresh["hi"] == pytest.approx(warm["hi"] * factor)
    assert 1.55 <= factor.min() and factor.max() <= 2.31
    with pytest.raises(ValueError, match="process_state must be one of fresh, warm"):
        artifact.predict(inputs, process_state="cold")
    # saved and read back, the factor stays; without it predictions are the labels' state
    correction.save(tmp_path / "c.npz")
    again = DeviceCorrection.load(tmp_path / "c.npz")
    assert again.fresh == correction.fresh
    bare = correction.with_fresh(None)
    assert "fresh_process" not in bare.about
    seconds, distance = np.array([1.0, 4.0]), np.array([2.0, 8.0])
    for got, want in zip(bare.apply(inputs[:2], seconds, distance),
                         correction.apply(inputs[:2], seconds, distance, process_state="warm")):
        assert got == pytest.approx(want)


def _stored_inputs(artifact):
    import pandas as pd

    frame = pd.read_parquet(ROOT / "bench/data/tpu_outside/features_de.parquet")
    frame = frame.drop_duplicates("key").head(8)
    return [{n: float(row["f_" + n]) for n in artifact.predictor.feature_names}
            for _, row in frame.iterrows()]


def test_fresh_rows_keep_each_process_first_compile_and_its_median(tmp_path):
    rows = tmp_path / "fresh.jsonl"
    rows.write_text("\n".join(json.dumps(r) for r in (
        {"environment": {"fresh_each": True}},
        {"key": "a", "fresh_process": True, "status": "ok", "device_s": [3.0, 1.0, 2.0],
         "ref_device_s": [0.1, 0.2, 0.1], "device_rss_bytes": 5},
        {"key": "a", "fresh_process": True, "status": "ok", "device_s": [4.0, 5.0],
         "ref_device_s": [0.3, 0.1], "device_rss_bytes": 7},
        {"key": "b", "fresh_process": True, "status": "timeout"},
        {"key": "c", "status": "ok", "device_s": [1.0], "ref_device_s": [0.1]})))
    got = device_fresh.fresh_rows([rows])
    assert got == {"a": {"first": [3.0, 4.0], "row": [2.0, 4.5], "rss": [5, 7],
                         "ref": [0.1, 0.2, 0.1, 0.3, 0.1]}}


def test_the_factor_fitted_on_the_stored_chip_compiles():
    factor, report = device_fresh.fit(sorted(DATA.glob("fresh*.jsonl")),
                                      [DATA / "warm1.jsonl"], _label_calls())
    assert report["programs"] == 46 and report["processes"] == 46
    # the long process on the same machine read the host as fast as the stored calls'
    assert report["host_factor"] == pytest.approx(1.011, abs=0.001)
    assert report["row_over_label_median"] == pytest.approx(1.859, abs=0.001)
    assert report["first_over_label_median"] == pytest.approx(2.074, abs=0.001)
    assert (factor.scale, factor.power) == pytest.approx((2.035, -0.1156), abs=0.001)
    # each program left out: the law misses by a median 1.107, a constant by 1.128
    assert report["held_out_fold"]["law"] == pytest.approx(1.107, abs=0.001)
    assert report["held_out_fold"]["constant"] == pytest.approx(1.128, abs=0.001)
    assert factor == load_default("tpu", "v5e").device_correction.fresh


def test_the_http_api_and_the_cli_answer_for_either_process_state(tmp_path, monkeypatch,
                                                                   capsys):
    import jax
    import jax.numpy as jnp
    from test_api_support import config

    import costmodel
    from costmodel.api import create_app
    from costmodel.cli import main as cli

    monkeypatch.setenv("COSTMODEL_CALIBRATION", str(tmp_path / "none.json"))
    text = jax.jit(lambda x: jnp.tanh(x @ x)).trace(jnp.ones((256, 256))).lower(
        lowering_platforms=("tpu",)).as_text()
    shipped = Path(load_default("tpu", "v5e").path)
    client = create_app(config(tmp_path, None, MODEL_PATHS={("tpu", "v5e"): shipped})).test_client()

    def served(**extra):
        response = client.post("/v1/predict", json={"stablehlo": text, "backend": "tpu",
                                                    "target": "v5e", **extra})
        assert response.status_code == 200, response.json
        return response.json["predictions"][0]

    fresh, warm = served(), served(process_state="warm")
    assert (fresh["process_state"], warm["process_state"]) == ("fresh", "warm")
    library = costmodel.predict_stablehlo(text, backend="tpu", target="v5e")
    assert fresh["compile_seconds"] == pytest.approx(library.compile_seconds)
    factor = load_default("tpu", "v5e").device_correction.fresh.factor(warm["compile_seconds"])
    assert fresh["compile_seconds"] == pytest.approx(warm["compile_seconds"] * factor)
    bad = client.post("/v1/predict", json={"stablehlo": text, "backend": "tpu",
                                           "process_state": "hot"})
    assert bad.status_code == 400 and "process_state" in json.dumps(bad.json)
    # the CLI says which state it answered for, and asks for the other
    module = tmp_path / "prog.py"
    module.write_text("import jax.numpy as jnp\n\ndef f(x):\n    return jnp.tanh(x @ x)\n")
    for state in ("fresh", "warm"):
        capsys.readouterr()
        assert cli(["predict", f"{module}:f", "--arg", "f32[256,256]", "--target", "v5e",
                    "--process-state", state, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["process_state"] == state
    assert costmodel.predict_stablehlo(text).process_state is None  # a CPU prediction
    with pytest.raises(ValueError, match="process_state must be one of fresh, warm, not 'hot'"):
        costmodel.lower(jnp.tanh, jnp.ones(3)).predict(process_state="hot")


def test_the_strangers_in_fresh_processes_against_both_states():
    """`bench/evaluations/tpu_fresh_process.py` on the stored rows: the shipped prediction
    for a fresh process against the 34 outside programs compiled each in its own."""
    sys.path.insert(0, str(ROOT / "bench/evaluations"))
    import tpu_fresh_process

    got = tpu_fresh_process.analyse(sorted(DATA.glob("fresh*.jsonl")),
                                    ROOT / "bench/data/tpu_outside/features_de.parquet")
    assert (got["programs"], got["labelled"]) == (46, 46)
    assert got["row_over_label"]["median"] == pytest.approx(1.784, abs=0.001)
    fresh, warm = got["as_shipped_against_fresh"], got["at_the_labels_state_against_fresh"]
    assert fresh["n"] == warm["n"] == 34
    assert (fresh["median_fold"], fresh["p90_fold"]) == pytest.approx((1.271, 2.049), abs=0.001)
    assert fresh["bias"] == pytest.approx(0.922, abs=0.001) and fresh["covered"] > 0.97
    assert (warm["median_fold"], warm["bias"]) == pytest.approx((1.621, 1.666), abs=0.001)
    assert got["host_rss_over_50MB"]["median_fold"] == pytest.approx(1.355, abs=0.001)
