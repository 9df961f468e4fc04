"""Service configuration: defaults, environment switches and a caller's mapping, validated once.

Every environment variable the service reads is read here and nowhere else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from costmodel.features import normalize_target

ENV = {
    "SAMPLES_DB": "COSTMODEL_SAMPLES_DB",
    "RETRAIN_TOKEN": "COSTMODEL_RETRAIN_TOKEN",
    "SAMPLES_TOKEN": "COSTMODEL_SAMPLES_TOKEN",
    "RETRAIN_DIR": "COSTMODEL_RETRAIN_DIR",
    "DATABASE_URL": "COSTMODEL_DATABASE_URL",
    "RETRAIN_RUNNER": "COSTMODEL_RETRAIN_RUNNER",
    "MAX_REQUESTS": "COSTMODEL_MAX_REQUESTS",
    "MAX_REQUESTS_JITTER": "COSTMODEL_MAX_REQUESTS_JITTER",
    "MAX_MODULE_OPS": "COSTMODEL_MAX_MODULE_OPS",
}
RUNNERS = ("thread", "worker")
_CACHE = Path("~/.cache/costmodel")


def _training_data_dir() -> Path:
    import costmodel.training

    return Path(costmodel.training.__file__).parent / "data"


def defaults() -> dict[str, Any]:
    """The configuration when neither the environment nor the caller says otherwise."""
    return {
        "MODEL_PATHS": None,            # {(backend, target): folder}; None: the shipped models
        "SAMPLES_DB": _CACHE / "samples.sqlite3",
        "DATABASE_URL": None,           # None: the SQLite file SAMPLES_DB; or postgresql://...
        "RETRAIN_TOKEN": None,          # None: retraining over HTTP is off
        "SAMPLES_TOKEN": None,          # None: storing and reading samples over HTTP is off
        "RETRAIN_DIR": None,            # None: a `models` folder beside SAMPLES_DB
        "TRAINING_DATA": [_training_data_dir()],
        "MAX_CONTENT_LENGTH": 8 * 2**20,
        "MAX_BATCH": 256,
        "HOLDOUT_FRACTION": 0.2,
        "RETRAIN_MIN_ROWS": 20,
        "RETRAIN_PARAMS": {},           # CompileCostModel arguments of a retrain's candidate
        "MODEL_SYNC_SECONDS": 2.0,      # how often a worker looks for models promoted elsewhere
        "RETRAIN_RUNNER": "thread",     # "thread": in the web worker; "worker": retrain-worker
        "RETRAIN_STALE_SECONDS": 60.0,  # a running job silent this long has lost its process
        # A worker is replaced after this many requests (0: never), give or take the jitter
        # (so workers do not restart together): what MLIR keeps of each request's attributes
        # for the life of its context is returned with the process.
        "MAX_REQUESTS": 1000,
        "MAX_REQUESTS_JITTER": 100,
        # Modules of more ops than this (counted from the text before parsing; 0: no limit)
        # are refused: extraction takes ~25 us of CPU per op, and a 200k-op module fits in
        # the body limit as compact text. JAX prints ~80 bytes per op, so a module it wrote
        # reaches this only near MAX_CONTENT_LENGTH.
        "MAX_MODULE_OPS": 100_000,
    }


def load_config(config: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Merge defaults < environment < `config` and validate the result.

    Raises:
        ValueError: a value has the wrong type or names an unknown backend/target.

    Example:
        >>> load_config({"SAMPLES_DB": "/tmp/s.sqlite3"})["MAX_CONTENT_LENGTH"]
        8388608
    """
    environ = os.environ if environ is None else environ
    merged = defaults()
    for key, variable in ENV.items():
        if environ.get(variable):
            merged[key] = environ[variable]
    merged.update(config or {})

    merged["SAMPLES_DB"] = Path(merged["SAMPLES_DB"]).expanduser()
    merged["DATABASE_URL"] = _database_url(merged["DATABASE_URL"], merged["SAMPLES_DB"])
    if merged["DATABASE_URL"].get_backend_name() != "sqlite" and not merged["RETRAIN_DIR"]:
        # Replicas load what another promoted from the path the store records.
        raise ValueError("a shared store needs RETRAIN_DIR: a model folder every replica and "
                         "retrain worker sees at the same path")
    retrain_dir = merged["RETRAIN_DIR"] or merged["SAMPLES_DB"].parent / "models"
    merged["RETRAIN_DIR"] = Path(retrain_dir).expanduser()
    merged["TRAINING_DATA"] = [Path(p).expanduser() for p in _as_list(merged["TRAINING_DATA"])]
    for key in ("RETRAIN_TOKEN", "SAMPLES_TOKEN"):
        merged[key] = _token(key, merged[key])
    if merged["SAMPLES_TOKEN"] is not None and merged["SAMPLES_TOKEN"] == merged["RETRAIN_TOKEN"]:
        # Whoever may send samples must not thereby be able to start a retrain.
        raise ValueError("SAMPLES_TOKEN must differ from RETRAIN_TOKEN")
    if not isinstance(merged["RETRAIN_PARAMS"], Mapping):
        raise ValueError("RETRAIN_PARAMS must map CompileCostModel arguments to values")
    for key in ("MAX_CONTENT_LENGTH", "MAX_BATCH", "RETRAIN_MIN_ROWS"):
        if not isinstance(merged[key], int) or isinstance(merged[key], bool) or merged[key] < 1:
            raise ValueError(f"{key} must be a positive integer, not {merged[key]!r}")
    if not 0.0 < float(merged["HOLDOUT_FRACTION"]) < 1.0:
        raise ValueError(f"HOLDOUT_FRACTION must lie in (0, 1), not {merged['HOLDOUT_FRACTION']!r}")
    if float(merged["MODEL_SYNC_SECONDS"]) < 0:
        raise ValueError("MODEL_SYNC_SECONDS must be >= 0")
    if not float(merged["RETRAIN_STALE_SECONDS"]) > 0:
        raise ValueError("RETRAIN_STALE_SECONDS must be > 0")
    for key in ("MAX_REQUESTS", "MAX_REQUESTS_JITTER", "MAX_MODULE_OPS"):
        merged[key] = _count(key, merged[key])
    if merged["MAX_REQUESTS_JITTER"] > merged["MAX_REQUESTS"]:
        raise ValueError(f"MAX_REQUESTS_JITTER ({merged['MAX_REQUESTS_JITTER']}) must not "
                         f"exceed MAX_REQUESTS ({merged['MAX_REQUESTS']})")
    if merged["RETRAIN_RUNNER"] not in RUNNERS:
        raise ValueError(f"RETRAIN_RUNNER must be one of {RUNNERS}, not {merged['RETRAIN_RUNNER']!r}")
    if merged["MODEL_PATHS"] is not None:
        merged["MODEL_PATHS"] = _model_paths(merged["MODEL_PATHS"])
    return merged


