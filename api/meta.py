"""Health, readiness and model metadata: what an orchestrator and a client ask first."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app
from werkzeug.exceptions import ServiceUnavailable

from costmodel.features import Placement
from costmodel.models import Artifact
from costmodel.models.predictor import jsonable

bp = Blueprint("meta", __name__)


def describe(artifact: Artifact) -> dict[str, Any]:
    manifest = artifact.manifest
    return {
        "name": artifact.name,
        "version": artifact.version,
        "backend": artifact.backend,
        "target": artifact.target,
        "schema_version": manifest["schema_version"],
        "training_rows": (manifest.get("training_data") or {}).get("rows"),
        "metrics": jsonable(manifest.get("metrics") or {}),
        "created": manifest.get("created"),
        "sha256": manifest["sha256"],
    }


@bp.get("/healthz")
def healthz():
    """The process is up and answering (says nothing about models)."""
    return {"status": "ok"}


@bp.get("/readyz")
def readyz():
    """200 once at least one verified model is loaded, else 503 saying why."""
    registry = current_app.extensions["costmodel"].registry
    if not len(registry):
        problems = "; ".join(f"{Placement(b, t).where}: {e}"
                             for (b, t), e in sorted(registry.errors.items()))
        raise ServiceUnavailable(
            "no model is loaded" + (f" ({problems})" if problems else
                                    " (no shipped model and no MODEL_PATHS configured)"))
    return {"status": "ready",
            "models": [Placement(b, t).where for (b, t), _ in registry.items()]}


@bp.get("/v1/models")
def models():
    """Every served model: identity, schema, training rows and evaluation metrics."""
    registry = current_app.extensions["costmodel"].registry
    return {"models": [describe(artifact) for _, artifact in registry.items()]}
