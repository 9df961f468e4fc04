"""Request bodies through their pydantic models (`api.schemas`); every failure is a 400
naming the field, worded from the model's own JSON schema (the document's limits).

A program arrives either as StableHLO text, which goes through the same extractor as
`costmodel.predict`, or as a feature vector keyed by `MODEL_FEATURES` names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pydantic
from flask import current_app
from pydantic import TypeAdapter
from werkzeug.exceptions import RequestEntityTooLarge

from costmodel.features import (
    SCHEMA_VERSION,
    Features,
    RefusedText,
    StableHLOParseError,
    from_stablehlo,
)

from .errors import ValidationError, json_type
from .sample_schemas import sample_request
from .schemas import (
    FEATURE_VECTORS,
    AdviseProgram,
    BlameRequest,
    PredictProgram,
    Program,
    RetrainRequest,
    one_or_batch,
)

Loc = Sequence[str | int]


@dataclass(frozen=True, eq=False)
class RequestModels:
    """One app's request bodies by the name the document gives them, and their JSON
    schemas (`$defs` inside), from which errors read the limits they quote."""

    adapters: Mapping[str, TypeAdapter]
    schemas: Mapping[str, dict[str, Any]]


@lru_cache(maxsize=16)
def request_models(max_batch: int, max_sample_bytes: float) -> RequestModels:
    """The request models of a server with these limits (built once per pair)."""
    types = {"PredictRequest": one_or_batch(PredictProgram, "PredictBatch", max_batch),
             "AdviseRequest": one_or_batch(AdviseProgram, "AdviseBatch", max_batch),
             "BlameRequest": BlameRequest,
             "SampleRequest": sample_request(max_sample_bytes),
             "RetrainRequest": RetrainRequest}
    adapters = {name: TypeAdapter(kind) for name, kind in types.items()}
    return RequestModels(adapters, {name: a.json_schema() for name, a in adapters.items()})


# The largest object a valid body holds is a feature vector (about 120 names). Past this,
# an object is refused before validation, which reports each unknown field (100k of them
# took 2 s of CPU to describe; a few thousand, as a client's mistake may send, take ~0.1 s
# and are named).
MAX_OBJECT_FIELDS = 4096


def _check_object_sizes(body: Any) -> None:
    """A 400 for any object of the body, an instance, or their features or environment,
    with more than MAX_OBJECT_FIELDS fields."""
    found = [("", body)]
    if isinstance(body, dict) and isinstance(body.get("instances"), list):
        found += [(f"instances[{i}].", item) for i, item in enumerate(body["instances"][:MAX_OBJECT_FIELDS])]
    for where, value in list(found):
        if isinstance(value, dict):
            found += [(f"{where}{key}.", value.get(key)) for key in ("features", "environment")]
    for where, value in found:
        if isinstance(value, dict) and len(value) > MAX_OBJECT_FIELDS:
            raise ValidationError(f"{where.rstrip('.') or 'body'}: an object of {len(value)} "
                                  f"fields; at most {MAX_OBJECT_FIELDS} are read")


def parse(name: str, body: dict[str, Any]) -> Any:
    """`body` validated by this app's request model `name` ("PredictRequest", ...)."""
    models = current_app.extensions["costmodel"].requests
    _check_object_sizes(body)
    try:
        return models.adapters[name].validate_python(body)
    except pydantic.ValidationError as exc:
        raise ValidationError(describe(exc.errors(include_url=False),
                                       models.schemas[name])) from None


def program_features(program: Program, where: str = "") -> Features:
    """Features of a validated program: its text parsed, or its vector as it is."""
    if program.stablehlo is not None:
        return from_text(program.stablehlo, lambda text: from_stablehlo(
            text, backend=program.backend, target=program.target), where)
    vector = program.features
    sharding = {"sharded_args": vector.sharded_args or 0.0,
                "sharded_input_share": vector.sharded_input_share or 0.0}
    return Features(vector.feature_values(), backend=program.backend, target=program.target,
                    info={"sharding": sharding})


