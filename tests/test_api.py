"""The HTTP service through Flask's test client: every endpoint, exact bodies (errors:
`test_api_errors.py`)."""

from __future__ import annotations

import json
import math

import pytest
from test_api_support import (
    X,
    config,
    error,
    feature_values,
    feature_vector,
    stablehlo,
    train_artifact,
    unrolled,
)
from threadpoolctl import threadpool_limits
from werkzeug.exceptions import UnprocessableEntity

import costmodel
from costmodel._advise import advise_stablehlo
from costmodel._predict import predict_features
from costmodel.api import create_app
from costmodel.api.config import load_config
from costmodel.api.predict import require_finite
from costmodel.features import SCHEMA_VERSION, Features, from_stablehlo
from costmodel.models import load


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # Two shared cores: OpenMP threads per prediction only contend.
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return train_artifact(tmp_path_factory.mktemp("model") / "cpu")


@pytest.fixture(scope="module")
def artifact(model_dir):
    return load(model_dir)


@pytest.fixture
def app(tmp_path, model_dir, monkeypatch):
    for name in ("COSTMODEL_SAMPLES_DB", "COSTMODEL_RETRAIN_TOKEN", "COSTMODEL_RETRAIN_DIR"):
        monkeypatch.delenv(name, raising=False)
    return create_app(config(tmp_path, model_dir))


@pytest.fixture
def client(app):
    return app.test_client()


# -- health, readiness, metadata --------------------------------------------------------

