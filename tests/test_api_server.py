"""End to end: the real gunicorn server (two workers) on a loopback port, spoken to over HTTP."""

from __future__ import annotations

import http.client
import json
import time

import pytest
from servers import HOST, READ_TIMEOUT, Server
from test_api_support import (
    SAMPLES_TOKEN,
    TOKEN,
    X,
    bearer,
    feature_body,
    rows,
    stablehlo,
    train_artifact,
    unrolled,
    wait_for_job,
    write_data,
)

import costmodel
from costmodel.models import load

pytestmark = pytest.mark.slow  # starts gunicorn servers


def _faults():
    """bench/api_faults.py: its hostile requests, raw sender and /healthz probe."""
    from conftest import bench_module

    return bench_module("api_faults")


faults = _faults()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return train_artifact(tmp_path_factory.mktemp("model") / "cpu", seed=1, scale=30.0)


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_dir, module_store):
    """The service on each store (conftest's `module_store`): every test here runs twice."""
    tmp = tmp_path_factory.mktemp("server")
    data = write_data(tmp / "cpu.parquet", rows(30, seed=2))
    database = {} if module_store[1] is None else {"DATABASE_URL": module_store[1]}
    server = Server(tmp, {**database,
        "SAMPLES_DB": str(tmp / "samples.sqlite3"), "RETRAIN_DIR": str(tmp / "retrained"),
        "MODEL_PATHS": {"cpu": str(model_dir)}, "TRAINING_DATA": [str(data)],
        "RETRAIN_TOKEN": TOKEN, "SAMPLES_TOKEN": SAMPLES_TOKEN, "RETRAIN_MIN_ROWS": 10,
        "MODEL_SYNC_SECONDS": 0.5})
    try:
        server.wait_ready()
        yield server
    finally:
        assert server.stop() == 0, server.output()


def test_serves_predictions_identical_to_the_library(server, model_dir):
    text = costmodel.features.lower(unrolled(4), X)[1].as_text()
    status, body = server.request("POST", "/v1/predict", {"stablehlo": text})
    assert status == 200
    assert body == {"predictions": [costmodel.lower(unrolled(4), X).predict(
        backend="cpu", model=load(model_dir)).to_dict()]}
    status, batch = server.request("POST", "/v1/predict", {"instances": [feature_body()] * 3})
    assert status == 200 and len(batch["predictions"]) == 3


def test_errors_over_http(server):
    assert server.request("POST", "/v1/predict", {"features": {}})[0] == 400
    assert server.request("POST", "/v1/predict", {"stablehlo": "x"},
                          {"Content-Type": "text/plain"})[0] == 415
    status, body = server.request("GET", "/v1/predict")
    assert (status, body["name"]) == (405, "Method Not Allowed")


def test_oversized_body_is_413_before_it_is_read(server):
    conn = http.client.HTTPConnection(HOST, server.port, timeout=30)
    conn.putrequest("POST", "/v1/predict")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(9 * 2**20))
    conn.endheaders(b'{"stablehlo": "')
    response = conn.getresponse()
    assert response.status == 413
    assert json.loads(response.read())["name"] == "Request Entity Too Large"
    conn.close()


def test_deeply_nested_module_does_not_kill_a_worker(server):
    # 20000 nested regions overflow the MLIR parser's stack: the worker would segfault.
    text = "module {" * 20000 + "}" * 20000
    status, body = server.request("POST", "/v1/predict", {"stablehlo": text})
    assert (status, body["description"]) == (
        400, "stablehlo: nests 20000 levels deep; at most 256 are accepted")
    assert server.request("GET", "/healthz") == (200, {"status": "ok"})


HOSTILE = ("escaped quotes 1 MB", "lone surrogate in field name", "duplicate keys",
           "chunked over the limit", "bad chunk size", "both Content-Length and chunked",
           "URL of 10 KB", "200 headers", "header of 20 KB", "malformed request line",
           "NUL in module", "invalid UTF-8 bytes", "xchunked transfer encoding",
           "affine-map stack bomb", "%00 sample id", "%00 retrain id", "schema_version 17.0",
           "host_cpu_count 10**400", "1 MB unknown key")


def test_hostile_requests_get_json_4xx_and_no_worker_dies(server):
    kinds = faults._kinds()
    answers = {}
    for name in HOSTILE:
        status, body = faults.send(server.port, kinds[name]())
        answers[name] = (status, json.loads(body)["code"])
    assert answers == {
        "escaped quotes 1 MB": (400, 400), "lone surrogate in field name": (400, 400),
        "duplicate keys": (400, 400), "chunked over the limit": (413, 413),
        "bad chunk size": (400, 400), "both Content-Length and chunked": (400, 400),
        "URL of 10 KB": (414, 414), "200 headers": (431, 431), "header of 20 KB": (431, 431),
        "malformed request line": (400, 400), "NUL in module": (400, 400),
        "invalid UTF-8 bytes": (400, 400), "xchunked transfer encoding": (400, 400),
        "affine-map stack bomb": (400, 400), "%00 sample id": (401, 401),
        "%00 retrain id": (401, 401), "schema_version 17.0": (400, 400),
        "host_cpu_count 10**400": (400, 400), "1 MB unknown key": (400, 400)}
    assert faults.worker_boots(server.log.read_text()) == 2


def test_slow_clients_get_408_and_do_not_stall_health_checks(server):
    # Before: two clients that stopped half way held both sync workers for 60 s.
    probe = faults.HealthProbe(server.port, every=0.05)
    probe.start()
    started = time.monotonic()
    slow = faults.slow_clients(server.port, 8, wait_s=30)
    waited = time.monotonic() - started
    health = probe.stop()
    assert slow["answers"] == {"408": 8} and slow["json_error_bodies"] == 8
    assert READ_TIMEOUT <= waited < READ_TIMEOUT + 5
    assert health["failures"] == 0 and health["count"] >= 10
    assert health["max_ms"] < 1000


def test_samples_and_retrain_across_workers(server):
    samples = bearer(SAMPLES_TOKEN)
    status, created = server.request("POST", "/v1/samples",
                                     {"stablehlo": stablehlo(3), "compile_seconds": 0.2},
                                     headers=samples)
    assert status == 201
    assert server.request("GET", f"/v1/samples/{created['id']}", headers=samples)[0] == 200
    assert server.request("GET", f"/v1/samples/{created['id']}")[0] == 401
    old = server.request("GET", "/v1/models")[1]["models"][0]["version"]
    assert server.request("POST", "/v1/retrain")[0] == 401
    status, accepted = server.request("POST", "/v1/retrain", headers=bearer())
    assert status == 202

    def get(job_id):
        # Either worker may answer: both must know the job.
        status, job = server.request("GET", f"/v1/retrain/{job_id}", headers=bearer())
        assert status == 200, job
        return job

    job = wait_for_job(get, accepted["job"])
    assert job["status"] == "succeeded" and job["swapped"], job
    new = job["results"][0]["version"]
    assert new != old
    time.sleep(0.6)  # MODEL_SYNC_SECONDS: the other worker looks for promotions this often
    for _ in range(8):
        assert server.request("GET", "/v1/models")[1]["models"][0]["version"] == new
        served = server.request("POST", "/v1/predict", feature_body())[1]["predictions"]
        assert served[0]["model_version"] == new
