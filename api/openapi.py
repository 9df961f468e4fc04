"""The OpenAPI 3.1 document of the service, served at `GET /openapi.json`.

Its schemas are generated from the pydantic models the views validate with
(`api.schemas`, built per app with its limits) and from the response models
(`api.responses`); only the paths are written here. A test checks that every route of
the app is documented here and that nothing here is missing from the app.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from flask import Blueprint, current_app
from pydantic import TypeAdapter

import costmodel

from . import responses
from .validation import RequestModels

bp = Blueprint("openapi", __name__)

_REF = "#/components/schemas/"
_ERRORS = {
    400: "Malformed JSON, or a missing, unknown or wrongly typed field (named in the description)",
    401: "Missing or wrong bearer token",
    403: "These routes are disabled on this server (their token is not configured)",
    404: "No such resource",
    409: "A retrain job is already running",
    413: "Request body larger than MAX_CONTENT_LENGTH, or a module of more ops than "
         "MAX_MODULE_OPS",
    415: "Content-Type is not application/json",
    422: "Features so far outside the training data that the prediction overflows",
    503: "No model is loaded",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _operation(summary: str, ok: tuple[int, str, str], errors: tuple[int, ...] = (),
               body: str | None = None, body_required: bool = True,
               secured: bool = False, parameter: str | None = None) -> dict[str, Any]:
    answers = {str(ok[0]): _json(_ref(ok[1]), ok[2])}
    for code in errors:
        answers[str(code)] = _json(_ref("Error"), _ERRORS[code])
    answers["default"] = _json(_ref("Error"), "Unexpected server error (500)")
    op: dict[str, Any] = {"summary": summary, "responses": answers}
    if body is not None:
        op["requestBody"] = {"required": body_required,
                             "content": {"application/json": {"schema": _ref(body)}}}
    if secured:
        op["security"] = [{"bearerAuth": []}]
    if parameter is not None:
        op["parameters"] = [{"name": parameter, "in": "path", "required": True,
                             "schema": {"type": "string"}}]
    return op


def _components(models: RequestModels) -> dict[str, Any]:
    """The JSON schemas of every request and response body, `$defs` made components."""
    inputs = [(name, "validation", adapter) for name, adapter in models.adapters.items()]
    inputs += [(model.__name__, "serialization", TypeAdapter(model))
               for model in responses.MODELS]
    tops, defs = TypeAdapter.json_schemas(inputs, ref_template=_REF + "{model}")
    schemas = dict(defs.get("$defs", {}))
    for (name, _), schema in tops.items():
        # a union (one program or a batch) has no model of that name: it is named here
        if schema != _ref(name):
            schemas[name] = schema
    return schemas


@lru_cache(maxsize=16)
def document(models: RequestModels) -> dict[str, Any]:
    """The OpenAPI 3.1 document: paths, schemas and the bearer security scheme, with the
    limits of the server whose request models these are (batches of its MAX_BATCH)."""
    program_errors = (400, 413, 415, 422)
    return {
        "openapi": "3.1.0",
        "info": {"title": "costmodel", "version": costmodel.__version__,
                 "description": "Predict XLA compile time and memory of JAX programs "
                                "before compiling."},
        "paths": {
            "/healthz": {"get": _operation("Liveness", (200, "Status", "The process is up"))},
            "/readyz": {"get": _operation(
                "Readiness", (200, "Status", "A verified model is loaded"), (503,))},
            "/v1/models": {"get": _operation(
                "Served models", (200, "Models", "Metadata of every loaded model"))},
            "/v1/predict": {"post": _operation(
                "Predict compile time and memory", (200, "PredictResponse",
                                                    "One prediction, or one per instance"),
                program_errors, body="PredictRequest")},
            "/v1/blame": {"post": _operation(
                "Which source lines make the compile slow?",
                (200, "Blame", "The prediction divided among source lines"),
                program_errors, body="BlameRequest")},
            "/v1/advise": {"post": _operation(
                "Should this program be split?", (200, "AdviseResponse",
                                                  "Advice, one per program"),
                program_errors, body="AdviseRequest")},
            "/v1/samples": {"post": _operation(
                "Store a measured compile (bearer token from COSTMODEL_SAMPLES_TOKEN)",
                (201, "SampleCreated", "Stored"), (400, 401, 403, 413, 415),
                body="SampleRequest", secured=True)},
            "/v1/samples/{sample_id}": {"get": _operation(
                "A stored sample (bearer token from COSTMODEL_SAMPLES_TOKEN)",
                (200, "Sample", "The sample"), (401, 403, 404), secured=True,
                parameter="sample_id")},
            "/v1/retrain": {"post": _operation(
                "Start a retrain job", (202, "RetrainAccepted", "Job queued"),
                (400, 401, 403, 409, 413, 415), body="RetrainRequest", body_required=False,
                secured=True)},
            "/v1/retrain/{job_id}": {"get": _operation(
                "Retrain job status", (200, "RetrainJob", "The job"), (401, 403, 404),
                secured=True, parameter="job_id")},
            "/v2": {"get": _operation("KServe V2 server metadata",
                                      (200, "V2Server", "Server name and version"))},
            "/v2/health/live": {"get": _operation("KServe V2 liveness",
                                                  (200, "V2Live", "The process is up"))},
            "/v2/health/ready": {"get": _operation(
                "KServe V2 readiness", (200, "V2Ready", "A verified model is loaded"), (503,))},
            "/v2/models/{name}": {"get": _operation(
                "KServe V2 model metadata (models are named cpu, gpu-h100, ...)",
                (200, "V2Model", "Version, inputs and outputs"), (404,), parameter="name")},
            "/v2/models/{name}/ready": {"get": _operation(
                "KServe V2 model readiness", (200, "V2Ready", "The model is served"), (404,),
                parameter="name")},
            "/openapi.json": {"get": _operation(
                "This document", (200, "OpenAPI", "OpenAPI 3 document"))},
        },
        "components": {
            "schemas": _components(models),
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }


@bp.get("/openapi.json")
def openapi():
    """The OpenAPI document, with this server's limits."""
    return document(current_app.extensions["costmodel"].requests)
