"""`POST /v1/retrain`: retrain on shipped data plus stored samples, swap in only if not worse.

A job runs in a background thread of the worker that accepted it. Per backend/target it
holds out the same rows (by a hash of their id) for both models, retrains on the rest,
scores the new and the current model on the held-out rows with `holdout_score`, and
promotes the new artifact only if its score is not worse. The shipped model may have
seen some held-out rows, so the comparison leans towards keeping it: a conservative rule.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import threading
from typing import Any

import pandas as pd
from flask import Blueprint, current_app, request, url_for
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import Forbidden, NotFound, Unauthorized

from costmodel.models import load
from costmodel.training import dataset
from costmodel.training.evaluate import holdout_score
from costmodel.training.fit import retrain, select_rows

from .errors import json_object
from .validation import reject_unknown, target_of

log = logging.getLogger("costmodel.api")
bp = Blueprint("retrain", __name__)


class RetrainError(RuntimeError):
    """A job cannot run: no backend/target has enough rows."""


def authorize() -> None:
    """403 when retraining over HTTP is off, 401 unless the bearer token matches."""
    token = current_app.config["RETRAIN_TOKEN"]
    if token is None:
        raise Forbidden("retraining over HTTP is disabled on this server; the operator turns "
                        "it on by setting COSTMODEL_RETRAIN_TOKEN (config RETRAIN_TOKEN)")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # compare_digest takes time independent of where the strings differ.
    if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("utf-8"), token.encode("utf-8")):
        raise Unauthorized("missing or wrong token: send 'Authorization: Bearer <token>'",
                           www_authenticate=WWWAuthenticate("bearer", {"realm": "costmodel"}))


def training_frame(state) -> pd.DataFrame:
    """Shipped dataset rows plus stored samples, one row per `row_id`."""
    paths = [p for p in state.config["TRAINING_DATA"] if p.exists()]
    frames = [dataset.load(paths)] if paths else []
    frames.append(state.samples.rows())
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["row_id", "status", "backend", "target"])
    data = pd.concat(frames, ignore_index=True, sort=False)
    return data.drop_duplicates("row_id", keep="first").reset_index(drop=True)


def holdout_split(rows: pd.DataFrame, fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, holdout): holdout is the `fraction` of scorable rows with the lowest id hash.

    Hashing the id keeps a row on the same side in every job, so a model promoted by an
    earlier job never trained on a later job's held-out rows.
    """
    seconds = pd.to_numeric(rows["compile_seconds"], errors="coerce")
    scorable = rows[seconds > 0]
    order = scorable["row_id"].map(lambda r: hashlib.sha256(str(r).encode()).hexdigest())
    size = max(1, math.ceil(fraction * len(scorable)))
    held = order.sort_values().index[:size]
    return rows.drop(index=held).reset_index(drop=True), rows.loc[held].reset_index(drop=True)


def _groups(data: pd.DataFrame, scope: dict[str, Any], min_rows: int) -> list[tuple[str, str]]:
    if not len(data) or "compile_seconds" not in data:
        return []
    ok = data[(data["status"] == "ok")
              & (pd.to_numeric(data["compile_seconds"], errors="coerce") > 0)]
    counts = ok.groupby([ok["backend"], ok["target"].fillna("")]).size()
    groups = [key for key, n in counts.items() if n >= min_rows]
    if scope.get("backend") is not None:
        groups = [key for key in groups if key == (scope["backend"], scope["target"])]
    return sorted(groups)


def _score(artifact, holdout: pd.DataFrame) -> float:
    value = float(holdout_score(artifact, holdout))
    return value if math.isfinite(value) else math.inf


def _json_score(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _retrain_group(state, job_id: str, data: pd.DataFrame, key: tuple[str, str]) -> dict:
    backend, target = key
    label = backend + (f"-{target}" if target else "")
    rows = select_rows(data, backend, target)
    train, holdout = holdout_split(rows, float(state.config["HOLDOUT_FRACTION"]))
    out = state.config["RETRAIN_DIR"] / f"{label}-{job_id}"
    retrain(train, backend, target, out, name=f"retrained-{label}")
    new = load(out)  # from disk and verified, exactly as other workers will load it
    current = state.registry.get(backend, target)
    score_new = _score(new, holdout)
    score_current = None if current is None else _score(current, holdout)
    swapped = score_new < math.inf and (score_current is None or score_new <= score_current)
    if swapped:
        promotion = state.jobs.promote(backend, target, out, job_id)
        state.registry.swap(key, new, promotion)
    return {"backend": backend, "target": target, "rows": len(rows), "train_rows": len(train),
            "holdout_rows": len(holdout), "score_new": _json_score(score_new),
            "score_current": None if score_current is None else _json_score(score_current),
            "swapped": bool(swapped), "version": new.version,
            "previous_version": None if current is None else current.version}


def run_job(state, job_id: str, scope: dict[str, Any]) -> None:
    """The body of a retrain job; records every outcome, never raises."""
    jobs = state.jobs
    results: list[dict] = []
    try:
        jobs.update(job_id, status="running", progress=0.0)
        data = training_frame(state)
        min_rows = state.config["RETRAIN_MIN_ROWS"]
        groups = _groups(data, scope, min_rows)
        if not groups:
            raise RetrainError(f"no backend/target in scope {scope} has {min_rows} or more ok "
                               f"rows with compile_seconds ({len(data)} rows in all)")
        for i, key in enumerate(groups):
            results.append(_retrain_group(state, job_id, data, key))
            jobs.update(job_id, progress=(i + 1) / len(groups), results=results)
        status = "succeeded" if any(r["swapped"] for r in results) else "rejected"
        jobs.update(job_id, status=status, progress=1.0, results=results)
    except Exception as exc:  # noqa: BLE001 - a job's failure is reported, not raised
        log.exception("retrain job %s failed", job_id)
        jobs.update(job_id, status="failed", results=results, error=f"{type(exc).__name__}: {exc}")


def start(state, scope: dict[str, Any]) -> str:
    """Create a job (409 if one is active) and run it in a background thread; its id."""
    job_id = state.jobs.create(scope)
    thread = threading.Thread(target=run_job, args=(state, job_id, scope),
                              name=f"costmodel-retrain-{job_id}", daemon=True)
    state.threads[job_id] = thread
    thread.start()
    return job_id


@bp.post("/v1/retrain")
def start_retrain():
    """Start a retrain job; body optional: `{"backend": ..., "target": ...}` limits it."""
    authorize()
    body = json_object() if request.get_data(cache=True) else {}
    reject_unknown(body, ("backend", "target"))
    scope: dict[str, Any] = {"backend": None, "target": None}
    if body.get("backend") is not None or body.get("target") is not None:
        scope["backend"], scope["target"] = target_of(body)
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
        raise NotFound(f"no retrain job with id {job_id!r}")
    return job
