"""`POST /v1/samples` and `GET /v1/samples/<id>`: a token of their own, physical ranges."""

from __future__ import annotations

import psutil
import pytest
from test_api_support import (
    SAMPLES_TOKEN,
    TOKEN,
    bearer,
    config,
    error,
    feature_body,
    one_thread_model,
    stablehlo,
)

from costmodel.api import create_app
from costmodel.api.config import load_config
from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION, from_stablehlo

BAD = "Bad Request"
MEMORY_LIMIT = psutil.virtual_memory().total * 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return one_thread_model(tmp_path_factory)


@pytest.fixture
def app(tmp_path, model_dir, store):
    """The service on each store (the `store` fixture): every test using it runs twice."""
    return create_app(config(tmp_path, model_dir, SAMPLES_TOKEN=SAMPLES_TOKEN,
                             RETRAIN_TOKEN=TOKEN))


@pytest.fixture
def client(app):
    return app.test_client()


def _post(client, body, token=SAMPLES_TOKEN):
    return client.post("/v1/samples", json=body, headers=bearer(token))


def test_sample_is_stored_durably(tmp_path, model_dir, client):
    text = stablehlo(4)
    response = _post(client, {
        "stablehlo": text, "compile_seconds": 1.5, "peak_memory_bytes": 2048,
        "environment": {"cpu_model": "test", "cpu_count": 8, "note": None}})
    assert response.status_code == 201
    sample_id = response.json["id"]
    assert response.json == {"id": sample_id, "backend": "cpu", "target": ""}
    assert response.headers["Location"] == f"/v1/samples/{sample_id}"
    # a second app on the same file: what a restart sees
    again = create_app(config(tmp_path, model_dir, SAMPLES_TOKEN=SAMPLES_TOKEN)).test_client()
    stored = again.get(f"/v1/samples/{sample_id}", headers=bearer(SAMPLES_TOKEN)).json
    assert stored["compile_seconds"] == 1.5
    assert stored["peak_memory_bytes"] == 2048 and stored["executable_memory_bytes"] is None
    assert stored["environment"] == {"cpu_model": "test", "cpu_count": 8, "note": None}
    expected = from_stablehlo(text).to_dict()
    assert {n: stored["features"][n] for n in MODEL_FEATURES} == {
        n: expected[n] for n in MODEL_FEATURES}
    assert stored["created_at"] and stored["schema_version"] == SCHEMA_VERSION


def test_samples_become_dataset_rows(client, app):
    body = feature_body()
    sample_id = _post(client, {
        **body, "compile_seconds": 0.25, "environment": {"cpu_model": "x", "evil": "y",
                                                         "compile_seconds": 99}}).json["id"]
    rows = app.extensions["costmodel"].samples.rows()
    (row,) = rows.to_dict("records")
    assert row["row_id"] == sample_id
    assert (row["family"], row["status"], row["backend"], row["target"]) == (
        "sample", "ok", "cpu", "")
    assert row["compile_seconds"] == 0.25 and row["cpu_model"] == "x"
    assert "evil" not in row
    assert all(row[f"f_{n}"] == body["features"][n] for n in MODEL_FEATURES)


def test_largest_plausible_sample_is_stored(client):
    response = _post(client, {
        **feature_body(), "compile_seconds": 1e5, "peak_memory_bytes": MEMORY_LIMIT,
        "executable_memory_bytes": 0,
        "environment": {"cpu_count": 4096, "ref_seconds": 100, "xla_flags": "x" * 1024,
                        "k" * 64: True}})
    assert response.status_code == 201, response.json


