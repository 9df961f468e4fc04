"""Held-out scores of a TPU model by placement: single-chip rows apart from sharded ones
(a topology target, `v5e:2x2` or `v5e:4x4`), and the sharded ones by chip count and
sharding strategy. A sharded row is held out with its library's single-chip rows."""

from __future__ import annotations

import pandas as pd

from costmodel.features.environment import chips

from . import metrics
from .evaluate import score

SPLIT = "leave_library_out"


def groups(rows: pd.DataFrame) -> dict[str, set]:
    """Row keys of each scored group; empty when no row is sharded."""
    n = rows["target"].fillna("").map(chips)
    if not (n > 1).any():
        return {}
    strategy = rows["sharding"].fillna("") if "sharding" in rows else pd.Series("", rows.index)
    out = {"single chip": set(rows["key"][n == 1]), "sharded, 4-16 chips": set(rows["key"][n > 1])}
    for count in sorted(set(n[n > 1])):
        out[f"sharded, {count} chips"] = set(rows["key"][n == count])
    for name in sorted(set(strategy[n > 1]) - {""}):
        out[f"sharded, {name}"] = set(rows["key"][(n > 1) & (strategy == name)])
    return out


def scores(predictions: pd.DataFrame, rows: pd.DataFrame) -> dict:
    """`{group: {model: metrics}}` of held-out compile-time predictions (`predictions` with
    each row's `key`, as `evaluate.with_keys` gives them) on the real programs' rows."""
    chosen = predictions[(predictions["split"] == SPLIT)
                         & (predictions["target"] == "compile_seconds")]
    out = {}
    for name, keys in groups(rows).items():
        part = chosen[chosen["key"].isin(keys)]
        out[name] = {model: score(part[part["model"] == model])
                     for model in sorted(part["model"].unique())}
    return out


def card_section(by_placement: dict | None) -> list[str]:
    """The model card's lines for `scores`, none without sharded rows."""
    if not by_placement:
        return []
    lines = ["## Single chip and sharded", "",
             "Compile time with each library held out (real programs; a sharded program is "
             "held out with its library's one-chip programs), by where it compiles:", "",
             "| rows | model | median fold | p90 fold | within 2x | Spearman | 90% coverage "
             "| n |", "|" + " --- |" * 8]
    for group, models in by_placement.items():
        for model, m in models.items():
            cells = [group, model] + ["-" if m.get(k) is None else f"{m[k]:.3g}"
                                      for k in metrics.METRIC_NAMES] + [str(m["n"])]
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]