def statement_count(text: str) -> int:
    """At least the ops of module text, counted without parsing it: every op with results
    has one `=` (attributes add more), and an op without results that StableHLO allows
    many of is a `return`."""
    return text.count("=") + text.count("return")


def from_text(text: str, parse: Callable[[str], Any], where: str = "") -> Any:
    """`parse(text)` of a `stablehlo` field, every way the text can be bad a 400; a module
    of more ops than MAX_MODULE_OPS a 413, before it is parsed."""
    limit = current_app.config.get("MAX_MODULE_OPS") or 0
    if limit and (count := statement_count(text)) > limit:
        raise RequestEntityTooLarge(
            f"{where}stablehlo: holds up to {count} ops (counted from its text); this server "
            f"takes modules of at most {limit} (MAX_MODULE_OPS)")
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


# -- pydantic's errors in the service's words ------------------------------------------------

def describe(errors: list[dict[str, Any]], schema: dict[str, Any]) -> str:
    """The first problem of a body (the unknown fields of an object, or the features a
    vector misses, count as one), and how many more there are."""
    problems: dict[Any, list] = {}
    for error in errors:
        shown, parent, node = _locate(schema, error["loc"])
        key = (error["type"], tuple(shown[:-1])) if _grouped(error, shown, parent) else len(
            problems)
        problems.setdefault(key, []).append((error, shown, parent, node))
    # unknown fields first: one is often a misspelt field that is also reported missing
    groups = sorted(problems.values(), key=lambda group: group[0][0]["type"] != "extra_forbidden")
    first, *rest = [_group_text(group) for group in groups]
    return first + (f" (and {len(rest)} more problem{'s' if len(rest) > 1 else ''})"
                    if rest else "")


def _grouped(error: dict[str, Any], shown: list, parent: dict[str, Any]) -> bool:
    """Whether the error is one of a list said at once: unknown fields of an object, or
    features missing from a vector."""
    return error["type"] == "extra_forbidden" or (
        error["type"] == "missing" and parent.get("title") in FEATURE_VECTORS
        and shown[-1] != "schema_version")


def _group_text(group: list) -> str:
    error, shown, parent, node = group[0]
    if _grouped(error, shown, parent):
        return _list_text(error["type"], [item[1][-1] for item in group], shown[:-1], parent)
    path = _path(shown)
    if error["type"] == "body_error":
        return (path + "." if path else "") + error["ctx"]["message"]
    detail = _detail(error, shown[-1] if shown else None, node)
    return f"{path}: {detail}" if path else detail


# Unknown names echoed back: a body may hold 100k of them, or one of a megabyte.
MAX_NAMES_SHOWN = 5
MAX_NAME_SHOWN = 64


def _names(names: list) -> str:
    """The first few names, each cut short, and how many more there are."""
    shown = [str(name) if len(str(name)) <= MAX_NAME_SHOWN
             else str(name)[:MAX_NAME_SHOWN - 3] + "..." for name in sorted(names)[:MAX_NAMES_SHOWN]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more else "")


def _list_text(kind: str, names: list, where: list, parent: dict[str, Any]) -> str:
    here = _path(where)
    if kind == "extra_forbidden":
        if parent.get("title") in FEATURE_VECTORS:
            return f"{here}: unknown feature name(s): {_names(names)}"
        return (f"{here + '.' if here else ''}unknown field(s): {_names(names)}; "
                f"allowed: {', '.join(parent.get('properties', {}))}")
    return f"{here}: missing {len(names)} required feature(s): {', '.join(names)}"


def _path(parts: Loc) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _deref(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[1]]
    return node