# Each of these was accepted once and went into the next retrain (issue 21, item 5).
SAMPLE_CASES = {
    "no compile_seconds": ({}, "compile_seconds: required field is missing"),
    "compile_seconds 1e-320": (
        {"compile_seconds": 1e-320},
        "compile_seconds: must be a number >= 0.0001 and <= 100000, got 1e-320"),
    "compile_seconds a week": (
        {"compile_seconds": 604800},
        "compile_seconds: must be a number >= 0.0001 and <= 100000, got 604800"),
    "compile_seconds string": ({"compile_seconds": "1"},
                               "compile_seconds: must be a number, not a string"),
    "compile_seconds null": ({"compile_seconds": None},
                             "compile_seconds: must be a number, not null"),
    "negative rss": ({"compile_seconds": 1, "peak_memory_bytes": -5},
                     f"peak_memory_bytes: must be a number >= 0 and <= {MEMORY_LIMIT:g}, got -5"),
    "rss 1e30": ({"compile_seconds": 1, "peak_memory_bytes": 1e30},
                 f"peak_memory_bytes: must be a number >= 0 and <= {MEMORY_LIMIT:g}, got 1e+30"),
    "executable bytes past memory": (
        {"compile_seconds": 1, "executable_memory_bytes": MEMORY_LIMIT + 1},
        f"executable_memory_bytes: must be a number >= 0 and <= {MEMORY_LIMIT:g}, "
        f"got {MEMORY_LIMIT + 1}"),
    "negative ref_seconds": (
        {"compile_seconds": 1, "environment": {"ref_seconds": -5}},
        "environment.ref_seconds: must be a number >= 0.001 and <= 100, got -5"),
    "cpu_count lots": (
        {"compile_seconds": 1, "environment": {"cpu_count": "lots"}},
        "environment.cpu_count: must be an integer from 1 to 4096, got 'lots'"),
    "cpu_count 2.5": ({"compile_seconds": 1, "environment": {"cpu_count": 2.5}},
                      "environment.cpu_count: must be an integer from 1 to 4096, got 2.5"),
    "cpu_count 0": ({"compile_seconds": 1, "environment": {"cpu_count": 0}},
                    "environment.cpu_count: must be an integer from 1 to 4096, got 0"),
    "cpu_count true": ({"compile_seconds": 1, "environment": {"cpu_count": True}},
                       "environment.cpu_count: must be an integer from 1 to 4096, got True"),
    "cpu_model a number": ({"compile_seconds": 1, "environment": {"cpu_model": 3}},
                           "environment.cpu_model: must be a string, not a number"),
    "100 KB string": ({"compile_seconds": 1, "environment": {"note": "x" * 100_000}},
                      "environment.note: at most 1024 characters, got 100000"),
    "long key": ({"compile_seconds": 1, "environment": {"k" * 65: 1}},
                 "environment: field names are at most 64 characters, one has 65"),
    "65 fields": ({"compile_seconds": 1, "environment": {f"k{i}": i for i in range(65)}},
                  "environment: at most 64 fields"),
    "environment a list": ({"compile_seconds": 1, "environment": []},
                           "environment: must be an object, not an array"),
    "nested environment": ({"compile_seconds": 1, "environment": {"a": {"b": 1}}},
                           "environment.a: must be a string, number, boolean or null, not an "
                           "object"),
    "unknown field": ({"compile_seconds": 1, "family": "x"},
                      "unknown field(s): family; allowed: stablehlo, features, backend, target, "
                      "compile_seconds, peak_memory_bytes, executable_memory_bytes, environment"),
    "feature 1e30": ({"compile_seconds": 1, **feature_body(hlo_ops=1e30)},
                     "features.hlo_ops: must be a number >= 0 and <= 1e+20, got 1e+30"),
}


@pytest.mark.parametrize("extra, description", SAMPLE_CASES.values(), ids=SAMPLE_CASES.keys())
def test_samples_reject_implausible_bodies(client, app, extra, description):
    response = _post(client, {**feature_body(), **extra})
    assert (response.status_code, response.json) == (400, error(400, BAD, description))
    assert app.extensions["costmodel"].samples.count() == 0


# dot_flops 2e21: counts no real program reaches, refused once the text is read
HUGE_DOT = """module {
  func.func public @main(%a: tensor<10000000x10000000xf32>, %b: tensor<10000000x10000000xf32>)
      -> tensor<10000000x10000000xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<10000000x10000000xf32>,
        tensor<10000000x10000000xf32>) -> tensor<10000000x10000000xf32>
    return %0 : tensor<10000000x10000000xf32>
  }
}"""


