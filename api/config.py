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
}
_CACHE = Path("~/.cache/costmodel")


def _training_data_dir() -> Path:
    import costmodel.training

    return Path(costmodel.training.__file__).parent / "data"


def defaults() -> dict[str, Any]:
    """The configuration when neither the environment nor the caller says otherwise."""
    return {
        "MODEL_PATHS": None,            # {(backend, target): folder}; None: the shipped models
        "SAMPLES_DB": _CACHE / "samples.sqlite3",
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
    if merged["MODEL_PATHS"] is not None:
        merged["MODEL_PATHS"] = _model_paths(merged["MODEL_PATHS"])
    return merged


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
