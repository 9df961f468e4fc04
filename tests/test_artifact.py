"""Artifacts: plain-data round trip, verification before reading, pickled artifacts refused
and converted, default paths."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION
from costmodel.models import ArtifactError, default_path, load
from costmodel.training.fitting.fit import features_frame, train
from costmodel.training.fitting.publish import convert_pickled, save
from costmodel.training.store.dataset import fingerprint


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
    digest = hashlib.sha256((art.path / "model.npz").read_bytes()).hexdigest()
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


def test_saving_the_same_model_twice_writes_the_same_bytes(saved, tmp_path):
    art, rows = saved
    again = save(art.predictor, tmp_path / "again", backend="cpu", target="", data=rows,
                 metrics={}, name="again")
    assert again.manifest["sha256"] == art.manifest["sha256"]


def test_tampered_model_is_refused(copy):
    with open(copy / "model.npz", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(ArtifactError, match="sha256 mismatch for .*model.npz"):
        load(copy)


def test_other_schema_version_is_refused_before_reading(copy, monkeypatch):
    from costmodel.models.predictor import Predictor

    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    (copy / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(Predictor, "load", lambda *a, **k: pytest.fail("read before checks"))
    expected = f"schema_version mismatch.*schema {SCHEMA_VERSION + 1}"
    with pytest.raises(ArtifactError, match=expected):
        load(copy)


def test_missing_file_is_named(copy):
    (copy / "model.npz").unlink()
    with pytest.raises(ArtifactError, match="missing model.npz"):
        load(copy)


def test_model_file_holds_no_pickles(saved):
    with np.load(saved[0].path / "model.npz", allow_pickle=False) as arrays:
        kinds = {arrays[name].dtype.kind for name in arrays.files}
    assert kinds <= {"f", "i", "b", "U"}  # numbers, flags and the JSON description


def _pickled_like_before(model, folder):
    """An artifact as costmodel wrote them before models were plain data: a joblib pickle
    of the estimator, whose per-target parts were dicts holding the old forest class."""
    import copy as copying
    import sys
    import types

    import joblib

    old = copying.copy(model)
    module = types.ModuleType("costmodel.training.forest")

    class FlatForest:
        pass

    FlatForest.__module__, FlatForest.__qualname__ = module.__name__, "FlatForest"
    module.FlatForest = FlatForest
    parts = {}
    for target, fitted in model.predictor.targets.items():
        forest = FlatForest()
        vars(forest).update(vars(fitted.forest))
        parts[target] = {"coef": fitted.coef, "forest": forest, "lo": fitted.lo,
                         "hi": fitted.hi, "oof_residual_mad": fitted.oof_residual_mad,
                         "bands": None if fitted.bands is None else {
                             "edges": fitted.bands.edges.tolist(),
                             "lo": fitted.bands.lo.tolist(), "hi": fitted.bands.hi.tolist()}}
    old.models_ = parts
    del old.predictor_
    sys.modules[module.__name__] = module
    try:
        joblib.dump(old, folder / "estimator.joblib")
    finally:
        del sys.modules[module.__name__]
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "model.npz").unlink()
    manifest["sha256"] = hashlib.sha256((folder / "estimator.joblib").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_pickled_artifact_is_refused_with_the_command_that_converts_it(saved, copy):
    art, rows = saved
    model = train(rows, "cpu", "", max_iter=20, n_folds=3)
    _pickled_like_before(model, copy)
    with pytest.raises(ArtifactError, match="pickled estimator.*costmodel convert-model"):
        load(copy)
    version = json.loads((copy / "manifest.json").read_text())["version"]
    converted = convert_pickled(copy)
    assert not (copy / "estimator.joblib").exists()
    back = load(copy)
    assert back.version == version == converted.version
    inputs = features_frame(rows).to_dict("records")
    before, after = model.predict(inputs), back.predict(inputs)
    for target in before:
        for key in ("point", "lo", "hi"):
            np.testing.assert_allclose(after[target][key], before[target][key],
                                       rtol=1e-9, atol=0)


def test_predict_names_missing_features(saved):
    art, rows = saved
    inputs = features_frame(rows.iloc[:1]).drop(columns=["while_count"]).to_dict("records")
    with pytest.raises(ValueError, match="missing feature columns \\(1\\): while_count"):
        art.predict(inputs)


def test_default_paths():
    assert default_path().parts[-2:] == ("default", "cpu")
    assert default_path("gpu", "h100").parts[-2:] == ("default", "gpu-h100")
    assert default_path("gpu") == default_path("gpu", "h100")


def test_phase_shares_travel_with_the_model(saved, tmp_path):
    from dataclasses import replace

    from costmodel.models.phase_shares import PhaseShares
    from costmodel.models.predictor import Predictor

    art, rows = saved
    shares = PhaseShares(("hlo_ops_inlined",), ("hlo", "other"),
                         np.array([[-2.0, 0.3], [-1.0, -0.1]]))
    with open(tmp_path / "model.npz", "wb") as handle:
        replace(art.predictor, phase_shares=shares).save(handle)
    back = Predictor.load(tmp_path / "model.npz")
    inputs = features_frame(rows.iloc[:3]).to_dict("records")
    got = back.part_shares(inputs)
    assert set(got) == {"hlo", "backend", "other"}
    np.testing.assert_allclose(sum(got.values()), 1.0)
    ops = np.log1p([row["hlo_ops_inlined"] for row in inputs])
    expected_hlo = np.exp(-2 + 0.3 * ops) / (1 + np.exp(-2 + 0.3 * ops) + np.exp(-1 - 0.1 * ops))
    np.testing.assert_allclose(got["hlo"], expected_hlo)
    assert art.predictor.part_shares(inputs) is None  # fitted without traced rows
