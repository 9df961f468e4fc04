"""One JSON error shape, `{"code", "name", "description"}`, for every error the service returns."""

from __future__ import annotations

import json as _stdjson
import logging
from typing import Any

from flask import Flask, Response, json, request
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    InternalServerError,
    UnsupportedMediaType,
)

log = logging.getLogger("costmodel.api")


class ValidationError(BadRequest):
    """A request body that is well-formed JSON but not what the endpoint takes (400)."""


def error_body(code: int, name: str, description: str) -> dict[str, Any]:
    return {"code": code, "name": name, "description": description}


def _http_error(exc: HTTPException) -> Response:
    # get_response keeps the exception's headers (Allow on 405, WWW-Authenticate on 401).
    response = exc.get_response()
    response.data = json.dumps(error_body(exc.code or 500, exc.name, exc.description or ""))
    response.content_type = "application/json"
    return response


def _unexpected_error(exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.path)
    wrapped = InternalServerError(
        description="internal error; the server log has the details")
    return _http_error(wrapped)


def register(app: Flask) -> None:
    """Install the JSON handlers for HTTP errors and for anything unexpected (500, logged)."""
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)


def json_object() -> dict[str, Any]:
    """The request body as a JSON object: 415 for another content type, 400 for bad JSON.

    Example:
        >>> body = json_object()   # inside a view
    """
    if not request.is_json:
        raise UnsupportedMediaType(
            f"expected Content-Type: application/json, got "
            f"{request.mimetype or 'no content type'!r}")
    data = request.get_data(cache=True)  # raises 413 past MAX_CONTENT_LENGTH
    try:
        body = _stdjson.loads(data, parse_constant=_reject_constant)
    except RecursionError:
        raise BadRequest("the request body is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # includes UnicodeDecodeError
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValidationError(f"the request body must be a JSON object, not {json_type(body)}")
    return body


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def json_type(value: Any) -> str:
    """How a JSON value is named in error messages: 'an array', 'a number', 'null'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__