def _branches(node: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    # a union (or a nullable field); an object's own oneOf only says which fields it needs
    if "type" in node:
        return []
    return [_deref(b, defs) for b in node.get("oneOf", node.get("anyOf", ()))]


def _locate(schema: dict[str, Any], loc: Loc) -> tuple[list, dict[str, Any], dict[str, Any]]:
    """(the path as the body spells it, the schema of the object holding the last part,
    that part's schema) of an error's `loc`."""
    defs = schema.get("$defs", {})
    shown: list = []
    parent: dict[str, Any] = {}
    node = _deref(schema, defs)
    for part in loc:
        branches = _branches(node, defs)
        tagged = [b for b in branches if b.get("title") == part]
        if tagged:  # a discriminated union's tag (the model's name): not in the body
            node = tagged[0]
            continue
        parent = next((b for b in branches if b.get("type") != "null"), node)
        child = parent.get("items") if isinstance(part, int) else parent.get(
            "properties", {}).get(part, parent.get("additionalProperties"))
        node = _deref(child if isinstance(child, dict) else {}, defs)
        shown.append(part)
    node = next((b for b in _branches(node, defs) if b.get("type") != "null"), node)
    return shown, parent, node


def _version(value: Any) -> str:
    if value is None:
        return (f"required (this server reads feature schema {SCHEMA_VERSION}; "
                f"Features.to_dict() includes it)")
    return (f"{value!r} is not this server's feature schema {SCHEMA_VERSION}; extract the "
            f"features again with a matching costmodel")


_BATCH = "must be a non-empty array of programs"
# (field, pydantic error type): what to say instead of the generic words
_SPECIAL: dict[tuple[Any, str], Callable[[Any, dict[str, Any]], str]] = {
    ("schema_version", "missing"): lambda value, ctx: _version(None),
    ("schema_version", "literal_error"): lambda value, ctx: _version(value),
    ("instances", "list_type"): lambda value, ctx: _BATCH,
    ("instances", "too_short"): lambda value, ctx: _BATCH,
    ("instances", "too_long"): lambda value, ctx: (
        f"at most {ctx['max_length']} programs per request, got {ctx['actual_length']}"),
    ("features", "model_type"): lambda value, ctx: (
        f"must be an object of feature values, not {json_type(value)}"),
    ("stablehlo", "missing"): lambda value, ctx: (
        "required field is missing (blame needs the module text with its locations: "
        "lowered.as_text(debug_info=True))"),
}
_RANGE = {"greater_than", "greater_than_equal", "less_than", "less_than_equal",
          "finite_number"}
_NOUNS = {"string_type": "a string", "float_type": "a number", "int_type": "an integer",
          "bool_type": "a boolean", "list_type": "an array", "model_type": "an object",
          "dict_type": "an object"}


def _detail(error: dict[str, Any], name: Any, node: dict[str, Any]) -> str:
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    special = _SPECIAL.get((name, kind))
    if special is not None:
        return special(value, ctx)
    if kind == "field_error":
        return ctx["message"]
    if kind == "missing":
        return "required field is missing"
    if node.get("type") == "integer" and (kind in _RANGE or kind == "int_type"):
        return f"must be an integer{_bounds(node, integer=True)}, got {_shown(value)}"
    # a JSON integer too large for a float is out of range, not of another type
    too_large = kind == "float_type" and isinstance(value, int) and not isinstance(value, bool)
    if kind in _RANGE or too_large:
        return f"must be a number{_bounds(node)}, got {value!r}"
    if kind in _NOUNS:
        return f"must be {_NOUNS[kind]}, not {json_type(value)}"
    if kind == "string_too_long":
        return f"at most {ctx['max_length']} characters, got {len(value)}"
    return error["msg"]


def _bounds(node: dict[str, Any], integer: bool = False) -> str:
    """The documented range of a number, as " >= 0 and <= 1e+30" (empty without one)."""
    if integer and "minimum" in node and "maximum" in node:
        return f" from {node['minimum']} to {node['maximum']}"
    parts = []
    if "exclusiveMinimum" in node:
        parts.append(f"> {node['exclusiveMinimum']:g}")
    elif "minimum" in node:
        parts.append(f">= {node['minimum']:g}")
    if "maximum" in node:
        parts.append(f"<= {node['maximum']:g}")
    return " " + " and ".join(parts) if parts else ""


def _shown(value: Any) -> str:
    """A value for an error message, cut short: the body may hold megabytes."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
