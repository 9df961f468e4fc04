"""Health, readiness and model metadata: what an orchestrator and a client ask first."""

from __future__ import annotations

import math
from typing import Any

from flask import Blueprint, current_app
from werkzeug.exceptions import ServiceUnavailable

from costmodel.models import Artifact

bp = Blueprint("meta", __name__)


def _plain(value: Any) -> Any:
    """JSON without NaN or infinity (a manifest's metric may be undefined)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def describe(artifact: Artifact) -> dict[str, Any]:
    manifest = artifact.manifest
    return {
        "name": artifact.name,
        "version": artifact.version,
        "backend": artifact.backend,
        "target": artifact.target,
        "schema_version": manifest["schema_version"],
        "training_rows": (manifest.get("training_data") or {}).get("rows"),
        "metrics": _plain(manifest.get("metrics") or {}),
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
        problems = "; ".join(f"{b}/{t}: {e}" if t else f"{b}: {e}"
                             for (b, t), e in sorted(registry.errors.items()))
        raise ServiceUnavailable(
            "no model is loaded" + (f" ({problems})" if problems else
                                    " (no shipped model and no MODEL_PATHS configured)"))
    return {"status": "ready",
            "models": [b + (f"/{t}" if t else "") for (b, t), _ in registry.items()]}


@bp.get("/v1/models")
def models():
    """Every served model: identity, schema, training rows and evaluation metrics."""
    registry = current_app.extensions["costmodel"].registry
    return {"models": [describe(artifact) for _, artifact in registry.items()]}
