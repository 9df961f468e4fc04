"""Request bodies into `Features` and checked numbers; every failure is a 400 naming the field.

A program arrives either as StableHLO text, which goes through the same extractor as
`costmodel.predict`, or as a feature vector keyed by `MODEL_FEATURES` names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

from costmodel.features import (
    ALL_FEATURES,
    JAXPR_FEATURES,
    KNOWN_TARGETS,
    MODEL_FEATURES,
    SCHEMA_VERSION,
    Features,
    Placement,
    RefusedText,
    StableHLOParseError,
    UnknownTargetError,
    from_stablehlo,
    normalize_target,
)

from .errors import ValidationError, json_type

# Far above any real count (flops of the largest programs are ~1e18), low enough that the
# model's power law cannot overflow a float.
MAX_FEATURE_VALUE = 1e30
PROGRAM_FIELDS = ("stablehlo", "features", "backend", "target")
_JAXPR = frozenset(JAXPR_FEATURES)


def known_targets_text() -> str:
    return ", ".join(Placement(b, t).where for b, ts in KNOWN_TARGETS.items() for t in ts)


def reject_unknown(body: Mapping[str, Any], allowed: Collection[str], where: str = "") -> None:
    """400 naming any field the endpoint does not take (a typo would otherwise be ignored)."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ValidationError(
            f"{where}unknown field(s): {', '.join(unknown)}; allowed: {', '.join(allowed)}")


def number(body: Mapping[str, Any], name: str, *, where: str = "", required: bool = False,
           minimum: float = 0.0, exclusive: bool = False,
           maximum: float = MAX_FEATURE_VALUE) -> float | None:
    """The field `name` as a finite float in range, None when absent and optional."""
    if name not in body or (body[name] is None and not required):
        if required:
            raise ValidationError(f"{where}{name}: required field is missing")
        return None
    return checked_number(body[name], f"{where}{name}", minimum=minimum, exclusive=exclusive,
                          maximum=maximum)


def checked_number(value: Any, field: str, *, minimum: float = 0.0, exclusive: bool = False,
                   maximum: float = MAX_FEATURE_VALUE) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{field}: must be a number, not {json_type(value)}")
    # Compare before float(): a huge JSON integer would overflow the conversion.
    too_low = value <= minimum if exclusive else value < minimum
    if too_low or value > maximum or (isinstance(value, float) and not math.isfinite(value)):
        bound = f"> {minimum:g}" if exclusive else f">= {minimum:g}"
        raise ValidationError(
            f"{field}: must be a number {bound} and <= {maximum:g}, got {value!r}")
    return float(value)


def target_of(body: Mapping[str, Any], where: str = "") -> tuple[str, str]:
    """Normalized (backend, target); 400 listing the known ones when unknown."""
    for name in ("backend", "target"):
        value = body.get(name)
        if value is not None and not isinstance(value, str):
            raise ValidationError(f"{where}{name}: must be a string, not {json_type(value)}")
    try:
        return normalize_target(body.get("backend") or "cpu", body.get("target"))
    except UnknownTargetError as exc:
        raise ValidationError(
            f"{where}{exc}; known backend/target pairs: {known_targets_text()}") from None


def program_features(body: Mapping[str, Any], where: str = "") -> Features:
    """Features of the program in `body`: exactly one of `stablehlo` or `features`.

    Example:
        >>> program_features({"stablehlo": text, "backend": "cpu"})["hlo_ops"]
        12.0
    """
    vector = body.get("features")
    # a vector from Features.to_dict() says where it was extracted for; the request may not
    placed_by = vector if (isinstance(vector, dict) and body.get("backend") is None
                           and vector.get("backend") is not None) else body
    backend, target = target_of(placed_by, where)
    given = [name for name in ("stablehlo", "features") if name in body]
    if len(given) != 1:
        raise ValidationError(
            f"{where}give exactly one of 'stablehlo' (module text) or 'features' (an object "
            f"of feature values){'; got both' if len(given) == 2 else ''}")
    if given[0] == "stablehlo":
        return _from_text(body["stablehlo"], backend, target, where)
    return feature_vector(body["features"], backend, target, where)


def _from_text(text: Any, backend: str, target: str, where: str) -> Features:
    return from_text(text, lambda t: from_stablehlo(t, backend=backend, target=target), where)


def from_text(text: Any, parse: Callable[[str], Any], where: str = "") -> Any:
    """`parse(text)` of a `stablehlo` field, every way the text can be bad a 400."""
    if not isinstance(text, str):
        raise ValidationError(f"{where}stablehlo: must be a string, not {json_type(text)}")
    try:
        return parse(text)
    except RefusedText as exc:
        raise ValidationError(f"{where}stablehlo: {exc}") from None
    except StableHLOParseError as exc:
        raise ValidationError(f"{where}stablehlo: not a valid StableHLO module: {exc}") from None
    except RecursionError:
        # Not the text guard's case (too deep brackets are RefusedText above): a chain of
        # some 500 calls is flat text, and the features' walk recurses once per call.
        raise ValidationError(f"{where}stablehlo: the module nests too deeply") from None


# what `Features.to_dict()` carries beside the features: accepted in a feature vector
ENVIRONMENT_KEYS = ("schema_version", "backend", "target", "jaxlib_version", "host_cpu_count")


def feature_vector(values: Any, backend: str, target: str, where: str = "") -> Features:
    """`Features` from `{name: number}` (what `Features.to_dict()` gives): `schema_version`
    and all `MODEL_FEATURES` required, jaxpr ones optional. A vector of another schema is
    refused: its numbers mean other things. Its own backend and target, when given, must
    match the request's."""
    field = f"{where}features"
    if not isinstance(values, dict):
        raise ValidationError(
            f"{field}: must be an object of feature values, not {json_type(values)}")
    version = values.get("schema_version")
    if version is None:
        raise ValidationError(f"{field}.schema_version: required (this server reads feature "
                              f"schema {SCHEMA_VERSION}; Features.to_dict() includes it)")
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise ValidationError(f"{field}.schema_version: {version!r} is not this server's "
                              f"feature schema {SCHEMA_VERSION}; extract the features again "
                              f"with a matching costmodel")
    if values.get("backend") is not None:
        own = target_of(values, f"{field}.")
        if own != (backend, target):
            raise ValidationError(
                f"{field}.backend: the vector was extracted for {Placement(*own).where}, "
                f"the request asks for {Placement(backend, target).where}")
    unknown = sorted(set(values) - set(ALL_FEATURES) - set(ENVIRONMENT_KEYS))
    if unknown:
        raise ValidationError(f"{field}: unknown feature name(s): {', '.join(unknown[:20])}")
    missing = [name for name in MODEL_FEATURES if name not in values]
    if missing:
        raise ValidationError(
            f"{field}: missing {len(missing)} required feature(s): {', '.join(missing)}")
    out: dict[str, float] = {}
    for name in ALL_FEATURES:
        value = values.get(name)
        if value is None and name in _JAXPR:
            out[name] = math.nan
        else:
            out[name] = checked_number(value, f"{field}.{name}")
    return Features(out, backend=backend, target=target)
