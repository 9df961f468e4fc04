"""The HTTP service through Flask's test client: every endpoint, every error, exact bodies."""

from __future__ import annotations

import json
import logging
import math
import time

import pytest
from test_api_support import (
    X,
    bearer,
    config,
    error,
    feature_body,
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

PAIRS = "cpu, gpu/h100, gpu/a100, gpu/h200, tpu/v5e, tpu/v5p, tpu/v6e"


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


# -- errors: one shape, exact status codes, never a 500 for bad input ----------------------

def _missing_two() -> dict:
    body = feature_body()
    del body["features"]["hlo_ops"], body["features"]["dot_flops"]
    return body


BAD = "Bad Request"
CASES = {
    "not an object": ([1, 2], 400, BAD, "the request body must be a JSON object, not an array"),
    "no program": ({"backend": "cpu"}, 400, BAD, "give exactly one of 'stablehlo' (module text) "
                   "or 'features' (an object of feature values)"),
    "both programs": ({"stablehlo": "x", **feature_body()}, 400, BAD,
                      "give exactly one of 'stablehlo' (module text) or 'features' (an object "
                      "of feature values); got both"),
    "stablehlo not a string": ({"stablehlo": 42}, 400, BAD,
                               "stablehlo: must be a string, not a number"),
    "features not an object": ({"features": [1]}, 400, BAD,
                               "features: must be an object of feature values, not an array"),
    "missing features": (_missing_two(), 400, BAD,
                         "features: missing 2 required feature(s): hlo_ops, dot_flops"),
    "feature a string": (feature_body(hlo_ops="12"), 400, BAD,
                         "features.hlo_ops: must be a number, not a string"),
    "feature a boolean": (feature_body(while_count=True), 400, BAD,
                          "features.while_count: must be a number, not a boolean"),
    "feature null": (feature_body(hlo_ops=None), 400, BAD,
                     "features.hlo_ops: must be a number, not null"),
    "feature negative": (feature_body(dot_flops=-1), 400, BAD,
                         "features.dot_flops: must be a number >= 0 and <= 1e+30, got -1"),
    "feature huge": (feature_body(dot_flops=10**400), 400, BAD,
                     f"features.dot_flops: must be a number >= 0 and <= 1e+30, got {10**400}"),
    "unknown feature": (feature_body(hlo_opz=1), 400, BAD,
                        "features: unknown feature name(s): hlo_opz"),
    "unknown field": ({"stablehlo": "x", "model_path": "/tmp/evil"}, 400, BAD,
                      "unknown field(s): model_path; allowed: stablehlo, features, backend, "
                      "target"),
    "unknown backend": ({"stablehlo": "x", "backend": "ipu"}, 400, BAD,
                        f"unknown backend 'ipu'; known backends: cpu, gpu, tpu; known backend/target "
                        f"pairs: {PAIRS}"),
    "unknown target": ({"stablehlo": "x", "backend": "gpu", "target": "v100"}, 400, BAD,
                       f"unknown target 'v100' for backend 'gpu'; known targets: h100, a100, "
                       f"h200; known backend/target pairs: {PAIRS}"),
    "cpu with a target": ({"stablehlo": "x", "backend": "cpu", "target": "h100"}, 400, BAD,
                          f"unknown target 'h100' for backend 'cpu'; known targets: ''; known "
                          f"backend/target pairs: {PAIRS}"),
    "backend not a string": ({"stablehlo": "x", "backend": 1}, 400, BAD,
                             "backend: must be a string, not a number"),
    "empty stablehlo": ({"stablehlo": ""}, 400, BAD,
                        "stablehlo: not a valid StableHLO module: empty StableHLO text"),
    "module without a function": ({"stablehlo": "module {}"}, 400, BAD,
                                  "stablehlo: not a valid StableHLO module: the module holds no "
                                  "func.func"),
    "nested too deeply": ({"stablehlo": "module {" * 300 + "}" * 300}, 400, BAD,
                          "stablehlo: nests 300 levels deep; at most 256 are accepted"),
    "instances not a list": ({"instances": {"stablehlo": "x"}}, 400, BAD,
                             "instances: must be a non-empty array of programs"),
    "instances empty": ({"instances": []}, 400, BAD,
                        "instances: must be a non-empty array of programs"),
    "instance not an object": ({"instances": [feature_body(), 3]}, 400, BAD,
                               "instances[1]: must be an object, not a number"),
    "bad instance": ({"instances": [feature_body(), feature_body(hlo_ops="x")]}, 400, BAD,
                     "instances[1].features.hlo_ops: must be a number, not a string"),
    "instances and more": ({"instances": [feature_body()], "backend": "cpu"}, 400, BAD,
                           "unknown field(s): backend; allowed: instances"),
    "two problems": ({"stablehlo": 1, "backend": 2}, 400, BAD,
                     "stablehlo: must be a string, not a number (and 1 more problem)"),
    "affine map": ({"stablehlo": "module attributes {x.m = affine_map<(d0) -> (" + "- " * 20000
                    + "d0)>} {}"}, 400, BAD, "stablehlo: holds an affine_map at byte 25; affine "
                   "maps and sets are not StableHLO and are not accepted"),
    "affine map of 200k terms": ({"stablehlo": "#m = affine_map<(d0) -> (d0" + " + d0" * 200_000
                                  + ")>\nmodule {}"}, 400, BAD, "stablehlo: holds an affine_map "
                                 "at byte 5; affine maps and sets are not StableHLO and are not "
                                 "accepted"),
    "schema_version a float": (feature_body(schema_version=float(SCHEMA_VERSION)), 400, BAD,
                               f"features.schema_version: must be an integer, got "
                               f"{float(SCHEMA_VERSION)}"),
    "host_cpu_count huge": (feature_body(host_cpu_count=10**400), 400, BAD,
                            "features.host_cpu_count: must be an integer from 0 to 100000, got "
                            + repr(10**400)[:37] + "..."),
    "host_cpu_count negative": (feature_body(host_cpu_count=-1), 400, BAD,
                                "features.host_cpu_count: must be an integer from 0 to 100000, "
                                "got -1"),
    "jaxlib_version 5 MB": (feature_body(jaxlib_version="0" * 5 * 2**20), 400, BAD,
                            f"features.jaxlib_version: at most 64 characters, got {5 * 2**20}"),
    "many unknown fields": ({"stablehlo": "x", **{f"k{i:05d}" + "x" * 2**20 * (i == 0): 1
                                                  for i in range(7)}}, 400, BAD,
                            "unknown field(s): k00000" + "x" * 55 + "..., k00001, k00002, "
                            "k00003, k00004 and 2 more; allowed: stablehlo, features, backend, "
                            "target"),
    "many unknown features": (feature_body(**{f"f{i:06d}": 1 for i in range(1000)}), 400, BAD,
                              "features: unknown feature name(s): f000000, f000001, f000002, "
                              "f000003, f000004 and 995 more"),
    "vector of another place": ({"features": {**feature_body()["features"], "backend": "ipu"}},
                                400, BAD, f"features.unknown backend 'ipu'; known backends: "
                                f"cpu, gpu, tpu; known backend/target pairs: {PAIRS}"),
}


@pytest.mark.parametrize("body, code, name, description", CASES.values(), ids=CASES.keys())
def test_predict_rejects_bad_bodies(client, body, code, name, description):
    response = client.post("/v1/predict", json=body)
    assert (response.status_code, response.json) == (code, error(code, name, description))


def test_malformed_stablehlo_carries_the_parser_message(client):
    response = client.post("/v1/predict", json={"stablehlo": "func.func @main( {"})
    assert response.status_code == 400
    description = response.json["description"]
    assert description.startswith("stablehlo: not a valid StableHLO module: Unable to parse")
    assert "error:" in description


@pytest.mark.parametrize("data, start", [
    (b'{"stablehlo": ', "the request body is not valid JSON: Expecting value"),
    (b"", "the request body is not valid JSON: Expecting value"),
    (b'{"features": {"hlo_ops": NaN}}', "the request body is not valid JSON: NaN is not a "
                                        "JSON number"),
    (b"\xff\xfe{", "the request body is not valid JSON: "),
    (b"[" * 100_000 + b"]" * 100_000, "the request body is not valid JSON: nested too deeply"),
    (b'{"stablehlo": "a", "stablehlo": "b"}', "the request body is not valid JSON: the key "
                                             "'stablehlo' appears more than once in one object"),
    (b'{"\\ud800": 1}', "the request body is not valid Unicode: it escapes a lone surrogate"),
    (b'{"features": {"\\udc00x": 1}}', "the request body is not valid Unicode: it escapes a "
                                      "lone surrogate"),
    (b'{"stablehlo": "module {\\ud800}"}', "the request body is not valid Unicode"),
])
def test_malformed_json_is_400(client, data, start):
    response = client.post("/v1/predict", data=data, content_type="application/json")
    assert response.status_code == 400
    assert response.json["name"] == BAD and response.json["code"] == 400
    assert response.json["description"].startswith(start)


@pytest.mark.parametrize("content_type, shown", [("text/plain", "'text/plain'"),
                                                 (None, "'no content type'")])
def test_wrong_content_type_is_415(client, content_type, shown):
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = client.post("/v1/predict", data=json.dumps(feature_body()), headers=headers)
    assert response.status_code == 415
    assert response.json == error(415, "Unsupported Media Type",
                                  f"expected Content-Type: application/json, got {shown}")


def test_nul_in_a_module_is_refused_before_parsing(client):
    response = client.post("/v1/predict", json={"stablehlo": "module {\0}"})
    assert response.json == error(400, BAD, "stablehlo: contains a NUL character at position 8")


HOSTILE_MODULES = {
    "escaped quotes": '"' + '\\"' * 250_000,   # a regex restarted at every one of them
    "quotes": '"' * 2**20,
    "open braces": "{" * 2**20,
}


@pytest.mark.parametrize("module", HOSTILE_MODULES.values(), ids=HOSTILE_MODULES.keys())
def test_validation_is_linear_in_the_body(client, module):
    # 360 KB of escaped quotes took a worker past gunicorn's 60 s timeout. A megabyte is
    # answered in 20-150 ms here; the parser's first use (its MLIR context) comes first.
    client.post("/v1/predict", json={"stablehlo": "module {}"})
    body = json.dumps({"stablehlo": module})
    start = time.perf_counter()
    response = client.post("/v1/predict", data=body, content_type="application/json")
    assert response.status_code == 400
    assert time.perf_counter() - start < 0.5


def test_body_over_max_content_length_is_413(client):
    assert client.application.config["MAX_CONTENT_LENGTH"] == 8 * 2**20
    body = json.dumps({"stablehlo": "x" * (8 * 2**20)})
    response = client.post("/v1/predict", data=body, content_type="application/json")
    assert response.status_code == 413
    assert response.json["code"] == 413 and response.json["name"] == "Request Entity Too Large"


def test_batch_limit(tmp_path, model_dir):
    client = create_app(config(tmp_path, model_dir, MAX_BATCH=2)).test_client()
    response = client.post("/v1/predict", json={"instances": [feature_body()] * 3})
    assert response.json == error(400, BAD, "instances: at most 2 programs per request, got 3")


@pytest.mark.parametrize("budget, description", [
    (0, "budget_seconds: must be a number > 0 and <= 604800, got 0"),
    (-3, "budget_seconds: must be a number > 0 and <= 604800, got -3"),
    ("10", "budget_seconds: must be a number, not a string"),
    (True, "budget_seconds: must be a number, not a boolean"),
])
def test_advise_rejects_bad_budgets(client, budget, description):
    response = client.post("/v1/advise", json={"stablehlo": stablehlo(), "budget_seconds": budget})
    assert (response.status_code, response.json) == (400, error(400, BAD, description))


def test_unknown_route_and_method_are_json(client):
    response = client.get("/v1/nothing")
    assert response.status_code == 404
    assert response.json["code"] == 404 and response.json["name"] == "Not Found"
    response = client.get("/v1/predict")
    assert response.status_code == 405
    assert response.json["name"] == "Method Not Allowed"
    assert "POST" in response.headers["Allow"]


def test_unexpected_errors_are_json_500_and_logged(tmp_path, model_dir, caplog):
    app = create_app(config(tmp_path, model_dir))

    @app.get("/boom")
    def boom():
        raise RuntimeError("kaboom")

    with caplog.at_level(logging.ERROR, logger="costmodel.api"):
        response = app.test_client().get("/boom")
    assert response.status_code == 500
    assert response.json == error(500, "Internal Server Error",
                                  "internal error; the server log has the details")
    assert "kaboom" in caplog.text


# -- retraining is off without a token, and guarded by it -----------------------------------

def test_retrain_is_forbidden_without_a_configured_token(client):
    for response in (client.post("/v1/retrain", headers=bearer()),
                     client.get("/v1/retrain/abc", headers=bearer())):
        assert response.status_code == 403
        assert response.json == error(
            403, "Forbidden", "retraining over HTTP is disabled on this server; the operator "
            "turns it on by setting COSTMODEL_RETRAIN_TOKEN (config RETRAIN_TOKEN)")


@pytest.mark.parametrize("headers", [{}, bearer("wrong"), {"Authorization": "Basic abc"},
                                     bearer("test-retrain-token-012345678")])
def test_retrain_needs_the_right_token(tmp_path, model_dir, headers):
    from test_api_support import TOKEN

    client = create_app(config(tmp_path, model_dir, RETRAIN_TOKEN=TOKEN)).test_client()
    for response in (client.post("/v1/retrain", headers=headers),
                     client.get("/v1/retrain/abc", headers=headers)):
        assert response.status_code == 401
        assert response.json == error(401, "Unauthorized", "missing or wrong token: send "
                                      "'Authorization: Bearer <token>'")
        assert response.headers["WWW-Authenticate"].lower().startswith("bearer")
    assert client.get("/v1/retrain/abc", headers=bearer(TOKEN)).status_code == 404


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

    def swapping(features, model=None):
        calls.append(model.version)
        registry.swap(("cpu", ""), other)  # lands after the first item
        return real(features, model=model)

    monkeypatch.setattr(views, "predict_features", swapping)
    body = {"instances": [{"stablehlo": stablehlo(2)}, {"stablehlo": stablehlo(3)}]}
    response = client.post("/v1/predict", json=body)
    assert response.status_code == 200
    versions = {p["model_version"] for p in response.json["predictions"]}
    assert versions == {artifact.version} and calls == [artifact.version] * 2
    after = client.post("/v1/predict", json={"stablehlo": stablehlo(2)}).json
    assert after["predictions"][0]["model_version"] == "cpu-other"
    registry.swap(("cpu", ""), artifact)  # the app is shared by this module's tests
