"""A dataset row: one measured compile, flattened, with its program's key, and the writer
that appends rows to a JSON-lines shard durably. Sweeps, `costmodel.record` and the service's
samples write rows this way; `costmodel.training.store.dataset` reads them back.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone
from pathlib import Path

FEATURE_PREFIX = "f_"


def program_key(family: str, params: dict, backend: str, target: str) -> str:
    """The identity of a measurement: the same program on the same backend/target."""
    return f"{family}|{json.dumps(params, sort_keys=True)}|{backend}|{target}"


def make_row(family: str, params: dict, backend: str, target: str, result: dict,
             environment: dict) -> dict:
    """Flatten a measurement result into a dataset row."""
    row = {
        "key": program_key(family, params, backend, target),
        "row_id": uuid.uuid4().hex,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "family": family,
        "params": json.dumps(params, sort_keys=True),
        "backend": backend,
        "target": target,
    }
    features = result.get("features") or {}
    for name, value in result.items():
        if name == "features":
            continue
        row[name] = json.dumps(value) if isinstance(value, (list, dict)) else value
    row["backend"], row["target"] = backend, target
    row.update(environment)
    row.update(feature_cells(features))
    return row


def feature_cells(features: dict) -> dict:
    """A row's feature columns from `Features.to_dict()` (backend and target are columns of
    their own already)."""
    return {FEATURE_PREFIX + name: value for name, value in features.items()
            if name not in ("backend", "target")}


class ShardWriter:
    """Appends rows to one JSON-lines file; every row is on disk before `append` returns."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def append(self, row: dict) -> None:
        self._file.write(json.dumps(row, default=_json_default) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
