"""What a service process holds: configuration, served models and the store, built once.

A web worker keeps it in `app.extensions["costmodel"]`; a retrain worker builds the same
state without Flask, so both compare candidates with the same served models.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .db import Database
from .jobs import JobStore
from .registry import ModelRegistry
from .samples import SampleStore, max_sample_bytes
from .validation import RequestModels, request_models


@dataclass
class ServiceState:
    """Everything a worker holds."""

    config: dict[str, Any]
    registry: ModelRegistry
    samples: SampleStore
    jobs: JobStore
    requests: RequestModels  # the request bodies with this server's limits
    threads: dict[str, threading.Thread] = field(default_factory=dict)

    def sync_models(self, every: float) -> None:
        """Serve models promoted by other processes; at most once per `every` seconds."""
        self.registry.sync(self.jobs, self.config["RETRAIN_DIR"], every=every)


def build_state(settings: dict[str, Any]) -> ServiceState:
    """Open the store named by validated `settings` (`config.load_config`), load the
    configured models, then any promoted since (by jobs of earlier runs or other processes)
    that replace the ones they beat."""
    db = Database(settings["DATABASE_URL"])
    state = ServiceState(settings, ModelRegistry(), SampleStore(db),
                         JobStore(db, settings["RETRAIN_STALE_SECONDS"]),
                         request_models(settings["MAX_BATCH"], max_sample_bytes()))
    state.registry.load_initial(settings["MODEL_PATHS"])
    state.sync_models(every=0.0)
    return state
