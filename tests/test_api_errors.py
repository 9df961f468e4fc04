"""The service's errors: one JSON shape, exact status codes, never a 500 for bad input;
retraining refused without its token."""

from __future__ import annotations

import json
import logging
import time

import pytest
from test_api_support import (
    bearer,
    config,
    error,
    feature_body,
    one_thread_model,
    stablehlo,
)
from threadpoolctl import threadpool_limits

from costmodel.api import create_app
from costmodel.features import SCHEMA_VERSION

PAIRS = "cpu, gpu/h100, gpu/a100, gpu/h200, tpu/v5e, tpu/v5p, tpu/v6e"


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    # Two shared cores: OpenMP threads per prediction only contend.
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return one_thread_model(tmp_path_factory)


@pytest.fixture
def client(tmp_path, model_dir, monkeypatch):
    for name in ("COSTMODEL_SAMPLES_DB", "COSTMODEL_RETRAIN_TOKEN", "COSTMODEL_RETRAIN_DIR"):
        monkeypatch.delenv(name, raising=False)
    return create_app(config(tmp_path, model_dir)).test_client()


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
                      "target, process_state"),
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
                            "target, process_state"),
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
