"""The OpenAPI 3 document of the service, served at `GET /openapi.json`.

Written by hand next to the views; a test checks that every route of the app is
documented here and that nothing here is missing from the app.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app

import costmodel
from costmodel.features import ALL_FEATURES, KNOWN_TARGETS, MODEL_FEATURES, SCHEMA_VERSION

from .sample_schemas import (
    MAX_COMPILE_SECONDS,
    MAX_CPU_COUNT,
    MAX_ENVIRONMENT_KEYS,
    MAX_KEY_LENGTH,
    MAX_REF_SECONDS,
    MAX_SAMPLE_FEATURE,
    MAX_STRING_LENGTH,
    MIN_COMPILE_SECONDS,
    MIN_REF_SECONDS,
    ROW_ENVIRONMENT,
)
from .samples import max_sample_bytes
from .schemas import MAX_BUDGET_SECONDS, MAX_FEATURE_VALUE

bp = Blueprint("openapi", __name__)

_REF = "#/components/schemas/"
_ERRORS = {
    400: "Malformed JSON, or a missing, unknown or wrongly typed field (named in the description)",
    401: "Missing or wrong bearer token",
    403: "These routes are disabled on this server (their token is not configured)",
    404: "No such resource",
    409: "A retrain job is already running",
    413: "Request body larger than MAX_CONTENT_LENGTH",
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
    responses = {str(ok[0]): _json(_ref(ok[1]), ok[2])}
    for code in errors:
        responses[str(code)] = _json(_ref("Error"), _ERRORS[code])
    responses["default"] = _json(_ref("Error"), "Unexpected server error (500)")
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if body is not None:
        op["requestBody"] = {"required": body_required,
                             "content": {"application/json": {"schema": _ref(body)}}}
    if secured:
        op["security"] = [{"bearerAuth": []}]
    if parameter is not None:
        op["parameters"] = [{"name": parameter, "in": "path", "required": True,
                             "schema": {"type": "string"}}]
    return op


def _count(nullable: bool = False) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number", "minimum": 0, "maximum": MAX_FEATURE_VALUE}
    if nullable:
        schema["nullable"] = True
    return schema


def _interval() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}


def _sample_labels() -> dict[str, Any]:
    """The labels of a sample, with the physical ranges `api.samples` checks."""
    memory = {"type": "number", "minimum": 0, "maximum": max_sample_bytes(), "nullable": True}
    return {"compile_seconds": {"type": "number", "minimum": MIN_COMPILE_SECONDS,
                                "maximum": MAX_COMPILE_SECONDS},
            "peak_memory_bytes": {**memory, "description": "peak host-RSS growth while "
                                  "compiling (what predictions call peak_memory_bytes)"},
            "executable_memory_bytes": memory}


def _environment() -> dict[str, Any]:
    string = {"type": "string", "maxLength": MAX_STRING_LENGTH}
    known = {name: string for name in ROW_ENVIRONMENT}
    known["cpu_count"] = {"type": "integer", "minimum": 1, "maximum": MAX_CPU_COUNT}
    known["ref_seconds"] = {"type": "number", "minimum": MIN_REF_SECONDS,
                            "maximum": MAX_REF_SECONDS,
                            "description": "seconds the reference program took to compile"}
    return {"type": "object", "nullable": True, "maxProperties": MAX_ENVIRONMENT_KEYS,
            "description": f"Where it was measured; field names at most {MAX_KEY_LENGTH} "
                           f"characters",
            "properties": known,
            "additionalProperties": {"nullable": True, "oneOf": [
                string, {"type": "number"}, {"type": "boolean"}]}}


def _schemas(max_batch: int) -> dict[str, Any]:
    targets = sorted({t for ts in KNOWN_TARGETS.values() for t in ts})
    program = {
        "stablehlo": {"type": "string", "description": "StableHLO module text "
                      "(`jax.jit(f).lower(x).as_text()`)"},
        "features": _ref("FeatureVector"),
        "backend": {"type": "string", "enum": sorted(KNOWN_TARGETS), "nullable": True,
                    "description": "default cpu"},
        "target": {"type": "string", "enum": targets, "nullable": True,
                   "description": "GPU target; default h100 for gpu, '' for cpu"},
    }
    one_program = [{"required": ["stablehlo"]}, {"required": ["features"]}]
    prediction = {name: {"type": "number"} for name in (
        "compile_seconds", "peak_memory_bytes", "executable_memory_bytes", "calibration_scale")}
    prediction.update({f"{name}_interval": _interval() for name in (
        "compile_seconds", "peak_memory_bytes", "executable_memory_bytes")})
    prediction.update({name: {"type": "string"} for name in ("backend", "target",
                                                             "model_version")})
    labels = _sample_labels()
    return {
        "Error": {"type": "object", "required": ["code", "name", "description"],
                  "properties": {"code": {"type": "integer"}, "name": {"type": "string"},
                                 "description": {"type": "string"}}},
        "FeatureVector": {
            "type": "object", "additionalProperties": False,
            "description": "what Features.to_dict() gives: its schema_version must be this "
                           "server's; its backend and target, when given, the request's",
            "required": ["schema_version", *MODEL_FEATURES],
            "properties": {
                "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
                "backend": {"type": "string", "enum": sorted(KNOWN_TARGETS), "nullable": True},
                "target": {"type": "string", "enum": targets, "nullable": True},
                "jaxlib_version": {"type": "string", "nullable": True},
                "host_cpu_count": {"type": "integer", "nullable": True},
                **{n: _count(nullable=n not in MODEL_FEATURES) for n in ALL_FEATURES}}},
        "Program": {"type": "object", "additionalProperties": False, "properties": program,
                    "oneOf": one_program},
        "PredictRequest": {"oneOf": [_ref("Program"), {
            "type": "object", "additionalProperties": False, "required": ["instances"],
            "properties": {"instances": {"type": "array", "minItems": 1, "maxItems": max_batch,
                                         "items": _ref("Program")}}}]},
        "Prediction": {"type": "object", "required": sorted(prediction),
                       "properties": prediction},
        "PredictResponse": {
            "type": "object", "required": ["predictions"],
            "properties": {"predictions": {"type": "array", "items": _ref("Prediction")}}},
        "AdviseResponse": {
            "type": "object", "required": ["advice"],
            "properties": {"advice": {"type": "array", "items": _ref("Advice")}}},
        "BlameRequest": {
            "type": "object", "additionalProperties": False, "required": ["stablehlo"],
            "properties": {k: v for k, v in program.items() if k != "features"}},
        "Blame": {"type": "object",
                  "required": ["compile_seconds", "peak_memory_bytes", "regions", "prediction"],
                  "properties": {
                      "compile_seconds": {"type": "number"},
                      "peak_memory_bytes": {"type": "number"},
                      "regions": {"type": "array", "description": "largest first; they sum "
                                  "to the prediction", "items": {
                                      "type": "object",
                                      "required": ["source", "name", "seconds", "share",
                                                   "peak_memory_bytes", "ops"],
                                      "properties": {
                                          "source": {"type": "string"},
                                          "name": {"type": "string"},
                                          **{k: {"type": "number"} for k in (
                                              "seconds", "share", "peak_memory_bytes",
                                              "ops")}}}},
                      "prediction": _ref("Prediction")}},
        "AdviseBatch": {"oneOf": [_ref("AdviseRequest"), {
            "type": "object", "additionalProperties": False, "required": ["instances"],
            "properties": {"instances": {"type": "array", "minItems": 1, "maxItems": max_batch,
                                         "items": _ref("AdviseRequest")}}}]},
        "AdviseRequest": {
            "type": "object", "additionalProperties": False, "oneOf": one_program,
            "properties": {**program, "budget_seconds": {
                "type": "number", "minimum": 0, "exclusiveMinimum": True,
                "maximum": MAX_BUDGET_SECONDS, "nullable": True,
                "description": "default 10"}}},
        "Advice": {"type": "object",
                   "required": ["split", "reason", "alternatives", "prediction"],
                   "properties": {
                       "split": {"type": "boolean"}, "reason": {"type": "string"},
                       "budget_seconds": {"type": "number"},
                       "alternatives": {"type": "array", "items": {
                           "type": "object",
                           "required": ["strategy", "predicted_compile_seconds"],
                           "properties": {"strategy": {"type": "string"},
                                          "predicted_compile_seconds": {"type": "number"},
                                          "description": {"type": "string"},
                                          "runtime_note": {"type": "string"}}}},
                       "prediction": _ref("Prediction")}},
        "SampleRequest": {
            "type": "object", "additionalProperties": False, "oneOf": one_program,
            "required": ["compile_seconds"],
            "description": f"A measured compile. Feature values are at most "
                           f"{MAX_SAMPLE_FEATURE:g}; bytes at most this host's memory "
                           f"times 16.",
            "properties": {**program, **labels, "environment": _environment()}},
        "SampleCreated": {"type": "object", "required": ["id", "backend", "target"],
                          "properties": {"id": {"type": "string"},
                                         "backend": {"type": "string"},
                                         "target": {"type": "string"}}},
        "Sample": {"type": "object", "required": ["id", "created_at", "features",
                                                  "compile_seconds", "environment"],
                   "properties": {"id": {"type": "string"}, "created_at": {"type": "string"},
                                  "backend": {"type": "string"}, "target": {"type": "string"},
                                  "features": {"type": "object"},
                                  "environment": {"type": "object"},
                                  "compile_seconds": {"type": "number"}}},
        "RetrainRequest": {"type": "object", "additionalProperties": False,
                           "properties": {"backend": program["backend"],
                                          "target": program["target"]}},
        "RetrainAccepted": {"type": "object", "required": ["job", "status"],
                            "properties": {"job": {"type": "string"},
                                           "status": {"type": "string"}}},
        "RetrainJob": {"type": "object",
                       "required": ["job", "status", "progress", "swapped", "scores"],
                       "properties": {
                           "job": {"type": "string"},
                           "status": {"type": "string", "enum": [
                               "queued", "running", "succeeded", "failed", "rejected"]},
                           "progress": {"type": "number", "minimum": 0, "maximum": 1},
                           "swapped": {"type": "boolean"},
                           "scores": {"type": "object"},
                           "results": {"type": "array", "description": (
                               "Per backend/target: rows, train_rows, holdout_rows, samples, "
                               "dropped_samples (screened out), score_new, score_current "
                               "(the served model), score_current_refit (its recipe on the "
                               "training rows, when it may have seen the holdout), "
                               "score_to_beat, swapped, version"),
                               "items": {"type": "object"}},
                           "error": {"type": "string", "nullable": True}}},
        "Status": {"type": "object", "required": ["status"],
                   "properties": {"status": {"type": "string"},
                                  "models": {"type": "array", "items": {"type": "string"}}}},
        "Models": {"type": "object", "required": ["models"], "properties": {"models": {
            "type": "array", "items": {"type": "object", "required": [
                "name", "version", "backend", "target", "schema_version", "training_rows",
                "metrics"]}}}},
        "OpenAPI": {"type": "object", "required": ["openapi", "paths"]},
        "V2Server": {"type": "object", "required": ["name", "version", "extensions"]},
        "V2Live": {"type": "object", "required": ["live"],
                   "properties": {"live": {"type": "boolean"}}},
        "V2Ready": {"type": "object", "required": ["ready"],
                    "properties": {"ready": {"type": "boolean"}, "name": {"type": "string"}}},
        "V2Model": {"type": "object", "required": ["name", "versions", "platform", "inputs",
                                                   "outputs"],
                    "properties": {"name": {"type": "string"},
                                   "versions": {"type": "array", "items": {"type": "string"}},
                                   "platform": {"type": "string"},
                                   "inputs": {"type": "array", "items": {"type": "object"}},
                                   "outputs": {"type": "array", "items": {"type": "object"}}}},
    }


def document(max_batch: int = 256) -> dict[str, Any]:
    """The OpenAPI 3.0 document: paths, schemas and the bearer security scheme; batches
    as long as this server takes (`MAX_BATCH`)."""
    program_errors = (400, 413, 415, 422)
    return {
        "openapi": "3.0.3",
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
                program_errors, body="AdviseBatch")},
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
            "schemas": _schemas(max_batch),
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
    }


@bp.get("/openapi.json")
def openapi():
    """The OpenAPI document, with this server's limits."""
    return document(int(current_app.config["MAX_BATCH"]))
