"""`costmodel serve`: the HTTP API on the shipped or named models; `costmodel
retrain-worker`: the process that runs its queued retrain jobs."""

from __future__ import annotations

from pathlib import Path

from .common import shipped_models


def served_models(paths: list[str]) -> dict[tuple[str, str], Path] | None:
    """`MODEL_PATHS` for the service: the shipped models, replaced by each --model for the
    backend and target its manifest names (None: no --model, the shipped ones)."""
    from costmodel.models import default_path, verify

    if not paths:
        return None
    models = {key: default_path(*key) for key in shipped_models()}
    for path in paths:
        manifest = verify(path)  # checked without unpickling, before any worker starts
        models[(manifest["backend"], manifest["target"])] = Path(path)
    return models


def cmd_serve(args) -> int:
    from costmodel.api.serve import serve

    models = served_models(args.model)
    # Unset thread and timeout options leave serve()'s own defaults in force.
    tuning = {name: value for name, value in (("threads", args.threads),
                                              ("read_timeout", args.read_timeout))
              if value is not None}
    serve(host=args.host, port=args.port, workers=args.workers,
          config=None if models is None else {"MODEL_PATHS": models}, **tuning)
    return 0


def cmd_retrain_worker(args) -> int:
    import logging

    from costmodel.api.retrain_worker import run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    models = served_models(args.model)
    run_worker(None if models is None else {"MODEL_PATHS": models}, poll_seconds=args.poll,
               once=args.once)
    return 0