def _database_url(url: Any, samples_db: Path):
    """The store's SQLAlchemy URL: SQLite at `samples_db` unless a URL names another.

    A bare `postgresql://` gets the psycopg (3) driver, the one the `postgres` extra
    installs, rather than SQLAlchemy's default psycopg2.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if url is None:
        return make_url(f"sqlite:///{samples_db}")
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ValueError(f"DATABASE_URL is not a database URL: {exc}") from None
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ValueError(f"DATABASE_URL must be sqlite:///FILE or postgresql://..., not "
                         f"{parsed.get_backend_name()}")
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _count(key: str, value: Any) -> int:
    """A non-negative integer; from the environment it arrives as its decimal text."""
    if isinstance(value, str) and value.strip().isdecimal():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{key} must be an integer >= 0, not {value!r}")
    return value


def _token(key: str, token: Any) -> str | None:
    if token is not None and (not isinstance(token, str) or not token.strip()):
        raise ValueError(f"{key} must be a non-empty string (or unset to turn its routes off)")
    return token or None


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, (str, os.PathLike)):
        return [value]
    return list(value)


def _model_paths(paths: Any) -> dict[tuple[str, str], Path]:
    """`{(backend, target): folder}`; keys may also be "cpu" or "gpu/h100" strings."""
    if not isinstance(paths, Mapping):
        raise ValueError("MODEL_PATHS must map (backend, target) to an artifact folder")
    out = {}
    for key, path in paths.items():
        backend, target = key.split("/", 1) if isinstance(key, str) and "/" in key else (
            (key, None) if isinstance(key, str) else tuple(key))
        out[normalize_target(backend, target)] = Path(path).expanduser()
    return out
