"""Two replicas, one truth: two `costmodel serve` processes on different ports share a
PostgreSQL store and a model folder; a retrain worker promotes a model through the store
and both serve it within MODEL_SYNC_SECONDS, while clients keep predicting on both and
no request fails. PostgreSQL only: it is the store replicas on several hosts share."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest
import stores
from servers import RetrainWorker, Server
from test_api_support import (
    TOKEN,
    bearer,
    config,
    feature_body,
    rows,
    train_artifact,
    wait_for_job,
    write_data,
)

from costmodel.api.db import Database
from costmodel.api.jobs import JobStore

pytestmark = pytest.mark.slow  # starts two servers and a retrain worker on PostgreSQL

ROOT = Path(__file__).resolve().parents[1]
SYNC = 0.5  # MODEL_SYNC_SECONDS
# What a replica adds to SYNC before it serves a promoted model: reading the store and
# loading and verifying the artifact (tens of ms here), with margin for a loaded machine.
LOAD_MARGIN = 1.0


def _bench():
    from conftest import bench_module

    return bench_module("replica_load")


def test_a_promotion_reaches_both_replicas_and_no_request_fails(tmp_path, postgres_url):
    wrong = train_artifact(tmp_path / "wrong", seed=1, scale=30.0)
    data = write_data(tmp_path / "cpu.parquet", rows(30, seed=2))
    with stores.fresh_postgres(postgres_url) as url:
        settings = config(tmp_path, wrong, RETRAIN_TOKEN=TOKEN, TRAINING_DATA=[data],
                          DATABASE_URL=url, RETRAIN_DIR=tmp_path / "shared-models",
                          RETRAIN_RUNNER="worker", MODEL_SYNC_SECONDS=SYNC)
        replicas = [Server(tmp_path, settings, workers=1, name=f"replica-{i}") for i in (0, 1)]
        worker = RetrainWorker(tmp_path, settings)
        load = _bench().ReplicaLoad([r.port for r in replicas], feature_body(),
                                               clients=4, pause=0.01)
        try:
            for replica in replicas:
                replica.wait_ready()
            (old,) = {r.request("GET", "/v1/models")[1]["models"][0]["version"]
                      for r in replicas}
            load.start()
            time.sleep(1.0)
            status, accepted = replicas[0].request("POST", "/v1/retrain", headers=bearer())
            assert status == 202, accepted
            # the job as the other replica reports it: one job table
            job = wait_for_job(lambda j: replicas[1].request(
                "GET", f"/v1/retrain/{j}", headers=bearer())[1], accepted["job"])
            assert job["status"] == "succeeded" and job["swapped"], job
            time.sleep(SYNC + LOAD_MARGIN + 1.0)
        finally:
            load.stop()
            codes = [p.stop() for p in (*replicas, worker)]
        assert codes == [0, 0, 143], [p.output() for p in (*replicas, worker)]
        (promotion,) = JobStore(Database(url)).promotions_after(0)
    new = job["results"][0]["version"]
    promoted_at = datetime.fromisoformat(promotion["created_at"]).timestamp()
    figures = load.summary(promoted_at, old, new)
    print("\nreplica load:", json.dumps(figures))
    assert new != old and figures["failed"] == 0, figures
    for replica in figures["replicas"]:
        assert replica["other_versions"] == [] and replica["old"] > 0 and replica["new"] > 0
        # every request sent later than SYNC (plus loading) after the commit got the new model
        assert replica["last_old_s"] < SYNC + LOAD_MARGIN, figures
        assert replica["first_new_s"] < SYNC + LOAD_MARGIN, figures
        # and none was answered with the new model before the promotion was recorded (one
        # sent a few ms before it and answered after it may be: CI saw -0.003 s sent)
        assert replica["first_new_answered_s"] >= 0, figures

