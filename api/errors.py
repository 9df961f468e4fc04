"""One JSON error shape, `{"code", "name", "description"}`, for every error the service returns."""

from __future__ import annotations

import json as _stdjson
import logging
from typing import Any

from flask import Flask, Response, current_app, json, request
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    InternalServerError,
    RequestEntityTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
)

log = logging.getLogger("costmodel.api")


class ValidationError(BadRequest):
    """A request body that is well-formed JSON but not what the endpoint takes (400)."""


class ClientTooSlow(Exception):
    """The client did not send its request within the server's read deadline.

    Raised by the server's sockets (`costmodel.api.worker`); not an OSError, so that the
    worker answers it (408) instead of dropping the connection silently.
    """


def error_body(code: int, name: str, description: str) -> dict[str, Any]:
    return {"code": code, "name": name, "description": description}


def _http_error(exc: HTTPException) -> Response:
    # The exception's own headers (Allow on 405, WWW-Authenticate on 401), not its HTML.
    headers = [(k, v) for k, v in exc.get_headers() if k.lower() != "content-type"]
    # A description may quote what the client sent, lone surrogates included.
    description = printable(exc.description or "")
    return Response(json.dumps(error_body(exc.code or 500, exc.name, description)),
                    exc.code or 500, headers, content_type="application/json")


def printable(text: str) -> str:
    """`text` with anything UTF-8 cannot carry (lone surrogates) written as escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


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
    data = _body_bytes()
    try:
        body = _stdjson.loads(data, parse_constant=_reject_constant,
                              object_pairs_hook=_unique_keys)
    except RecursionError:
        raise BadRequest("the request body is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # includes UnicodeDecodeError
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ValidationError(f"the request body must be a JSON object, not {json_type(body)}")
    _refuse_lone_surrogates(body)
    return body


def _body_bytes() -> bytes:
    """The raw body, 413 past MAX_CONTENT_LENGTH, 408 when the client stalls.

    With Content-Length werkzeug refuses an oversized body before reading it; a chunked
    body has no length, and werkzeug would cut it at the limit, so read one byte more.
    """
    try:
        if request.content_length is not None:
            return request.get_data(cache=True)
        limit = current_app.config["MAX_CONTENT_LENGTH"]
        data = request.environ["wsgi.input"].read(limit + 1)
    except ClientTooSlow as exc:
        raise RequestTimeout(f"the request body did not arrive in time: {exc}") from None
    except HTTPException:
        raise  # 413 from werkzeug
    except Exception as exc:  # noqa: BLE001 - the WSGI server's own framing errors
        # e.g. gunicorn's InvalidChunkSize: the body's framing is broken, not the server.
        raise BadRequest(f"the request body could not be read: {type(exc).__name__}: "
                         f"{printable(str(exc))}") from None
    if len(data) > limit:
        raise RequestEntityTooLarge(
            f"the chunked request body is over the {limit}-byte limit")
    return data


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, 400 when a key repeats (json.loads would keep the last silently)."""
    body = dict(pairs)
    if len(body) != len(pairs):
        seen: set[str] = set()
        repeated = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"the key {printable(repeated)!r} appears more than once in one object")
    return body


def _refuse_lone_surrogates(body: dict[str, Any]) -> None:
    # `\ud800` escapes decode to text no UTF-8 consumer (the parser, SQLite) can take.
    try:
        _stdjson.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest("the request body is not valid Unicode: it escapes a lone "
                         f"surrogate (near character {exc.start} of the decoded body)") from None


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

