"""Measured compiles sent by users: validated, stored in the service store, and served as
dataset rows."""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from datetime import datetime, timezone
from typing import Any

import pandas as pd
import psutil
import sqlalchemy as sa
from flask import Blueprint, current_app, request, url_for
from werkzeug.exceptions import NotFound

from costmodel.features import ALL_FEATURES, Features
from costmodel.measure.rows import make_row

from .auth import require_token
from .db import Database, shown_id, well_formed_id
from .errors import ValidationError, json_object
from .sample_schemas import MAX_SAMPLE_FEATURE, MEMORY_MARGIN, ROW_ENVIRONMENT
from .tables import samples
from .validation import parse, program_features

LABEL_FIELDS = ("compile_seconds", "peak_rss_bytes", "executable_memory_bytes")  # stored
# the same labels as the API names them: as predictions name them (host memory is the
# peak RSS growth while compiling, executable memory what JAX reports for the device)
API_LABELS = {"compile_seconds": "compile_seconds", "peak_memory_bytes": "peak_rss_bytes",
              "executable_memory_bytes": "executable_memory_bytes"}
FAMILY = "sample"

bp = Blueprint("samples", __name__)


class SampleStore:
    """Append-only store of measured compiles in the service database.

    Example:
        >>> store = SampleStore(Database(path))
        >>> sample_id = store.add(features, {"compile_seconds": 2.5}, {}, "features", digest)
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, features: Features, labels: dict[str, float | None],
            environment: dict[str, Any], source: str, program_sha256: str,
            client: str | None = None) -> str:
        sample_id = uuid.uuid4().hex
        values = {n: _json_number(features.values[n]) for n in ALL_FEATURES}
        with self.db.connect() as conn:
            conn.execute(samples.insert().values(
                id=sample_id, created_at=_now(), backend=features.backend,
                target=features.target, schema_version=features.schema_version, source=source,
                program_sha256=program_sha256, features=json.dumps(values),
                compile_seconds=labels["compile_seconds"],
                peak_rss_bytes=labels.get("peak_rss_bytes"),
                executable_memory_bytes=labels.get("executable_memory_bytes"),
                environment=json.dumps(environment, sort_keys=True), client=client))
        return sample_id

    def count(self) -> int:
        with self.db.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(samples)).scalar())

    def get(self, sample_id: str) -> dict[str, Any] | None:
        if not well_formed_id(sample_id):
            return None
        with self.db.connect() as conn:
            row = conn.execute(sa.select(samples).where(samples.c.id == sample_id)).first()
        return None if row is None else _decoded(row)

    def rows(self) -> pd.DataFrame:
        """Every sample as a dataset row (status ok, family "sample"), schema-compatible only."""
        from costmodel.features import SCHEMA_VERSION

        with self.db.connect() as conn:
            stored = conn.execute(sa.select(samples).where(
                samples.c.schema_version == SCHEMA_VERSION).order_by(
                samples.c.created_at, samples.c.id)).all()
        return pd.DataFrame([_dataset_row(_decoded(row)) for row in stored])


def _decoded(row: sa.Row) -> dict[str, Any]:
    out = dict(row._mapping)
    out["features"] = json.loads(out["features"])
    out["environment"] = json.loads(out["environment"])
    return out


def _dataset_row(sample: dict[str, Any]) -> dict[str, Any]:
    features = {n: (math.nan if v is None else v) for n, v in sample["features"].items()}
    result = {"status": "ok", "features": features,
              **{name: sample[name] for name in LABEL_FIELDS},
              # one measurement: its repeats are itself, as the harness would record them
              "compile_seconds_all": [sample["compile_seconds"]], "repeats": 1}
    environment = {k: v for k, v in sample["environment"].items() if k in ROW_ENVIRONMENT}
    row = make_row(FAMILY, {"program_sha256": sample["program_sha256"]},
                           sample["backend"], sample["target"], result, environment)
    # The stored id, so retraining twice sees the same rows (and the same holdout split).
    row["row_id"] = sample["id"]
    row["measured_at"] = sample["created_at"]
    row["client"] = sample.get("client") or ""
    return row


def _json_number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def max_sample_bytes() -> float:
    """The largest memory label a sample may carry: this host's memory times the margin."""
    return float(psutil.virtual_memory().total * MEMORY_MARGIN)


def _check_sample_features(features: Features) -> None:
    # what SampleFeatureVector says of a vector, for the features of a module's text
    for name, value in features.values.items():
        if value > MAX_SAMPLE_FEATURE:  # NaN (an absent jaxpr feature) compares False
            raise ValidationError(f"features.{name}: a sample's features are at most "
                                  f"{MAX_SAMPLE_FEATURE:g}, got {value:g}")


@bp.post("/v1/samples")
def add_sample():
    """Store one measured compile (samples token); 201 with its id."""
    require_token("SAMPLES_TOKEN", "storing and reading samples")
    body = json_object()
    sample = parse("SampleRequest", body)
    labels = {stored: getattr(sample, api) for api, stored in API_LABELS.items()}
    environment = ({} if sample.environment is None
                   else sample.environment.model_dump(exclude_unset=True))
    features = program_features(sample)
    _check_sample_features(features)
    source = "features" if sample.stablehlo is None else "stablehlo"
    # the vector as sent (not as validated), so a program's digest stays what it was
    program = sample.stablehlo if source == "stablehlo" else json.dumps(
        body["features"], sort_keys=True)
    digest = hashlib.sha256(program.encode("utf-8", "surrogatepass")).hexdigest()
    store: SampleStore = current_app.extensions["costmodel"].samples
    sample_id = store.add(features, labels, environment, source, digest,
                          client=request.remote_addr)
    location = url_for("samples.get_sample", sample_id=sample_id)
    return {"id": sample_id, "backend": features.backend, "target": features.target}, 201, {
        "Location": location}


@bp.get("/v1/samples/<sample_id>")
def get_sample(sample_id: str):
    """One stored sample (samples token): features, labels, environment, when received."""
    require_token("SAMPLES_TOKEN", "storing and reading samples")
    store: SampleStore = current_app.extensions["costmodel"].samples
    sample = store.get(sample_id)
    if sample is None:
        raise NotFound(f"no sample with id {shown_id(sample_id)}")
    labels = {api: sample.pop(stored) for api, stored in API_LABELS.items()}
    sample.pop("client", None)  # the sender's address is for the retrain screen alone
    return {**sample, **labels}
