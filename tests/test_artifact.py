"""Artifacts: round trip, verification before unpickling, default paths, calibration."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION
from costmodel.models import ArtifactError, default_path, load, save
from costmodel.training.calibrate import calibrate, load_calibration
from costmodel.training.dataset import fingerprint
from costmodel.training.fit import features_frame, train


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from conftest import make_rows

    rows = make_rows(np.geomspace(100, 3000, 80))
    model = train(rows, "cpu", "", max_iter=20, n_folds=3)
    folder = tmp_path_factory.mktemp("artifact") / "cpu"
    art = save(model, folder, backend="cpu", target="", data=rows,
               metrics={"leave_family_out": {"cpu": {}}}, name="test-model")
    return art, rows


@pytest.fixture
def copy(saved, tmp_path):
    """A private copy of the saved artifact folder, free to tamper with."""
    return shutil.copytree(saved[0].path, tmp_path / "cpu")


def test_round_trip_predicts_the_same(saved):
    art, rows = saved
    back = load(art.path)
    inputs = features_frame(rows.iloc[:5]).to_dict("records")
    before, after = art.predict(inputs), back.predict(inputs)
    assert set(after) == {"compile_seconds", "peak_rss_bytes", "executable_memory_bytes"}
    for target in after:
        for key in ("point", "lo", "hi"):
            np.testing.assert_array_equal(before[target][key], after[target][key])
    assert after["compile_seconds"]["point"].shape == (5,)


def test_manifest_records_what_was_trained(saved):
    art, rows = saved
    manifest = json.loads((art.path / "manifest.json").read_text())
    digest = hashlib.sha256((art.path / "estimator.joblib").read_bytes()).hexdigest()
    assert manifest["sha256"] == digest
    assert manifest["version"] == f"cpu-{fingerprint(rows)[:8]}-{manifest['sha256'][:6]}"
    assert (art.name, art.backend, art.target) == ("test-model", "cpu", "")
    assert manifest["schema_version"] == SCHEMA_VERSION
    assert manifest["features"] == list(MODEL_FEATURES)
    assert manifest["training_data"] == {"fingerprint": fingerprint(rows), "rows": 80,
                                         "families": {f"fam{i}": 20 for i in range(4)}}
    assert manifest["reference_seconds"] == 0.1
    assert manifest["jax_versions"] == ["0.10.2"]
    assert manifest["environment"]["cpu_model"] == ["test-cpu"]


def test_tampered_estimator_is_refused(copy):
    with open(copy / "estimator.joblib", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(ArtifactError, match="sha256 mismatch for .*estimator.joblib"):
        load(copy)


def test_other_schema_version_is_refused_before_unpickling(copy, monkeypatch):
    import joblib

    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(joblib, "load", lambda *a, **k: pytest.fail("unpickled before checks"))
    expected = f"schema_version mismatch.*schema {SCHEMA_VERSION + 1}"
    with pytest.raises(ArtifactError, match=expected):
        load(copy)


def test_missing_file_is_named(copy):
    (copy / "estimator.joblib").unlink()
    with pytest.raises(ArtifactError, match="missing estimator.joblib"):
        load(copy)


def test_predict_names_missing_features(saved):
    art, rows = saved
    inputs = features_frame(rows.iloc[:1]).drop(columns=["while_count"]).to_dict("records")
    with pytest.raises(ValueError, match="missing feature columns \\(1\\): while_count"):
        art.predict(inputs)


def test_default_paths():
    assert default_path().parts[-2:] == ("default", "cpu")
    assert default_path("gpu", "h100").parts[-2:] == ("default", "gpu-h100")
    assert default_path("gpu") == default_path("gpu", "h100")


def test_calibration_file(tmp_path, monkeypatch):
    from costmodel.training.machine import cpu_model

    path = tmp_path / "calibration.json"
    monkeypatch.setenv("COSTMODEL_CALIBRATION", str(path))
    assert load_calibration() == 1.0
    path.write_text(json.dumps({"scale": 1.25, "cpu_model": cpu_model()}))
    assert load_calibration() == 1.25
    path.write_text(json.dumps({"scale": 1.25, "cpu_model": "another machine"}))
    assert load_calibration() == 1.0


@pytest.mark.slow
def test_calibrate_times_the_reference_program(tmp_path):
    path = tmp_path / "calibration.json"
    record = calibrate(1.0, reference_seconds=0.05, path=path)
    assert record["repeats"] >= 3
    assert record["scale"] == pytest.approx(record["reference_seconds_here"] / 0.05)
    assert load_calibration(path) == pytest.approx(record["scale"])
