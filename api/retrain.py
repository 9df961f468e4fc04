"""`POST /v1/retrain` and `GET /v1/retrain/<id>`: enqueue a retrain job and report on it.

Where the job runs is `RETRAIN_RUNNER`'s choice: "thread" (the default, nothing else to
run) runs it in a background thread of the web worker that accepted it; "worker" leaves
it queued in the store for a `costmodel retrain-worker` process (`retrain_worker.py`),
so web workers only enqueue and report. The job's body is `retrain_job.run_job` either way.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from flask import Blueprint, current_app, request, url_for
from werkzeug.exceptions import NotFound

from .auth import require_token
from .db import shown_id
from .errors import json_object
from .validation import parse

log = logging.getLogger("costmodel.api")
bp = Blueprint("retrain", __name__)
# Names the thread a job runs on in a web worker (`api.worker` keeps the worker alive
# until it ends).
THREAD_PREFIX = "costmodel-retrain-"


def authorize() -> None:
    """403 when retraining over HTTP is off, 401 unless the bearer token matches."""
    require_token("RETRAIN_TOKEN", "retraining")


def start(state, scope: dict[str, Any]) -> str:
    """Create a job (409 if one is active), run it in a background thread unless retrain
    workers run jobs; its id."""
    in_thread = state.config["RETRAIN_RUNNER"] == "thread"
    job_id = state.jobs.create(scope, owned=in_thread)
    if in_thread:
        thread = threading.Thread(target=_run_here, args=(state, job_id),
                                  name=f"{THREAD_PREFIX}{job_id}", daemon=True)
        state.threads[job_id] = thread
        thread.start()
    return job_id


def _run_here(state, job_id: str) -> None:
    # imported here: the training stack (scikit-learn, pandas' fits) loads only in a
    # process that runs a job, never in a web worker of RETRAIN_RUNNER=worker
    from .retrain_job import run_claimed

    claimed = state.jobs.claim(job_id)
    if claimed is None:  # failed as an orphan in between: nothing left to run
        log.error("retrain job %s was no longer queued when its thread started", job_id)
        return
    run_claimed(state, claimed)


@bp.post("/v1/retrain")
def start_retrain():
    """Start a retrain job; body optional: `{"backend": ..., "target": ...}` limits it."""
    authorize()
    body = parse("RetrainRequest", json_object() if request.get_data(cache=True) else {})
    scope: dict[str, Any] = {"backend": body.backend, "target": body.target}
    state = current_app.extensions["costmodel"]
    job_id = start(state, scope)
    location = url_for("retrain.job_status", job_id=job_id)
    return {"job": job_id, "status": "queued"}, 202, {"Location": location}


@bp.get("/v1/retrain/<job_id>")
def job_status(job_id: str):
    """Status, progress, scores and whether the model was swapped."""
    authorize()
    job = current_app.extensions["costmodel"].jobs.get(job_id)
    if job is None:
        raise NotFound(f"no retrain job with id {shown_id(job_id)}")
    return job
