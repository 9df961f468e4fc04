"""`POST /v1/retrain`: retrain on shipped data plus stored samples, promote only if better.

A job runs in a background thread of the worker that accepted it. Per backend/target it
drops stored samples that are far from both the current model and their neighbours,
holds out rows by a hash of their id, fits a candidate on the rest and compares it with
the current model on the held-out rows on fair ground (`training.promotion.compare`).
A better candidate is saved and promoted; a rejected one never reaches the disk.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from flask import Blueprint, current_app, request, url_for
from werkzeug.exceptions import NotFound

from costmodel.features import Placement
from costmodel.models import load
from costmodel.training.evaluation.promotion import compare, holdout_split, suspect_rows
from costmodel.training.fitting.fit import select_rows, train
from costmodel.training.fitting.publish import save
from costmodel.training.store import dataset

from .auth import require_token
from .errors import json_object
from .samples import FAMILY
from .validation import parse

log = logging.getLogger("costmodel.api")
bp = Blueprint("retrain", __name__)
# Beside a promoted artifact: the ids of the rows it trained on, so that a later job
# knows whether the model saw its held-out rows.
TRAINING_ROWS_FILE = "training_rows.json"


class RetrainError(RuntimeError):
    """A job cannot run: no backend/target has enough rows."""


def authorize() -> None:
    """403 when retraining over HTTP is off, 401 unless the bearer token matches."""
    require_token("RETRAIN_TOKEN", "retraining")


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


def _screened(rows: pd.DataFrame, current) -> tuple[pd.DataFrame, int, int]:
    """(rows without suspect samples, samples considered, samples dropped)."""
    samples = (rows["family"] == FAMILY).to_numpy() if "family" in rows else np.zeros(
        len(rows), bool)
    if current is None or not samples.any():
        return rows, int(samples.sum()), 0
    drop = suspect_rows(rows, samples, current.predictor)
    return rows[~drop].reset_index(drop=True), int(samples.sum()), int(drop.sum())


def _trained_rows(artifact) -> set[str] | None:
    """Row ids a model promoted by an earlier job trained on; None when unknown."""
    path = Path(artifact.path) / TRAINING_ROWS_FILE
    try:
        return set(json.loads(path.read_text())["row_ids"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _known_rows(artifact, rows: pd.DataFrame) -> set[str]:
    """Rows the current model knew: recorded ones, else the shipped (non-sample) rows."""
    recorded = _trained_rows(artifact)
    if recorded is not None:
        return recorded
    return set(rows.loc[rows["family"] != FAMILY, "row_id"].astype(str))


def _save_candidate(estimator, train_rows: pd.DataFrame, out: Path, key: tuple[str, str],
                    name: str, verdict):
    """Write the promoted candidate and its training row ids; nothing is left on failure."""
    backend, target = key
    try:
        save(estimator, out, backend=backend, target=target, data=train_rows,
             metrics={"promotion": verdict.to_dict()}, name=name)
        (out / TRAINING_ROWS_FILE).write_text(json.dumps(
            {"row_ids": train_rows["row_id"].astype(str).tolist()}))
        return load(out)  # from disk and verified, exactly as other workers will load it
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)
        raise


def _retrain_group(state, job_id: str, data: pd.DataFrame, key: tuple[str, str]) -> dict:
    backend, target = key
    label = Placement(backend, target).label
    current = state.registry.get(backend, target)
    rows, samples, dropped = _screened(select_rows(data, backend, target), current)
    train_rows, holdout = holdout_split(rows, float(state.config["HOLDOUT_FRACTION"]))
    candidate = train(train_rows, backend, target, **state.config["RETRAIN_PARAMS"])
    verdict = compare(candidate, None if current is None else current.predictor, train_rows,
                      holdout, None if current is None else _known_rows(current, rows),
                      backend, target)
    version = None
    if verdict.promote:
        out = state.config["RETRAIN_DIR"] / f"{label}-{job_id}"
        new = _save_candidate(candidate, train_rows, out, key, f"retrained-{label}", verdict)
        promotion = state.jobs.promote(backend, target, out, job_id)
        state.registry.swap(key, new, promotion)
        version = new.version
    return {"backend": backend, "target": target, "rows": len(rows),
            "train_rows": len(train_rows), "samples": samples, "dropped_samples": dropped,
            **verdict.to_dict(), "version": version,
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
        raise NotFound(f"no retrain job with id {job_id!r}")
    return job
