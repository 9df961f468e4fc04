"""The application factory: configuration, models, stores and blueprints, nothing global."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from . import errors, meta, openapi, predict, retrain, samples
from .config import load_config
from .state import build_state


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the costmodel service.

    Args:
        config: Overrides of `costmodel.api.config.defaults()`, e.g. `MODEL_PATHS`
            (`{(backend, target): folder}`), `SAMPLES_DB`, `RETRAIN_TOKEN`, `RETRAIN_DIR`,
            `MAX_CONTENT_LENGTH`, `TRAINING_DATA`, `DATABASE_URL`, `RETRAIN_RUNNER`.
            Environment variables (`costmodel.api.config.ENV`: `COSTMODEL_SAMPLES_DB`,
            `COSTMODEL_DATABASE_URL`, ...) sit between the defaults and this mapping.

    Example:
        >>> app = create_app({"SAMPLES_DB": "/tmp/samples.sqlite3"})
        >>> app.test_client().get("/healthz").status_code
        200
    """
    settings = load_config(config)
    app = Flask("costmodel.api", static_folder=None)
    app.config.from_mapping(settings)
    state = build_state(settings)
    app.extensions["costmodel"] = state

    errors.register(app)
    for module in (meta, predict, samples, retrain, openapi):
        app.register_blueprint(module.bp)

    @app.before_request
    def _pick_up_promotions() -> None:
        state.sync_models(every=float(settings["MODEL_SYNC_SECONDS"]))

    return app
