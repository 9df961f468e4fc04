"""Every response body the service sends, as pydantic models, for the OpenAPI document.

The views build these bodies from the library's own `to_dict()` rather than through
the models (a prediction is not checked twice); the fuzz test holds every response it
sees to these schemas. Fields not listed may be added later, so none forbids extras.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .schemas import omittable

_CONFIG = ConfigDict(protected_namespaces=())
Interval = Annotated[list[float], Field(min_length=2, max_length=2)]


class Error(BaseModel):
    """Every error: the HTTP status, its name, and what was wrong (naming the field)."""

    code: int
    name: str
    description: str


class Prediction(BaseModel):
    model_config = _CONFIG

    compile_seconds: float
    compile_seconds_interval: Interval
    peak_memory_bytes: float
    peak_memory_bytes_interval: Interval
    executable_memory_bytes: float
    executable_memory_bytes_interval: Interval
    backend: str
    target: str
    model_version: str
    calibration_scale: float
    distance_from_training: float | None = Field(
        None, description="how far the program lies from the model's training programs (mean "
        "distance to the 5 nearest, standardized log counts; about 2 for a training program, "
        "above the model card's onset the compile-time interval widens); null for a model "
        "saved without its training rows")
    process_state: Literal["fresh", "warm"] | None = Field(
        None, description="a TPU chip's compile time is for a compile early in a fresh process "
        "(fresh) or after about a hundred others in the process (warm, about half as long); "
        "null where the model draws no such line (CPU, GPU)")


class PredictResponse(BaseModel):
    """One prediction per program, in the order sent."""

    predictions: list[Prediction]


class Alternative(BaseModel):
    strategy: str
    predicted_compile_seconds: float
    description: str
    runtime_note: str


class Advice(BaseModel):
    split: bool
    reason: str
    budget_seconds: float
    alternatives: list[Alternative] = Field(description="cheapest first")
    prediction: Prediction


class AdviseResponse(BaseModel):
    """Advice per program, in the order sent."""

    advice: list[Advice]


class Region(BaseModel):
    source: str = Field(description="file.py:LINE, or a placeholder for what no line owns")
    name: str
    seconds: float
    share: float
    peak_memory_bytes: float
    ops: float


class Blame(BaseModel):
    """The prediction divided among source lines."""

    compile_seconds: float
    peak_memory_bytes: float
    regions: list[Region] = Field(description="largest first; they sum to the prediction")
    prediction: Prediction


class SampleCreated(BaseModel):
    id: str
    backend: str
    target: str


class Sample(BaseModel):
    """A stored sample: its features, labels and environment, and when it arrived."""

    id: str
    created_at: str
    backend: str
    target: str
    schema_version: int
    source: Literal["stablehlo", "features"]
    program_sha256: str
    features: dict[str, float | None]
    environment: dict[str, Any]
    compile_seconds: float
    peak_memory_bytes: float | None
    executable_memory_bytes: float | None


class RetrainAccepted(BaseModel):
    job: str
    status: Literal["queued"]


class Scores(BaseModel):
    new: float | None
    current: float | None = Field(description="the score the candidate had to beat")


class RetrainJob(BaseModel):
    job: str
    status: Literal["queued", "running", "succeeded", "failed", "rejected"]
    progress: float = Field(ge=0, le=1)
    scope: dict[str, str | None]
    swapped: bool
    scores: dict[str, Scores]
    results: list[dict[str, Any]] = Field(description=(
        "Per backend/target: rows, train_rows, holdout_rows, samples, sample_groups "
        "(distinct programs among them), capped_groups (left out: their source brought "
        "too many), dropped_samples (screened out), score_new, score_current (the served "
        "model), score_current_refit (its recipe on the training rows, when it may have "
        "seen the holdout), score_to_beat, and the same on the held-out rows nobody sent "
        "(trusted_holdout_rows, score_new_trusted, score_to_beat_trusted), swapped, "
        "version"))
    error: str | None = None
    created_at: str
    finished_at: str | None = None


class Status(BaseModel):
    status: str
    models: list[str] = omittable(description="readiness: the models served")


class ModelInfo(BaseModel):
    model_config = _CONFIG

    name: str
    version: str
    backend: str
    target: str
    schema_version: int
    training_rows: int | None
    metrics: dict[str, Any]
    created: str | None = None
    sha256: str


class Models(BaseModel):
    models: list[ModelInfo]


class OpenAPI(BaseModel):
    """This document."""

    openapi: str
    paths: dict[str, Any]


class V2Server(BaseModel):
    name: str
    version: str
    extensions: list[str]


class V2Live(BaseModel):
    live: bool


class V2Ready(BaseModel):
    ready: bool
    name: str = omittable(description="the model's, when one model was asked about")


class V2Tensor(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    parameters: dict[str, Any] = omittable()


class V2Model(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[V2Tensor]
    outputs: list[V2Tensor]


# what the document lists (the rest are reached from these)
MODELS = (Error, PredictResponse, AdviseResponse, Blame, SampleCreated, Sample,
          RetrainAccepted, RetrainJob, Status, Models, OpenAPI, V2Server, V2Live, V2Ready,
          V2Model)
