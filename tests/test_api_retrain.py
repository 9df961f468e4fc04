"""Retraining over HTTP: jobs, the not-worse rule, hot swap under load, promotion to workers."""

from __future__ import annotations

import subprocess
import threading
import time

import numpy as np
import pytest
from test_api_support import (
    TOKEN,
    bearer,
    config,
    error,
    feature_body,
    rows,
    stablehlo,
    train_artifact,
    wait_for_job,
    write_data,
)
from threadpoolctl import threadpool_limits

from costmodel.api import create_app
from costmodel.api.retrain import holdout_split
from costmodel.models import load
from costmodel.training.evaluate import holdout_score


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def wrong_model(tmp_path_factory):
    """A real model trained on labels 30x too large: any honest retrain beats it."""
    return train_artifact(tmp_path_factory.mktemp("wrong") / "cpu", seed=1, scale=30.0)


@pytest.fixture(scope="module")
def good_data(tmp_path_factory):
    return write_data(tmp_path_factory.mktemp("data") / "cpu.parquet", rows(30, seed=2))


def _client(tmp_path, model, **overrides):
    app = create_app(config(tmp_path, model, RETRAIN_TOKEN=TOKEN, **overrides))
    return app, app.test_client()


def _job(client):
    def get(job_id):
        response = client.get(f"/v1/retrain/{job_id}", headers=bearer())
        assert response.status_code == 200, response.json
        return response.json
    return get


def _start(client, body=None):
    response = client.post("/v1/retrain", headers=bearer(), json=body) if body is not None \
        else client.post("/v1/retrain", headers=bearer())
    assert response.status_code == 202, response.json
    assert response.headers["Location"] == f"/v1/retrain/{response.json['job']}"
    return response.json["job"]


def test_retrain_swaps_in_a_better_model(tmp_path, wrong_model, good_data):
    app, client = _client(tmp_path, wrong_model, TRAINING_DATA=[good_data])
    old = client.get("/v1/models").json["models"][0]["version"]
    before = client.post("/v1/predict", json={"stablehlo": stablehlo()}).json
    job = wait_for_job(_job(client), _start(client))
    assert job["status"] == "succeeded" and job["swapped"] is True and job["progress"] == 1.0
    (result,) = job["results"]
    assert (result["rows"], result["train_rows"], result["holdout_rows"]) == (30, 24, 6)
    assert result["score_new"] < result["score_current"]
    # both models were scored on the same held-out rows
    _, holdout = holdout_split(rows(30, seed=2), 0.2)
    assert result["score_current"] == holdout_score(load(wrong_model), holdout)
    assert result["score_new"] == holdout_score(load(tmp_path / "retrained" / (
        f"cpu-{job['job']}")), holdout)
    assert job["scores"] == {"cpu": {"new": result["score_new"],
                                     "current": result["score_current"]}}
    models = client.get("/v1/models").json["models"]
    assert [m["version"] for m in models] == [result["version"]] != [old]
    assert models[0]["training_rows"] == 24
    after = client.post("/v1/predict", json={"stablehlo": stablehlo()}).json
    assert after["model_version"] == result["version"]
    assert after["compile_seconds"] < before["compile_seconds"]


def test_retrain_keeps_the_current_model_when_the_new_one_is_worse(tmp_path, good_data):
    # Training rows whose labels are 50x off, held-out rows with the true labels: the
    # new model must lose to a current model trained on true labels.
    data = rows(30, seed=2)
    train, holdout = holdout_split(data, 0.2)
    held = data["row_id"].isin(holdout["row_id"])
    data.loc[~held, "compile_seconds"] *= 50.0
    path = write_data(tmp_path / "misleading.parquet", data)
    current = train_artifact(tmp_path / "current", seed=2, n=30)
    app, client = _client(tmp_path, current, TRAINING_DATA=[path])
    job = wait_for_job(_job(client), _start(client, {"backend": "cpu"}))
    assert job["status"] == "rejected" and job["swapped"] is False
    (result,) = job["results"]
    assert result["score_new"] > result["score_current"]
    assert client.get("/v1/models").json["models"][0]["version"] == load(current).version


def test_retrain_uses_stored_samples_with_the_shipped_rows(tmp_path, wrong_model, good_data):
    app, client = _client(tmp_path, wrong_model, TRAINING_DATA=[good_data])
    data = rows(12, seed=3)
    for record in data.to_dict("records"):
        body = feature_body()
        body["features"] = {k: record[f"f_{k}"] for k in body["features"]}
        response = client.post("/v1/samples", json={
            **body, "compile_seconds": record["compile_seconds"],
            "peak_rss_bytes": record["peak_rss_bytes"],
            "executable_memory_bytes": record["executable_memory_bytes"]})
        assert response.status_code == 201
    job = wait_for_job(_job(client), _start(client))
    assert job["status"] in ("succeeded", "rejected"), job
    (result,) = job["results"]
    assert (result["rows"], result["holdout_rows"]) == (42, 9)


