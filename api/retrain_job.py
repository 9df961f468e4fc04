"""The body of a retrain job: shipped data plus stored samples, a candidate per
backend/target, promoted only if better.

Per backend/target it counts each sent program once and caps what one source brings
(`training.evaluation.sample_groups`), drops stored samples that are far from both the
current model and their neighbours, holds out rows by a hash of their id, fits a candidate on the rest and
compares it with the current model on the held-out rows on fair ground
(`training.promotion.compare`). A better candidate is written beside RETRAIN_DIR's models
under a partial name, renamed into place once complete, and then promoted: the store
records the promotion and the job's results in one transaction, and only a recorded
promotion is ever served. A job killed at any point leaves the served model as it was
(or promoted whole) and no half-written artifact under a served name; the next job
removes any candidate it left that no promotion names.

Whoever runs a job has claimed it (`JobStore.claim`) and heartbeats while it runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costmodel.features import Placement
from costmodel.models import load
from costmodel.training.evaluation.interval_widening import with_shipped_widening
from costmodel.training.evaluation.promotion import compare, holdout_split, suspect_rows
from costmodel.training.evaluation.sample_groups import weigh_samples
from costmodel.training.fitting.fit import select_rows, train
from costmodel.training.fitting.publish import save
from costmodel.training.store import dataset

from .jobs import JobLost
from .samples import FAMILY

log = logging.getLogger("costmodel.api")
# Beside a promoted artifact: the ids of the rows it trained on, so that a later job
# knows whether the model saw its held-out rows.
TRAINING_ROWS_FILE = "training_rows.json"
PARTIAL = ".partial-"  # an artifact being written; never promoted under this name
STOPPED = "interrupted: the worker running it was stopped"


class RetrainError(RuntimeError):
    """A job cannot run: no backend/target has enough rows."""


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


def _screened(rows: pd.DataFrame, current) -> tuple[pd.DataFrame, dict[str, int]]:
    """Rows with each sent program counted once, no source over its cap, and no suspect
    sample; and counts of what was done (samples, sample_groups, capped_groups,
    dropped_samples)."""
    samples = (rows["family"] == FAMILY).to_numpy() if "family" in rows else np.zeros(
        len(rows), bool)
    weighed = weigh_samples(rows, samples)
    rows = weighed.rows
    counts = {"samples": weighed.samples, "sample_groups": weighed.groups,
              "capped_groups": weighed.capped, "dropped_samples": 0}
    if current is None or not weighed.samples:
        return rows, counts
    drop = suspect_rows(rows, (rows["family"] == FAMILY).to_numpy(), current.predictor)
    counts["dropped_samples"] = int(drop.sum())
    return rows[~drop].reset_index(drop=True), counts


def _trusted(holdout: pd.DataFrame) -> np.ndarray:
    """Which held-out rows nobody sent: the shipped ones."""
    if "family" not in holdout:
        return np.ones(len(holdout), bool)
    return (holdout["family"] != FAMILY).to_numpy()


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
    """Write the promoted candidate and its training row ids under a partial name, then
    rename it to `out` whole; nothing is left on failure."""
    backend, target = key
    partial = out.with_name(PARTIAL + out.name)
    try:
        predictor, widening = with_shipped_widening(estimator, backend, target)
        save(predictor, partial, backend=backend, target=target, data=train_rows,
             metrics={"promotion": verdict.to_dict(), "interval_widening": widening}, name=name)
        (partial / TRAINING_ROWS_FILE).write_text(json.dumps(
            {"row_ids": train_rows["row_id"].astype(str).tolist()}))
        os.replace(partial, out)
        return load(out)  # from disk and verified, exactly as other processes will load it
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        raise


def _candidate_path(state, label: str, job_id: str) -> Path:
    # The job id last in the name: _remove_leftovers reads it back.
    return state.config["RETRAIN_DIR"] / f"{label}-{job_id}"


def _remove_leftovers(state) -> None:
    """Artifacts killed jobs left: half-written ones (a partial name), and complete ones
    whose job ended before it recorded their promotion (killed between the rename and
    the commit). Only one job runs at a time, and it is ours; other folders are kept."""
    folder = state.config["RETRAIN_DIR"]
    if not folder.is_dir():
        return
    partial = list(folder.glob(PARTIAL + "*"))
    named = [(path.name.rpartition("-")[2], path) for path in folder.iterdir()
             if path.is_dir() and path not in partial]
    for path in partial + state.jobs.abandoned(named):
        log.info("removing %s, left by an interrupted retrain", path)
        shutil.rmtree(path, ignore_errors=True)


def _retrain_group(state, job_id: str, data: pd.DataFrame, key: tuple[str, str],
                   done: list[dict]) -> dict:
    backend, target = key
    label = Placement(backend, target).label
    current = state.registry.get(backend, target)
    rows, counts = _screened(select_rows(data, backend, target), current)
    train_rows, holdout = holdout_split(rows, float(state.config["HOLDOUT_FRACTION"]))
    candidate = train(train_rows, backend, target, **state.config["RETRAIN_PARAMS"])
    verdict = compare(candidate, None if current is None else current.predictor, train_rows,
                      holdout, None if current is None else _known_rows(current, rows),
                      backend, target, trusted=_trusted(holdout))
    result = {"backend": backend, "target": target, "rows": len(rows),
              "train_rows": len(train_rows), **counts,
              **verdict.to_dict(), "version": None,
              "previous_version": None if current is None else current.version}
    if verdict.promote:
        out = _candidate_path(state, label, job_id)
        new = _save_candidate(candidate, train_rows, out, key, f"retrained-{label}", verdict)
        result["version"] = new.version
        promotion = state.jobs.promote(backend, target, out, job_id, [*done, result])
        state.registry.swap(key, new, promotion)
    return result


def run_job(state, job_id: str, scope: dict[str, Any]) -> None:
    """The body of a claimed retrain job; records every outcome, never raises an Exception."""
    jobs = state.jobs
    results: list[dict] = []
    try:
        jobs.update(job_id, progress=0.0)
        # Compare with what the replicas serve now, whoever promoted it.
        state.sync_models(every=0.0)
        _remove_leftovers(state)
        data = training_frame(state)
        min_rows = state.config["RETRAIN_MIN_ROWS"]
        groups = _groups(data, scope, min_rows)
        if not groups:
            raise RetrainError(f"no backend/target in scope {scope} has {min_rows} or more ok "
                               f"rows with compile_seconds ({len(data)} rows in all)")
        for i, key in enumerate(groups):
            results.append(_retrain_group(state, job_id, data, key, results))
            jobs.update(job_id, progress=(i + 1) / len(groups), results=results)
        status = "succeeded" if any(r["swapped"] for r in results) else "rejected"
        jobs.update(job_id, status=status, progress=1.0, results=results)
    except JobLost:
        log.error("retrain job %s was failed as orphaned while it ran; its outcome is "
                  "dropped", job_id)
    except Exception as exc:  # noqa: BLE001 - a job's failure is reported, not raised
        log.exception("retrain job %s failed", job_id)
        jobs.update(job_id, status="failed", results=results, error=f"{type(exc).__name__}: {exc}")


def run_claimed(state, claimed: dict[str, Any]) -> None:
    """Run a job this process claimed, heartbeating until it ends.

    Stopped by SystemExit or KeyboardInterrupt (a retrain worker's SIGTERM or Ctrl-C), it
    marks the job failed and re-raises; killed outright, the heartbeat stops and the next
    process to look (`JobStore._fail_orphans`) marks it failed.
    """
    job_id = claimed["id"]
    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(state.jobs, job_id, stop),
                            name=f"costmodel-heartbeat-{job_id}", daemon=True)
    beat.start()
    try:
        run_job(state, job_id, claimed["scope"])
    except BaseException:
        with contextlib.suppress(JobLost):
            state.jobs.update(job_id, status="failed", error=STOPPED)
        raise
    finally:
        stop.set()
        beat.join()


def _heartbeat(jobs, job_id: str, stop: threading.Event) -> None:
    # Four beats per stale period: one lost to a busy store does not orphan the job.
    while not stop.wait(jobs.stale_seconds / 4):
        try:
            jobs.heartbeat(job_id)
        except Exception:  # noqa: BLE001 - the next beat may get through
            log.exception("heartbeat of retrain job %s failed", job_id)
