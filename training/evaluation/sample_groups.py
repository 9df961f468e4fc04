"""Untrusted samples weighed by what they are, not by how many were sent.

A sender can make one program look like many (a comment, a renamed value, a new location
gives each copy its own digest), and one sender can send more rows than every other
source together. Before screening and fitting, `weigh_samples`

- groups the untrusted rows by what the model sees of their program (backend, target and
  the model's feature vector: two texts that differ only in comments, locations or names
  extract to the same vector) and keeps one row per group, the one with the group's median
  compile time, under an id derived from the group, so the group as a whole is always on
  one side of the holdout split;
- caps the groups any one source (the client address the samples API recorded) brings, at
  a share of the trusted rows, keeping a stable choice (the lowest group digests).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..fitting.fit import features_frame

GROUP_PREFIX = "group-"
# One source's sample groups count at most this share of the trusted rows, and never
# fewer than MIN_SOURCE_ROWS (a service with little shipped data still learns).
SOURCE_SHARE = 0.5
MIN_SOURCE_ROWS = 50


@dataclass(frozen=True)
class Weighed:
    """The rows to screen and fit, and what weighing did to the samples."""

    rows: pd.DataFrame
    samples: int            # untrusted rows received
    groups: int             # distinct programs among them
    capped: int             # groups left out because their source brought too many


def program_groups(rows: pd.DataFrame) -> np.ndarray:
    """A digest per row of what the model sees of it: backend, target, model features
    (to 12 significant digits, so a float's last bit does not split a program)."""
    values = features_frame(rows).to_numpy(float)
    place = (rows["backend"].astype(str) + "|" + rows["target"].fillna("").astype(str))
    out = np.empty(len(rows), dtype=object)
    for i, (where, vector) in enumerate(zip(place.to_numpy(), values)):
        text = where + "|" + ",".join(f"{v:.12g}" for v in vector)
        out[i] = hashlib.sha256(text.encode()).hexdigest()
    return out


def weigh_samples(rows: pd.DataFrame, untrusted: np.ndarray, share: float = SOURCE_SHARE,
                  min_source_rows: int = MIN_SOURCE_ROWS) -> Weighed:
    """Trusted rows as they are, then one row per untrusted program group, at most
    `max(min_source_rows, share * trusted rows)` groups per source.

    Args:
        rows: Dataset rows of one backend/target; untrusted ones may carry "client".
        untrusted: Boolean mask of the rows sent by users (stored samples).
    """
    untrusted = np.asarray(untrusted, bool)
    trusted, sent = rows[~untrusted], rows[untrusted]
    if not len(sent):
        return Weighed(rows.reset_index(drop=True), 0, 0, 0)
    digests = program_groups(sent)
    seconds = pd.to_numeric(sent["compile_seconds"], errors="coerce").to_numpy(float)
    clients = (sent["client"].fillna("").astype(str).to_numpy() if "client" in sent
               else np.full(len(sent), "", dtype=object))
    kept, by_client = [], {}
    for digest in sorted(set(digests)):
        members = np.flatnonzero(digests == digest)  # in arrival order
        middle = members[np.argsort(seconds[members], kind="stable")[(len(members) - 1) // 2]]
        by_client.setdefault(clients[members[0]], []).append((digest, middle, len(members)))
    cap = max(int(min_source_rows), int(share * len(trusted)))
    for groups in by_client.values():
        kept.extend(groups[:cap])  # sorted by digest: the same choice in every job
    chosen = sent.iloc[[middle for _, middle, _ in kept]].copy()
    chosen["row_id"] = [GROUP_PREFIX + digest[:32] for digest, _, _ in kept]
    chosen["key"] = chosen["row_id"]
    chosen["copies"] = [count for _, _, count in kept]
    weighed = pd.concat([trusted, chosen], ignore_index=True, sort=False)
    groups = len(set(digests))
    return Weighed(weighed, len(sent), groups, groups - len(kept))