def test_samples_refuse_text_whose_features_are_implausible(client, app):
    response = _post(client, {"stablehlo": HUGE_DOT, "compile_seconds": 1})
    assert (response.status_code, response.json) == (400, error(
        400, BAD, "features.dot_flops: a sample's features are at most 1e+20, got 2e+21"))
    assert app.extensions["costmodel"].samples.count() == 0


def test_unknown_sample_is_404(client):
    response = client.get("/v1/samples/nope", headers=bearer(SAMPLES_TOKEN))
    assert response.json == error(404, "Not Found", "no sample with id 'nope'")


def test_samples_are_off_without_a_token(tmp_path, model_dir):
    client = create_app(config(tmp_path, model_dir, RETRAIN_TOKEN=TOKEN)).test_client()
    for response in (_post(client, {**feature_body(), "compile_seconds": 1}),
                     client.get("/v1/samples/abc", headers=bearer(SAMPLES_TOKEN))):
        assert (response.status_code, response.json) == (403, error(
            403, "Forbidden", "storing and reading samples over HTTP is disabled on this "
            "server; the operator turns it on by setting COSTMODEL_SAMPLES_TOKEN "
            "(config SAMPLES_TOKEN)"))


@pytest.mark.parametrize("headers", [{}, bearer("wrong"), bearer(TOKEN),
                                     {"Authorization": f"Basic {SAMPLES_TOKEN}"}])
def test_samples_need_their_own_token(client, app, headers):
    sample_id = _post(client, {**feature_body(), "compile_seconds": 1}).json["id"]
    for response in (client.post("/v1/samples", json={**feature_body(), "compile_seconds": 1},
                                 headers=headers),
                     client.get(f"/v1/samples/{sample_id}", headers=headers)):
        assert (response.status_code, response.json) == (401, error(
            401, "Unauthorized", "missing or wrong token: send 'Authorization: Bearer "
            "<token>'"))
    assert app.extensions["costmodel"].samples.count() == 1
    # and the samples token does not start a retrain
    assert client.post("/v1/retrain", headers=bearer(SAMPLES_TOKEN)).status_code == 401


def test_samples_token_from_the_environment_and_distinct_from_retrain():
    environ = {"COSTMODEL_SAMPLES_TOKEN": "samples-env", "COSTMODEL_RETRAIN_TOKEN": "retrain"}
    assert load_config({}, environ)["SAMPLES_TOKEN"] == "samples-env"
    assert load_config({}, {})["SAMPLES_TOKEN"] is None
    with pytest.raises(ValueError, match="SAMPLES_TOKEN must differ from RETRAIN_TOKEN"):
        load_config({"SAMPLES_TOKEN": "same", "RETRAIN_TOKEN": "same"}, {})
    with pytest.raises(ValueError, match="SAMPLES_TOKEN must be a non-empty string"):
        load_config({"SAMPLES_TOKEN": " "}, {})


@pytest.mark.parametrize("path, what", [("/v1/samples/", "sample"),
                                        ("/v1/retrain/", "retrain job")])
def test_ids_the_store_never_made_are_404_without_a_query(client, app, monkeypatch, path, what):
    # PostgreSQL answered a NUL in an id with a DataError (500); SQLite found nothing.
    state = app.extensions["costmodel"]

    def no_query(*args, **kwargs):
        raise AssertionError("the store was queried")

    monkeypatch.setattr(state.samples.db, "connect", no_query)
    monkeypatch.setattr(state.jobs.db, "connect", no_query)
    headers = bearer(SAMPLES_TOKEN if what == "sample" else TOKEN)
    for sent, shown in (("%00", "'\\x00'"), ("ABC", "'ABC'"), ("a" * 65, "'" + "a" * 36 + "..."),
                        ("%E2%80%8B", "'\\u200b'")):
        response = client.get(path + sent, headers=headers)
        assert response.json == error(404, "Not Found", f"no {what} with id {shown}")
