"""Run the service under gunicorn, the real WSGI server behind `costmodel serve`."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from gunicorn.app.base import BaseApplication

from .worker import DEFAULT_READ_TIMEOUT

# Enough that 50 clients stalled half way through a request leave threads to spare.
DEFAULT_THREADS = 64


class _Server(BaseApplication):
    """A gunicorn application whose workers each build their own app with `create_app`."""

    def __init__(self, options: dict[str, Any], config: Mapping[str, Any] | None,
                 read_timeout: float) -> None:
        self.options = options
        self.app_config = dict(config) if config is not None else None
        self.read_timeout = read_timeout  # read by ServiceWorker for each connection
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self):
        # Called in each worker after the fork: models, store connections and retrain
        # threads belong to the worker that uses them.
        from threadpoolctl import threadpool_limits

        from .app import create_app

        app = create_app(self.app_config)
        # After create_app, so the OpenMP runtime the models pulled in is covered. The
        # worker's threads serve requests side by side; threads per prediction only contend.
        threadpool_limits(1)
        _warm_up(app)
        return app


_WARM_UP_MODULE = """func.func public @main(%arg0: tensor<f32>) -> tensor<f32> {
  return %arg0 : tensor<f32>
}
"""


def _warm_up(app) -> None:
    """Pay for importing jax, building the MLIR context and a first prediction per model
    while the worker boots, not on some client's first request (about a second)."""
    from costmodel._predict import predict_features
    from costmodel.features import Features, from_stablehlo

    try:
        features = from_stablehlo(_WARM_UP_MODULE)
        for (backend, target), artifact in app.extensions["costmodel"].registry.items():
            predict_features(Features(features.values, backend, target), model=artifact)
    except Exception:  # noqa: BLE001 - a slower first request beats a worker that won't boot
        logging.getLogger("costmodel.api").exception("warm-up failed")


def _known_settings() -> set[str]:
    from gunicorn.config import KNOWN_SETTINGS

    return {setting.name for setting in KNOWN_SETTINGS}


def gunicorn_settings(host: str, port: int, workers: int, threads: int,
                      config: Mapping[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """The gunicorn settings `serve` runs with; `options` override the computed ones.

    Worker recycling (`max_requests`, `max_requests_jitter`) comes from the service
    configuration (MAX_REQUESTS, MAX_REQUESTS_JITTER), checked here before any worker starts.
    """
    from .config import load_config

    if workers < 1 or threads < 1:
        raise ValueError(f"workers and threads must be >= 1, not {workers} and {threads}")
    service = load_config(config)
    settings = {"bind": f"{host}:{port}", "workers": workers, "threads": threads,
                "worker_class": "costmodel.api.worker.ServiceWorker",
                "proc_name": "costmodel-api", "timeout": 60, "graceful_timeout": 10,
                "max_requests": service["MAX_REQUESTS"],
                "max_requests_jitter": service["MAX_REQUESTS_JITTER"]}
    if "control_socket_disable" in _known_settings():
        # gunicorn >= 25.1 opens a runtime-control socket at one fixed path per user, which
        # two services on a host would fight over; nothing here uses it.
        settings["control_socket_disable"] = True
    settings.update(options)
    return settings


def serve(host: str = "127.0.0.1", port: int = 8000, workers: int = 2,
          config: Mapping[str, Any] | None = None, threads: int = DEFAULT_THREADS,
          read_timeout: float = DEFAULT_READ_TIMEOUT, **options: Any) -> None:
    """Serve the API with gunicorn until interrupted (SIGINT or SIGTERM stop it gracefully).

    Args:
        host: Interface to bind; the loopback default keeps the service private.
        port: TCP port (0 picks a free one).
        workers: gunicorn worker processes; each loads the models once.
        config: Passed to `create_app` in every worker.
        threads: Request threads per worker. A client that sends half a request holds one
            until `read_timeout`; idle connections wait on the poller and hold none.
        read_timeout: Seconds a request may take to arrive once its first bytes are in;
            slower ones get 408.
        **options: Further gunicorn settings, e.g. `timeout=60`, `accesslog="-"`.

    Example:
        >>> serve("127.0.0.1", 8000, workers=2, config={"SAMPLES_DB": "/var/lib/cm.sqlite3"})
    """
    if not read_timeout > 0:
        raise ValueError(f"read_timeout must be > 0 seconds, not {read_timeout}")
    settings = gunicorn_settings(host, port, workers, threads, config, **options)
    # For libraries a worker loads later than create_app (inherited through the fork).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _Server(settings, config, read_timeout).run()
