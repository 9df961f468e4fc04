"""The application factory: configuration, models, stores and blueprints, nothing global."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Flask

from . import errors, meta, openapi, predict, retrain, samples
from .config import load_config
from .db import Database
from .jobs import JobStore
from .registry import ModelRegistry
from .samples import SampleStore, max_sample_bytes
from .validation import RequestModels, request_models


@dataclass
class ServiceState:
    """Everything a worker holds, kept in `app.extensions["costmodel"]`."""

    config: dict[str, Any]
    registry: ModelRegistry
    samples: SampleStore
    jobs: JobStore
    requests: RequestModels  # the request bodies with this server's limits
    threads: dict[str, threading.Thread] = field(default_factory=dict)


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """Build the costmodel service.

    Args:
        config: Overrides of `costmodel.api.config.defaults()`, e.g. `MODEL_PATHS`
            (`{(backend, target): folder}`), `SAMPLES_DB`, `RETRAIN_TOKEN`, `RETRAIN_DIR`,
            `MAX_CONTENT_LENGTH`, `TRAINING_DATA`. Environment variables
            `COSTMODEL_SAMPLES_DB`, `COSTMODEL_RETRAIN_TOKEN` and `COSTMODEL_RETRAIN_DIR`
            sit between the defaults and this mapping.

    Example:
        >>> app = create_app({"SAMPLES_DB": "/tmp/samples.sqlite3"})
        >>> app.test_client().get("/healthz").status_code
        200
    """
    settings = load_config(config)
    app = Flask("costmodel.api", static_folder=None)
    app.config.from_mapping(settings)
    db = Database(settings["SAMPLES_DB"])
    state = ServiceState(settings, ModelRegistry(), SampleStore(db), JobStore(db),
                         request_models(settings["MAX_BATCH"], max_sample_bytes()))
    state.registry.load_initial(settings["MODEL_PATHS"])
    # Models promoted by retrain jobs of earlier runs (or other workers) replace the
    # shipped ones they beat.
    state.registry.sync(state.jobs, settings["RETRAIN_DIR"], every=0.0)
    app.extensions["costmodel"] = state

    errors.register(app)
    for module in (meta, predict, samples, retrain, openapi):
        app.register_blueprint(module.bp)

    @app.before_request
    def _pick_up_promotions() -> None:
        state.registry.sync(state.jobs, settings["RETRAIN_DIR"],
                            every=float(settings["MODEL_SYNC_SECONDS"]))

    return app
