"""The dataset card: what was measured, where, how long it took, and how noisy it was."""

from __future__ import annotations

import json
from datetime import datetime

import numpy as np
import pandas as pd


def _span_minutes(data: pd.DataFrame) -> float:
    stamps = pd.to_datetime(data["measured_at"], utc=True)
    return (stamps.max() - stamps.min()).total_seconds() / 60


def _repeat_fold(data: pd.DataFrame) -> pd.Series:
    """Per-row fold error of individual repeats against their median (the noise floor)."""
    folds = []
    for values, median in zip(data["compile_seconds_all"], data["compile_seconds"]):
        times = json.loads(values) if isinstance(values, str) else list(values)
        if len(times) > 1 and median > 0:
            folds += [max(t / median, median / t) for t in times]
    return pd.Series(folds, dtype=float)


def summary(data: pd.DataFrame) -> dict:
    """Numbers the card reports, for one backend/target's rows."""
    ok = data[data["status"] == "ok"]
    ref = ok["ref_seconds"].astype(float)
    folds = _repeat_fold(ok)
    return {
        "rows": int(len(data)),
        "ok_rows": int(len(ok)),
        "statuses": data["status"].value_counts().to_dict(),
        "families": int(ok["family"].nunique()),
        "compile_seconds_min": float(ok["compile_seconds"].min()),
        "compile_seconds_median": float(ok["compile_seconds"].median()),
        "compile_seconds_max": float(ok["compile_seconds"].max()),
        "rows_over_10s": int((ok["compile_seconds"] >= 10).sum()),
        "rows_over_60s": int((ok["compile_seconds"] >= 60).sum()),
        "repeats_median": float(ok["repeats"].median()),
        "repeat_spread_median": float(ok["compile_seconds_spread"].median()),
        "repeat_fold_median": float(folds.median()) if len(folds) else float("nan"),
        "repeat_fold_p90": float(folds.quantile(0.9)) if len(folds) else float("nan"),
        "ref_seconds_median": float(ref.median()),
        "ref_seconds_p05_p95": [float(ref.quantile(0.05)), float(ref.quantile(0.95))],
        "ref_drift_p95_over_p05": float(ref.quantile(0.95) / ref.quantile(0.05)),
        "sweep_minutes": _span_minutes(data),
        "peak_rss_bytes_max": float(ok["peak_rss_bytes"].max()),
    }


def _machines(datasets: dict[str, pd.DataFrame]) -> str:
    """Each dataset's CPU kinds and core counts with their row counts: rows from several
    machines train one model (their reference compiles bring them to one speed)."""
    parts = []
    for name, df in datasets.items():
        counts = df.groupby([df["cpu_model"].fillna("?"), df["cpu_count"].fillna(0)]).size()
        kinds = ", ".join(f"{model} × {int(cores)} cores ({n} rows)"
                          for (model, cores), n in counts.sort_values(ascending=False).items())
        parts.append(f"{name}: {kinds}")
    return "; ".join(parts)


def render(datasets: dict[str, pd.DataFrame], notes: str = "") -> str:
    """Markdown card for several datasets keyed by name (e.g. 'cpu', 'gpu-h100')."""
    first = next(iter(datasets.values()))
    env = first.iloc[0]
    lines = [
        "# Dataset card: measured XLA compiles",
        "",
        f"Generated {datetime.utcnow().strftime('%Y-%m-%d %H:%M')} UTC by "
        "`costmodel.training.store.card`.",
        "",
        "## Where and with what",
        f"- Machines (rows measured on each, by dataset): {_machines(datasets)}; no GPU.",
        f"- jax {env.get('jax_version')}, jaxlib {env.get('jaxlib_version')}, "
        f"Python {env.get('python_version')}, XLA_FLAGS `{env.get('xla_flags') or ''}`.",
        f"- Harness versions: {', '.join(sorted(map(str, first['harness_version'].unique())))}.",
        "",
        "## What",
        "",
        "| dataset | rows | ok | families | compile s (min / median / max) | ≥10 s | ≥60 s |"
        " sweep minutes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    sums = {name: summary(df) for name, df in datasets.items()}
    for name, s in sums.items():
        lines.append(
            f"| {name} | {s['rows']} | {s['ok_rows']} | {s['families']} | "
            f"{s['compile_seconds_min']:.3f} / {s['compile_seconds_median']:.3f} / "
            f"{s['compile_seconds_max']:.1f} | {s['rows_over_10s']} | {s['rows_over_60s']} | "
            f"{s['sweep_minutes']:.0f} |")
    lines += ["", "Statuses: " + "; ".join(f"{n}: {s['statuses']}" for n, s in sums.items()),
              "", "## Noise", "",
              "| dataset | repeats (median) | repeat spread (max-min)/median, median |"
              " repeat fold vs median: median / p90 | reference program s: median (p5-p95) |"
              " reference drift p95/p5 |",
              "| --- | --- | --- | --- | --- | --- |"]
    for name, s in sums.items():
        lo, hi = s["ref_seconds_p05_p95"]
        lines.append(
            f"| {name} | {s['repeats_median']:.0f} | {s['repeat_spread_median']:.3f} | "
            f"{s['repeat_fold_median']:.3f} / {s['repeat_fold_p90']:.3f} | "
            f"{s['ref_seconds_median']:.3f} ({lo:.3f}-{hi:.3f}) | "
            f"{s['ref_drift_p95_over_p05']:.2f}× |")
    lines += ["", "## Per family", "", "| dataset | family | ok rows | compile s median | max |",
              "| --- | --- | --- | --- | --- |"]
    for name, df in datasets.items():
        ok = df[df["status"] == "ok"]
        for family, group in ok.groupby("family"):
            lines.append(f"| {name} | {family} | {len(group)} | "
                         f"{group['compile_seconds'].median():.3f} | "
                         f"{group['compile_seconds'].max():.2f} |")
    if notes:
        lines += ["", "## Notes", "", notes]
    return "\n".join(lines) + "\n"


def peak_rss_summary(data: pd.DataFrame) -> str:
    ok = data[data["status"] == "ok"]
    return f"peak RSS growth up to {np.nanmax(ok['peak_rss_bytes']) / 2**20:.0f} MiB"
