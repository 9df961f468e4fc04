"""Dataset rows: one measured compile each, appended durably, merged by key.

Sweeps append rows to JSON-lines shards (one line per row, flushed and fsynced, by
`costmodel.measure.rows`), so a killed sweep loses at most the programs in flight and a torn
last line is skipped on read. Shipped data is compacted to parquet. Feature columns carry
the prefix `f_`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.measure.rows import FEATURE_PREFIX

LABELS = ("compile_seconds", "peak_rss_bytes", "executable_memory_bytes")
STATUSES = ("ok", "timeout", "oom", "error", "cache_hit")
# Columns holding JSON text (a list per row) that not every source writes.
JSON_COLUMNS = ("compile_seconds_all",)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Rows of one shard; a torn or garbled line (a kill mid-write) is skipped."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def shard_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every .jsonl and .parquet file named, or found below a named folder."""
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".parquet"))
        elif path.exists():
            files.append(path)
        else:
            raise FileNotFoundError(f"no dataset file or folder at {path}")
    return files


def load(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> pd.DataFrame:
    """All rows of the named shards and folders, one row per `row_id`."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    frames = []
    for file in shard_files(paths):
        if file.suffix == ".parquet":
            frames.append(pd.read_parquet(file))
        else:
            frames.append(pd.DataFrame(read_jsonl(file)))
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=["key", "row_id", "status"])
    data = pd.concat(frames, ignore_index=True, sort=False)
    # phases are absent in older rows, and a shard whose phases are all missing reads as object
    data = data.astype({name: float for name in data
                        if name.startswith("phase_") and name.endswith("_seconds")})
    data = with_added_features(_with_missing_values(data))
    return data.drop_duplicates("row_id", keep="first").reset_index(drop=True)


def _with_missing_values(data: pd.DataFrame) -> pd.DataFrame:
    """Labels as numbers (NaN where a row has none) and JSON-text columns as text or None:
    shards that lack a column (recorded compiles, samples) leave NaN there after concat."""
    for name in (*LABELS, "ref_seconds"):
        if name in data:
            data[name] = pd.to_numeric(data[name], errors="coerce")
    for name in JSON_COLUMNS:
        if name in data:
            column = data[name].astype(object)
            data[name] = column.where(column.notna(), None)
    return data


def with_added_features(data: pd.DataFrame) -> pd.DataFrame:
    """Rows an earlier feature schema recorded, with the features later ones added: zero,
    and the row of this schema, where the op they measure is absent; NaN (lower it again:
    `costmodel.training.measure.reextract --stale-only`) where it is present. A row a
    later version changed nothing for (`CHANGED`: the op absent) is of that version."""
    from costmodel.features.schema import ADDED, CHANGED

    column = FEATURE_PREFIX + "schema_version"
    if column not in data:
        return data
    version = pd.to_numeric(data[column], errors="coerce")
    for added, (names, op) in ADDED.items():
        older = version < added
        if not older.any():
            continue
        counts = data[FEATURE_PREFIX + op] if FEATURE_PREFIX + op in data else 0.0
        absent = older & (pd.to_numeric(counts, errors="coerce").fillna(0.0) == 0)
        new = [FEATURE_PREFIX + name for name in names if FEATURE_PREFIX + name not in data]
        if new:  # at once: one column at a time fragments a frame of 200 columns
            data = pd.concat([data, pd.DataFrame(float("nan"), index=data.index,
                                                 columns=new)], axis=1)
        data.loc[absent, [FEATURE_PREFIX + name for name in names]] = 0.0
        version = version.where(~absent, added)
    for changed, op in sorted(CHANGED.items()):  # the same where the op is absent
        counts = data[FEATURE_PREFIX + op] if FEATURE_PREFIX + op in data else 0.0
        absent = (version == changed - 1) & (
            pd.to_numeric(counts, errors="coerce").fillna(0.0) == 0)
        version = version.where(~absent, changed)
    data[column] = version.where(version.notna(), data[column])
    return data


def behind_schema(data: pd.DataFrame) -> np.ndarray:
    """Whether each row, read through `with_added_features`, is still of an earlier feature
    schema: one that lacks inputs added since, or holds an op whose inputs changed since
    (lower it again: `costmodel.training.measure.reextract --stale-only`)."""
    from costmodel.features.schema import ADDED, CHANGED, SCHEMA_VERSION

    column = FEATURE_PREFIX + "schema_version"
    if column not in data:
        return np.zeros(len(data), bool)
    ops = {FEATURE_PREFIX + op for op in (*CHANGED.values(), *(op for _, op in ADDED.values()))}
    version = with_added_features(data[[column, *sorted(ops & set(data.columns))]].copy())
    return (pd.to_numeric(version[column], errors="coerce") < SCHEMA_VERSION).to_numpy()


def done_keys(paths: Iterable[str | os.PathLike], skip_errors: bool = False) -> set[str]:
    """Keys already measured in the given shards: what a resumed sweep skips.

    With `skip_errors`, keys whose only rows are `error` don't count as done (retry them).
    """
    keys: set[str] = set()
    for file in shard_files(paths):
        if file.suffix == ".parquet":
            rows = pd.read_parquet(file, columns=["key", "status"]).to_dict("records")
        else:
            rows = read_jsonl(file)
        keys.update(row["key"] for row in rows
                    if "key" in row and not (skip_errors and row.get("status") == "error"))
    return keys


def export_parquet(data: pd.DataFrame, path: str | os.PathLike) -> Path:
    """Write rows to one parquet file (the shipped, compact form)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data.to_parquet(path, index=False)
    return path


def feature_columns(data: pd.DataFrame) -> list[str]:
    return [c for c in data.columns if c.startswith(FEATURE_PREFIX)]


def fingerprint(data: pd.DataFrame) -> str:
    """A short hash of which rows a model was trained on."""
    import hashlib

    digest = hashlib.sha256()
    for row_id in sorted(map(str, data["row_id"])):
        digest.update(row_id.encode())
    return digest.hexdigest()[:16]
