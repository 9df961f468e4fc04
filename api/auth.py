"""Bearer tokens: each guarded route family has a token of its own, and is off without one."""

from __future__ import annotations

import hmac

from flask import current_app, request
from werkzeug.datastructures import WWWAuthenticate
from werkzeug.exceptions import Forbidden, Unauthorized

from .config import ENV


def require_token(key: str, what: str) -> None:
    """403 when config `key` (e.g. "SAMPLES_TOKEN") is unset, 401 unless the bearer matches it.

    `what` names the guarded routes in the 403 message ("retraining").
    """
    token = current_app.config[key]
    if token is None:
        raise Forbidden(f"{what} over HTTP is disabled on this server; the operator turns it "
                        f"on by setting {ENV[key]} (config {key})")
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    # compare_digest takes time independent of where the strings differ.
    if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode("utf-8", "surrogatepass"), token.encode("utf-8")):
        raise Unauthorized("missing or wrong token: send 'Authorization: Bearer <token>'",
                           www_authenticate=WWWAuthenticate("bearer", {"realm": "costmodel"}))