def test_healthz(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json == {"status": "ok"}


def test_readyz_with_a_verified_model(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json == {"status": "ready", "models": ["cpu"]}


def test_readyz_without_models_is_503(tmp_path):
    response = create_app(config(tmp_path, None)).test_client().get("/readyz")
    assert response.status_code == 503
    assert response.json == error(503, "Service Unavailable", "no model is loaded (no shipped "
                                  "model and no MODEL_PATHS configured)")


def test_tampered_model_is_not_loaded_and_readyz_says_why(tmp_path, model_dir):
    import shutil

    copy = tmp_path / "tampered"
    shutil.copytree(model_dir, copy)
    with open(copy / "model.npz", "ab") as handle:
        handle.write(b"\0")
    client = create_app(config(tmp_path, copy)).test_client()
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json["description"].startswith("no model is loaded (cpu: sha256 mismatch")
    assert client.get("/v1/models").json == {"models": []}


def test_models_metadata(client, artifact):
    response = client.get("/v1/models")
    assert response.status_code == 200
    (model,) = response.json["models"]
    assert model["name"] == "test-tiny-0"
    assert model["version"] == artifact.version
    assert (model["backend"], model["target"]) == ("cpu", "")
    assert model["schema_version"] == SCHEMA_VERSION
    assert model["training_rows"] == 24
    assert model["metrics"] == json.loads(json.dumps(artifact.manifest["metrics"]))
    assert model["sha256"] == artifact.manifest["sha256"]


# -- predictions ---------------------------------------------------------------------------

def test_predict_stablehlo_equals_library_predict(client, artifact):
    text = jax_text = costmodel.features.lower(unrolled(4), X)[1].as_text()
    response = client.post("/v1/predict", json={"stablehlo": text, "backend": "cpu"})
    assert response.status_code == 200
    (served,) = response.json["predictions"]  # one program: a list of one, like a batch
    in_process = costmodel.lower(unrolled(4), X).predict(backend="cpu", model=artifact).to_dict()
    assert served == json.loads(json.dumps(in_process))
    assert served == costmodel.predict_stablehlo(jax_text, model=artifact).to_dict()
    assert served["model_version"] == artifact.version


def test_predict_feature_vector_equals_predict_features(client, artifact):
    values = feature_values(stablehlo(6))
    response = client.post("/v1/predict", json={"features": feature_vector(stablehlo(6))})
    assert response.status_code == 200
    expected = predict_features(Features(values, "cpu", ""), model=artifact).to_dict()
    assert response.json == {"predictions": [expected]}
    by_text = client.post("/v1/predict", json={"stablehlo": stablehlo(6)}).json
    assert by_text == {"predictions": [expected]}


def test_predict_batch_keeps_order_and_mixes_forms(client):
    texts = [stablehlo(2), stablehlo(9)]
    singles = [client.post("/v1/predict", json={"stablehlo": t}).json["predictions"][0]
               for t in texts]
    response = client.post("/v1/predict", json={"instances": [
        {"stablehlo": texts[0]}, {"features": feature_vector(texts[1]), "backend": "cpu"}]})
    assert response.status_code == 200
    assert response.json == {"predictions": singles}
    assert singles[0]["compile_seconds"] != singles[1]["compile_seconds"]


def test_advise_equals_advise_stablehlo(client, artifact):
    text = stablehlo(7)
    response = client.post("/v1/advise", json={"stablehlo": text, "budget_seconds": 2.5})
    assert response.status_code == 200
    expected = advise_stablehlo(text, from_stablehlo(text), budget_seconds=2.5, model=artifact)
    assert response.json == {"advice": [json.loads(json.dumps(expected.to_dict()))]}
    assert response.json["advice"][0]["budget_seconds"] == 2.5
    default = client.post("/v1/advise", json={"stablehlo": text}).json["advice"][0]
    assert default["budget_seconds"] == 10.0
    batch = client.post("/v1/advise", json={"instances": [
        {"stablehlo": text, "budget_seconds": 2.5}, {"stablehlo": text}]}).json["advice"]
    assert [a["budget_seconds"] for a in batch] == [2.5, 10.0]


def test_known_target_without_a_model_is_400(client):
    response = client.post("/v1/predict", json={"stablehlo": stablehlo(), "backend": "gpu"})
    assert response.status_code == 400
    assert response.json == error(400, "Bad Request",
                                  "no model is loaded for gpu/h100 on this server; loaded: cpu")


def test_non_finite_prediction_is_422_not_invalid_json():
    # JSON has no infinity: a model pushed far outside its data must not emit one.
    with pytest.raises(UnprocessableEntity) as info:
        require_finite({"compile_seconds": 1.0, "peak_memory_bytes_interval": [0.5, math.inf]},
                       "instances[2].")
    assert info.value.description == ("instances[2].these features lie so far outside the "
                                      "training data that the prediction overflows")
    with pytest.raises(UnprocessableEntity):
        require_finite({"prediction": {"compile_seconds": math.nan}}, "")
    assert require_finite({"a": [1.0, 2]}, "") == {"a": [1.0, 2]}


# -- configuration -------------------------------------------------------------------------

def test_config_from_environment_and_mapping(tmp_path):
    environ = {"COSTMODEL_SAMPLES_DB": str(tmp_path / "env.sqlite3"),
               "COSTMODEL_RETRAIN_TOKEN": "from-env"}
    merged = load_config(None, environ)
    assert merged["SAMPLES_DB"] == tmp_path / "env.sqlite3"
    assert merged["RETRAIN_DIR"] == tmp_path / "models"
    assert merged["RETRAIN_TOKEN"] == "from-env"
    assert merged["MAX_CONTENT_LENGTH"] == 8 * 2**20
    assert load_config({"RETRAIN_TOKEN": "mapping"}, environ)["RETRAIN_TOKEN"] == "mapping"
    assert load_config({}, {})["RETRAIN_TOKEN"] is None
    assert load_config({"MODEL_PATHS": {"gpu/a100": "/m"}}, {})["MODEL_PATHS"] == {
        ("gpu", "a100"): __import__("pathlib").Path("/m")}


@pytest.mark.parametrize("bad", [{"MAX_CONTENT_LENGTH": 0}, {"RETRAIN_TOKEN": " "},
                                 {"MODEL_PATHS": {("ipu", ""): "/m"}},
                                 {"HOLDOUT_FRACTION": 1.0}, {"MAX_REQUESTS": -1},
                                 {"MAX_REQUESTS": "many"}, {"MAX_REQUESTS_JITTER": 1.5},
                                 {"MAX_REQUESTS": 10, "MAX_REQUESTS_JITTER": 11}])
def test_bad_config_is_refused(bad):
    with pytest.raises(ValueError):
        load_config(bad, {})


def test_workers_are_recycled_as_configured(tmp_path, monkeypatch):
    # MLIR keeps every distinct attribute a request brought for its context's life; a
    # recycled worker returns that memory.
    from costmodel.api.serve import _Server, gunicorn_settings

    monkeypatch.delenv("COSTMODEL_MAX_REQUESTS", raising=False)
    monkeypatch.delenv("COSTMODEL_MAX_REQUESTS_JITTER", raising=False)
    where = {"SAMPLES_DB": tmp_path / "s.sqlite3"}
    cfg = _Server(gunicorn_settings("127.0.0.1", 0, 2, 4, where), where, 10.0).cfg
    assert (cfg.max_requests, cfg.max_requests_jitter, cfg.workers) == (1000, 100, 2)
    monkeypatch.setenv("COSTMODEL_MAX_REQUESTS", "500")
    monkeypatch.setenv("COSTMODEL_MAX_REQUESTS_JITTER", "7")
    cfg = _Server(gunicorn_settings("127.0.0.1", 0, 2, 4, where), where, 10.0).cfg
    assert (cfg.max_requests, cfg.max_requests_jitter) == (500, 7)
    settings = gunicorn_settings("127.0.0.1", 0, 1, 1, {**where, "MAX_REQUESTS": 0,
                                                        "MAX_REQUESTS_JITTER": 0})
    assert (settings["max_requests"], settings["max_requests_jitter"]) == (0, 0)
    with pytest.raises(ValueError, match="MAX_REQUESTS_JITTER \\(7\\) must not exceed "
                                         "MAX_REQUESTS \\(5\\)"):
        gunicorn_settings("127.0.0.1", 0, 1, 1, {**where, "MAX_REQUESTS": 5})


# -- the OpenAPI document -------------------------------------------------------------------

def _routes(app) -> set[tuple[str, str]]:
    out = set()
    for rule in app.url_map.iter_rules():
        path = rule.rule.replace("<", "{").replace(">", "}")
        out |= {(path, method.lower()) for method in rule.methods - {"HEAD", "OPTIONS"}}
    return out


def test_openapi_documents_exactly_the_routes(client, app):
    response = client.get("/openapi.json")
    assert response.status_code == 200
    document = response.json
    documented = {(path, method) for path, item in document["paths"].items()
                  for method in item}
    assert documented == _routes(app)


def test_openapi_document_is_valid_openapi_3(client):
    from openapi_spec_validator import validate

    validate(client.get("/openapi.json").json)


def test_blame_names_the_source_lines_of_text_printed_with_locations(client):
    import jax
    import jax.numpy as jnp

    x = jax.ShapeDtypeStruct((32, 64), jnp.float32)

    def program(x, w):
        for _ in range(100):
            x = jnp.tanh(x @ w)
        return jnp.sum(x)

    lowered = jax.jit(program).lower(x, jax.ShapeDtypeStruct((64, 64), jnp.float32))
    response = client.post("/v1/blame", json={"stablehlo": lowered.as_text(debug_info=True)})
    assert response.status_code == 200, response.json
    body = response.json
    top = body["regions"][0]
    assert top["source"].startswith("test_api.py:") and top["name"].endswith("program")
    assert top["share"] > 0.8
    assert sum(r["seconds"] for r in body["regions"]) == pytest.approx(body["compile_seconds"])
    assert body["compile_seconds"] == body["prediction"]["compile_seconds"]
    plain = client.post("/v1/blame", json={"stablehlo": lowered.as_text()}).json
    assert {r["source"] for r in plain["regions"]} <= {"(outside your code)",
                                                        "(fixed cost of any compile)"}


def test_blame_refuses_a_body_without_text(client):
    response = client.post("/v1/blame", json={"features": {}})
    assert response.status_code == 400
    assert "unknown field(s): features" in response.json["description"]
    response = client.post("/v1/blame", json={"stablehlo": "not a module"})
    assert response.status_code == 400 and "stablehlo: not a valid" in response.json["description"]


def test_features_to_dict_is_accepted_as_it_is(client, artifact):
    features = from_stablehlo(stablehlo(5))
    response = client.post("/v1/predict", json={"features": features.to_dict()})
    assert response.status_code == 200, response.json
    assert response.json["predictions"] == [predict_features(features, model=artifact).to_dict()]


def test_a_feature_vector_needs_this_servers_schema_version(client):
    values = feature_values(stablehlo(4))
    response = client.post("/v1/predict", json={"features": values})
    assert response.status_code == 400
    assert response.json["description"] == (
        f"features.schema_version: required (this server reads feature schema "
        f"{SCHEMA_VERSION}; Features.to_dict() includes it)")
    response = client.post("/v1/predict", json={"features": {**values, "schema_version": 1}})
    assert response.status_code == 400
    assert response.json["description"].startswith(
        f"features.schema_version: 1 is not this server's feature schema {SCHEMA_VERSION}")


def test_a_vector_extracted_for_another_target_than_asked_is_refused(client):
    vector = {**feature_vector(stablehlo(4)), "backend": "gpu", "target": "h100"}
    response = client.post("/v1/predict", json={"features": vector, "backend": "cpu"})
    assert response.status_code == 400
    assert response.json["description"] == (
        "features.backend: the vector was extracted for gpu/h100, the request asks for cpu")


def test_kserve_v2_health_and_model_metadata(client, artifact):
    assert client.get("/v2/health/live").json == {"live": True}
    assert client.get("/v2/health/ready").json == {"ready": True}
    assert client.get("/v2").json["name"] == "costmodel"
    meta = client.get("/v2/models/cpu").json
    assert meta["versions"] == [artifact.version] and meta["platform"] == "costmodel"
    assert meta["inputs"][0]["shape"] == [-1, len(artifact.manifest["features"])]
    assert [o["name"] for o in meta["outputs"]] == [
        "compile_seconds", "peak_memory_bytes", "executable_memory_bytes"]
    assert client.get("/v2/models/cpu/ready").json == {"name": "cpu", "ready": True}
    missing = client.get("/v2/models/tpu")
    assert missing.status_code == 404 and "served: cpu" in missing.json["description"]


def test_one_request_sees_one_version_even_when_a_swap_lands_midway(client, app, artifact,
                                                                  monkeypatch, tmp_path):
    import shutil

    from costmodel.api import predict as views

    other_dir = tmp_path / "other"
    shutil.copytree(artifact.path, other_dir)
    manifest = json.loads((other_dir / "manifest.json").read_text())
    (other_dir / "manifest.json").write_text(json.dumps({**manifest, "version": "cpu-other"}))
    other = load(other_dir)
    registry = app.extensions["costmodel"].registry
    real = views.predict_features
    calls = []

    def swapping(features, model=None, process_state="fresh"):
        calls.append(model.version)
        registry.swap(("cpu", ""), other)  # lands after the first item
        return real(features, model=model, process_state=process_state)

    monkeypatch.setattr(views, "predict_features", swapping)
    body = {"instances": [{"stablehlo": stablehlo(2)}, {"stablehlo": stablehlo(3)}]}
    response = client.post("/v1/predict", json=body)
    assert response.status_code == 200
    versions = {p["model_version"] for p in response.json["predictions"]}
    assert versions == {artifact.version} and calls == [artifact.version] * 2
    after = client.post("/v1/predict", json={"stablehlo": stablehlo(2)}).json
    assert after["predictions"][0]["model_version"] == "cpu-other"
    registry.swap(("cpu", ""), artifact)  # the app is shared by this module's tests
