"""`costmodel retrain-worker`: web workers only enqueue, a separate process runs the job,
and `kill -9` of that process half way leaves the served model and the job table
consistent; a rerun succeeds. On SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import signal
import time

import pytest
from servers import RetrainWorker
from test_api_support import TOKEN, bearer, config

from costmodel.api import create_app
from costmodel.api.jobs import DIED
from costmodel.api.retrain_job import PARTIAL
from costmodel.api.retrain_worker import run_worker

pytestmark = pytest.mark.slow  # starts retrain-worker processes and kills them


@pytest.fixture
def service(tmp_path, store, wrong_model, good_data):
    """(configuration, test client) of a web worker that leaves jobs to retrain workers."""
    settings = config(tmp_path, wrong_model, RETRAIN_TOKEN=TOKEN, TRAINING_DATA=[good_data],
                      RETRAIN_RUNNER="worker")
    return settings, create_app(settings).test_client()


def _version(client) -> str:
    return client.get("/v1/models").json["models"][0]["version"]


def _job(client, job_id: str) -> dict:
    response = client.get(f"/v1/retrain/{job_id}", headers=bearer())
    assert response.status_code == 200, response.json
    return response.json


def _enqueue(client) -> str:
    response = client.post("/v1/retrain", headers=bearer())
    assert response.status_code == 202, response.json
    return response.json["job"]


def _wait(predicate, what: str, worker=None, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if worker is not None and worker.process.poll() is not None:
            raise AssertionError(f"worker exited while waiting for {what}: {worker.output()}")
        time.sleep(0.05)
    raise TimeoutError(f"no {what} after {timeout} s")


# What a kill leaves: the candidate complete under its partial name, or renamed into
# place but its promotion not yet recorded. Either way it must not outlive the job.
LEFT = {"save": PARTIAL + "cpu-{job}", "promote": "cpu-{job}"}


@pytest.mark.parametrize("killed_at", LEFT)
def test_kill_9_mid_job_keeps_the_served_model_and_a_rerun_succeeds(tmp_path, service,
                                                                    killed_at):
    settings, client = service
    left = LEFT[killed_at]
    old = _version(client)
    job_id = _enqueue(client)
    time.sleep(0.3)
    assert _job(client, job_id)["status"] == "queued"  # the web worker only enqueued it

    hang = tmp_path / "candidate-written"
    worker = RetrainWorker(tmp_path, settings, hang_file=hang, hang_at=killed_at)
    candidate = _wait(lambda: hang.exists() and hang.read_text(), "candidate", worker)
    assert os.path.basename(candidate) == left.format(job=job_id)
    assert _job(client, job_id)["status"] == "running"
    os.kill(worker.process.pid, signal.SIGKILL)
    assert worker.process.wait(30) == -signal.SIGKILL

    # Nothing was promoted: every worker serves the model it served.
    assert _version(client) == old
    assert create_app(settings).test_client().get("/v1/models").json["models"][0][
        "version"] == old
    assert sorted(p.name for p in settings["RETRAIN_DIR"].iterdir()) == [left.format(job=job_id)]

    # Polled, the job reads failed at once, though no worker is left to notice.
    failed = _job(client, job_id)
    assert (failed["status"], failed["error"], failed["swapped"]) == ("failed", DIED, False)
    assert run_worker(settings, once=True) == 0

    rerun = _enqueue(client)
    assert run_worker(settings, once=True) == 1
    done = _job(client, rerun)
    assert done["status"] == "succeeded" and done["swapped"], done
    new = done["results"][0]["version"]
    assert new != old and _version(client) == new
    # the killed job's candidate is gone, the rerun's is in place
    assert sorted(p.name for p in settings["RETRAIN_DIR"].iterdir()) == [f"cpu-{rerun}"]


def test_sigterm_fails_the_running_job_and_the_worker_exits(tmp_path, service):
    settings, client = service
    job_id = _enqueue(client)
    hang = tmp_path / "candidate-written"
    worker = RetrainWorker(tmp_path, settings, hang_file=hang)
    _wait(hang.exists, "candidate", worker)
    assert worker.stop() == 128 + signal.SIGTERM
    job = _job(client, job_id)
    assert (job["status"], job["error"]) == ("failed", "interrupted: the worker running it was "
                                                       "stopped")
    assert _job(client, _enqueue(client))["status"] == "queued"  # nothing blocks the next job
