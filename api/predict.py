"""`POST /v1/predict` and `POST /v1/advise`: the same `predict_features` the library uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flask import Blueprint, current_app, g
from werkzeug.exceptions import UnprocessableEntity

from costmodel._advise import advise_features, advise_stablehlo
from costmodel._blame import blame_stablehlo
from costmodel._predict import predict_features
from costmodel.features import Placement
from costmodel.models import Artifact

from .errors import ValidationError, json_object
from .schemas import AdviseProgram, PredictProgram
from .validation import from_text, parse, program_features

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
    served = Placement(backend, target).model  # a TPU topology's model is its chip's
    artifact = models.get((served.backend, served.target))
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


def _predict_one(program: PredictProgram, where: str) -> dict[str, Any]:
    features = program_features(program, where)
    with np.errstate(all="ignore"):  # an overflow becomes inf: require_finite makes it a 422
        artifact = model_for(features.backend, features.target)
        prediction = predict_features(features, model=artifact,
                                      process_state=program.process_state)
    return require_finite(prediction.to_dict(), where)


def _instances(parsed: Any) -> list[tuple[Any, str]]:
    """(program, where errors point) of each program in a validated request: the request
    itself, or each of its `instances`."""
    if not hasattr(parsed, "instances"):
        return [(parsed, "")]
    return [(item, f"instances[{i}].") for i, item in enumerate(parsed.instances)]


@bp.post("/v1/predict")
def predict():
    """One program, or `{"instances": [...]}` → `{"predictions": [...]}`, always a list."""
    parsed = parse("PredictRequest", json_object())
    return {"predictions": [_predict_one(item, where) for item, where in _instances(parsed)]}


@bp.post("/v1/blame")
def blame():
    """Which source lines make the compile slow? `blame_stablehlo(...).to_dict()`; only text
    printed with locations (`as_text(debug_info=True)`) names lines."""
    body = parse("BlameRequest", json_object())
    artifact = model_for(body.backend, body.target)
    with np.errstate(all="ignore"):
        result = from_text(body.stablehlo, lambda text: blame_stablehlo(
            text, backend=body.backend, target=body.target, model=artifact))
    return require_finite(result.to_dict(), "")


def _advise_one(program: AdviseProgram, where: str) -> dict[str, Any]:
    budget = program.budget_seconds
    features = program_features(program, where)
    model = model_for(features.backend, features.target)
    budget = 10.0 if budget is None else budget
    with np.errstate(all="ignore"):
        if program.stablehlo is not None:  # a program to rewrite, as the library does
            advice = advise_stablehlo(program.stablehlo, features, budget, model=model)
        else:
            advice = advise_features(features, budget_seconds=budget, model=model)
    return require_finite(advice.to_dict(), where)


@bp.post("/v1/advise")
def advise():
    """Should these programs be split? One, or `{"instances": [...]}` → `{"advice": [...]}`."""
    parsed = parse("AdviseRequest", json_object())
    return {"advice": [_advise_one(item, where) for item, where in _instances(parsed)]}
