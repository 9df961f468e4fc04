"""`POST /v1/predict` and `POST /v1/advise`: the same `predict_features` the library uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flask import Blueprint, current_app, g
from werkzeug.exceptions import UnprocessableEntity

from costmodel._advise import advise_features
from costmodel._blame import blame_stablehlo
from costmodel._predict import predict_features
from costmodel.features import Placement
from costmodel.models import Artifact

from .errors import ValidationError, json_object, json_type
from .validation import (
    PROGRAM_FIELDS,
    from_text,
    number,
    program_features,
    reject_unknown,
    target_of,
)

ADVISE_FIELDS = (*PROGRAM_FIELDS, "budget_seconds")
MAX_BUDGET_SECONDS = 7 * 24 * 3600.0

bp = Blueprint("predict", __name__)


def served_models() -> Mapping[tuple[str, str], Artifact]:
    """The registry's models as this request sees them: one snapshot, taken once."""
    if "costmodel_models" not in g:
        g.costmodel_models = current_app.extensions["costmodel"].registry.snapshot()
    return g.costmodel_models


def model_for(backend: str, target: str) -> Artifact:
    """The served model for a backend and target, from the request's one snapshot of the
    registry (a batch never mixes versions); 400 when none is loaded.

    400, not 503: retrying will not help, the server does not serve that target.
    """
    models = served_models()
    artifact = models.get((backend, target))
    if artifact is None:
        loaded = ", ".join(Placement(b, t).where for b, t in sorted(models))
        label = Placement(backend, target).where
        raise ValidationError(
            f"no model is loaded for {label} on this server; loaded: {loaded or 'none'}")
    return artifact


def require_finite(out: Any, where: str) -> Any:
    """`out` unchanged if every number in it is finite; JSON has no NaN or infinity."""
    values = out.values() if isinstance(out, dict) else out if isinstance(out, list) else [out]
    for value in values:
        if isinstance(value, (dict, list)):
            require_finite(value, where)
        elif isinstance(value, float) and not math.isfinite(value):
            raise UnprocessableEntity(
                f"{where}these features lie so far outside the training data that the "
                f"prediction overflows")
    return out


def _predict_one(body: Any, where: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValidationError(f"{where.rstrip('.')}: must be an object, not {json_type(body)}")
    reject_unknown(body, PROGRAM_FIELDS, where)
    features = program_features(body, where)
    with np.errstate(all="ignore"):  # an overflow becomes inf: require_finite makes it a 422
        artifact = model_for(features.backend, features.target)
        prediction = predict_features(features, model=artifact)
    return require_finite(prediction.to_dict(), where)


def _instances(body: dict[str, Any]) -> list[tuple[Any, str]]:
    """(program body, where errors point) of each program in a request: the body itself,
    or each of `{"instances": [...]}`."""
    if "instances" not in body:
        return [(body, "")]
    reject_unknown(body, ("instances",))
    instances = body["instances"]
    if not isinstance(instances, list) or not instances:
        raise ValidationError("instances: must be a non-empty array of programs")
    limit = current_app.config["MAX_BATCH"]
    if len(instances) > limit:
        raise ValidationError(f"instances: at most {limit} programs per request, got "
                              f"{len(instances)}")
    return [(item, f"instances[{i}].") for i, item in enumerate(instances)]


@bp.post("/v1/predict")
def predict():
    """One program, or `{"instances": [...]}` → `{"predictions": [...]}`, always a list."""
    return {"predictions": [_predict_one(item, where)
                            for item, where in _instances(json_object())]}


BLAME_FIELDS = ("stablehlo", "backend", "target")


@bp.post("/v1/blame")
def blame():
    """Which source lines make the compile slow? `blame_stablehlo(...).to_dict()`; only text
    printed with locations (`as_text(debug_info=True)`) names lines."""
    body = json_object()
    reject_unknown(body, BLAME_FIELDS)
    if "stablehlo" not in body:
        raise ValidationError("stablehlo: required field is missing (blame needs the module "
                              "text with its locations: lowered.as_text(debug_info=True))")
    backend, target = target_of(body)
    artifact = model_for(backend, target)
    with np.errstate(all="ignore"):
        result = from_text(body["stablehlo"], lambda text: blame_stablehlo(
            text, backend=backend, target=target, model=artifact))
    return require_finite(result.to_dict(), "")


def _advise_one(body: Any, where: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValidationError(f"{where.rstrip('.')}: must be an object, not {json_type(body)}")
    reject_unknown(body, ADVISE_FIELDS, where)
    budget = number(body, "budget_seconds", where=where, exclusive=True,
                    maximum=MAX_BUDGET_SECONDS)
    features = program_features(body, where)
    with np.errstate(all="ignore"):
        advice = advise_features(features, budget_seconds=10.0 if budget is None else budget,
                                 model=model_for(features.backend, features.target))
    return require_finite(advice.to_dict(), where)


@bp.post("/v1/advise")
def advise():
    """Should these programs be split? One, or `{"instances": [...]}` → `{"advice": [...]}`."""
    return {"advice": [_advise_one(item, where) for item, where in _instances(json_object())]}