def test_retrain_without_enough_rows_fails_with_a_reason(tmp_path, wrong_model):
    app, client = _client(tmp_path, wrong_model)
    job = wait_for_job(_job(client), _start(client))
    assert job["status"] == "failed" and job["swapped"] is False
    assert job["error"] == ("RetrainError: no backend/target in scope {'backend': None, "
                            "'target': None} has 10 or more ok rows with compile_seconds "
                            "(0 rows in all)")


def test_one_job_at_a_time_and_orphans_are_failed(tmp_path, wrong_model, good_data):
    app, client = _client(tmp_path, wrong_model, TRAINING_DATA=[good_data])
    jobs = app.extensions["costmodel"].jobs
    running = jobs.create({"backend": None, "target": None})
    jobs.update(running, status="running")
    response = client.post("/v1/retrain", headers=bearer())
    assert (response.status_code, response.json) == (409, error(
        409, "Conflict", f"retrain job {running} is still running; one job at a time"))
    # the same job left behind by a worker that died
    with jobs.db.connect() as conn:
        conn.execute("UPDATE jobs SET pid = ? WHERE id = ?", (_dead_pid(), running))
    job_id = _start(client)
    assert _job(client)(running)["status"] == "failed"
    assert _job(client)(running)["error"] == "interrupted: the worker running it exited"
    wait_for_job(_job(client), job_id)


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_retrain_rejects_a_bad_scope(tmp_path, wrong_model):
    app, client = _client(tmp_path, wrong_model)
    response = client.post("/v1/retrain", headers=bearer(), json={"backend": "tpu"})
    assert response.status_code == 400
    assert response.json["description"].startswith("unknown backend 'tpu'")
    response = client.post("/v1/retrain", headers=bearer(), data="x",
                           content_type="text/plain")
    assert response.status_code == 415


def test_other_workers_and_restarts_pick_up_the_promoted_model(tmp_path, wrong_model,
                                                               good_data):
    app_a, client_a = _client(tmp_path, wrong_model, TRAINING_DATA=[good_data])
    app_b, client_b = _client(tmp_path, wrong_model, TRAINING_DATA=[good_data])
    old = client_b.get("/v1/models").json["models"][0]["version"]
    job = wait_for_job(_job(client_a), _start(client_a))
    new = job["results"][0]["version"]
    assert job["swapped"] and new != old
    # worker B never ran the job: it finds the promotion on its next request
    assert client_b.get("/v1/models").json["models"][0]["version"] == new
    assert _job(client_b)(job["job"])["status"] == "succeeded"
    _, restarted = _client(tmp_path, wrong_model)
    assert restarted.get("/v1/models").json["models"][0]["version"] == new
    # a model configured after the promotion wins over it at the next start
    time.sleep(1.1)  # manifests record creation to the second
    newer = train_artifact(tmp_path / "newer", seed=4)
    _, redeployed = _client(tmp_path, newer)
    assert redeployed.get("/v1/models").json["models"][0]["version"] == load(newer).version


def test_no_request_fails_while_a_model_is_swapped(tmp_path, wrong_model, good_data):
    app, client = _client(tmp_path, wrong_model, TRAINING_DATA=[good_data])
    old = client.get("/v1/models").json["models"][0]["version"]
    bodies = [{"stablehlo": stablehlo(3)}, feature_body()]
    failures: list = []
    versions: list[str] = []
    done = threading.Event()

    def hammer(seed: int) -> None:
        local = app.test_client()
        rng = np.random.default_rng(seed)
        deadline = time.monotonic() + 120
        after_done = 0
        while after_done < 20 and time.monotonic() < deadline:
            response = local.post("/v1/predict", json=bodies[rng.integers(2)])
            if response.status_code != 200:
                failures.append((response.status_code, response.json))
            else:
                versions.append(response.json["model_version"])
            after_done += done.is_set()

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        job = wait_for_job(_job(client), _start(client))
    finally:
        done.set()
        for thread in threads:
            thread.join(180)
    new = job["results"][0]["version"]
    assert job["swapped"], job
    assert failures == []
    assert set(versions) == {old, new}
    assert versions[-1] == new
