"""Health, readiness and model metadata: what an orchestrator and a client ask first."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app
from werkzeug.exceptions import NotFound, ServiceUnavailable

import costmodel
from costmodel.features import Placement
from costmodel.models import Artifact
from costmodel.models.predictor import jsonable

bp = Blueprint("meta", __name__)
# what a prediction holds, by the names predictions use
TARGET_NAMES = ("compile_seconds", "peak_memory_bytes", "executable_memory_bytes")


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


# KServe V2 (Open Inference Protocol) health and metadata, beside the routes above, so
# orchestrators and gateways that speak it need no adapter. Models are named by what they
# predict for: "cpu", "gpu-h100".
@bp.get("/v2")
def v2_server():
    """Server metadata."""
    return {"name": "costmodel", "version": costmodel.__version__, "extensions": []}


@bp.get("/v2/health/live")
def v2_live():
    """The process is up."""
    return {"live": True}


@bp.get("/v2/health/ready")
def v2_ready():
    """200 once a verified model is loaded, else 503 (as /readyz)."""
    readyz()
    return {"ready": True}


def _served(name: str) -> Artifact:
    registry = current_app.extensions["costmodel"].registry
    for (backend, target), artifact in registry.items():
        if Placement(backend, target).label == name:
            return artifact
    served = ", ".join(Placement(b, t).label for (b, t), _ in registry.items()) or "none"
    raise NotFound(f"no model named {name!r} is served; served: {served}")


@bp.get("/v2/models/<name>")
def v2_model(name: str):
    """Model metadata: its version, and its inputs and outputs as V2 tensors."""
    artifact = _served(name)
    return {"name": name, "versions": [artifact.version], "platform": "costmodel",
            "inputs": [{"name": "features", "datatype": "FP64",
                        "shape": [-1, len(artifact.manifest["features"])],
                        "parameters": {"names": artifact.manifest["features"],
                                       "schema_version": artifact.manifest["schema_version"]}}],
            "outputs": [{"name": target, "datatype": "FP64", "shape": [-1]}
                        for target in TARGET_NAMES]}


@bp.get("/v2/models/<name>/ready")
def v2_model_ready(name: str):
    """200 when the model is served (404 naming the served ones otherwise)."""
    _served(name)
    return {"name": name, "ready": True}
