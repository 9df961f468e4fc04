"""Evaluation plots (PNG, matplotlib Agg): how predictions compare with measurements.

- `predicted_vs_measured`: held-out (leave-one-family-out) predictions against
  measurements on log axes, one panel per target.
- `error_by_family`: median fold error per held-out family, model against baselines.
- `scaling_curves`: measured compile time along one size knob (loop steps, unrolled vs
  scan; transformer depth), with the trained model's and the held-out predictions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.features import Placement

from ..fitting.estimator import LOG_OFFSETS, TARGETS
from ..fitting.fit import features_frame, normalized_seconds

UNITS = {"compile_seconds": "s", "peak_rss_bytes": "bytes", "executable_memory_bytes": "bytes"}
# (family, knob on the x axis, parameter that tells the curves apart)
CURVES = (("loop", "steps", "style"), ("transformer", "layers", "mode"))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _held_out(preds: pd.DataFrame, model: str = "costmodel") -> pd.DataFrame:
    return preds[(preds["split"] == "leave_family_out") & (preds["model"] == model)]


def predicted_vs_measured(preds: pd.DataFrame, path: Path, label: str = "cpu") -> Path:
    """Scatter of held-out predictions against measurements, log axes, 2x band shaded."""
    plt = _pyplot()
    chosen = _held_out(preds)
    fig, axes = plt.subplots(1, len(TARGETS), figsize=(6 * len(TARGETS), 5.5))
    families = sorted(chosen["family"].unique())
    colors = plt.get_cmap("tab20")(np.linspace(0, 1, max(len(families), 1)))
    for ax, target in zip(axes, TARGETS, strict=True):
        sub = chosen[chosen["target"] == target]
        offset = LOG_OFFSETS[target]
        for family, color in zip(families, colors, strict=False):
            part = sub[sub["family"] == family]
            ax.scatter(part["actual"] + offset, part["point"] + offset, s=9, alpha=0.7,
                       color=color, label=family)
        if len(sub):
            values = np.concatenate([sub["actual"], sub["point"]]) + offset
            lo, hi = values.min() / 1.5, values.max() * 1.5
            line = np.array([lo, hi])
            ax.plot(line, line, "k-", lw=1)
            ax.fill_between(line, line / 2, line * 2, color="grey", alpha=0.15, label="2x band")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
        ax.set_xscale("log")
        ax.set_yscale("log")
        shift = f" + {offset:.0f}" if offset else ""
        ax.set_xlabel(f"measured {target}{shift} ({UNITS[target]})")
        ax.set_ylabel(f"predicted ({UNITS[target]})")
        ax.set_title(f"{label}: {target}, family held out")
    axes[0].legend(fontsize=6, ncol=2, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def error_by_family(preds: pd.DataFrame, path: Path, target: str = "compile_seconds",
                    models: Sequence[str] = ("costmodel", "power_law", "linear")) -> Path:
    """Bars of the median held-out fold error per family, one bar per model."""
    plt = _pyplot()
    chosen = preds[(preds["split"] == "leave_family_out") & (preds["target"] == target)]
    offset = LOG_OFFSETS[target]
    # as floats: a fold whose rows came from JSON shards can carry object columns
    point, actual = (chosen[c].to_numpy(float) + offset for c in ("point", "actual"))
    fold = np.exp(np.abs(np.log(point / actual)))
    table = (chosen.assign(fold=fold).groupby(["family", "model"])["fold"].median()
             .unstack("model").reindex(columns=list(models)))
    table = table.sort_values(models[0], ascending=False)
    fig, ax = plt.subplots(figsize=(max(8, 0.55 * len(table)), 5))
    width = 0.8 / len(models)
    x = np.arange(len(table))
    for i, model in enumerate(models):
        ax.bar(x + i * width, table[model], width, label=model)
    ax.axhline(2.0, color="k", lw=0.8, ls="--")
    ax.set_yscale("log")
    ax.set_xticks(x + width * (len(models) - 1) / 2)
    ax.set_xticklabels(table.index, rotation=45, ha="right")
    ax.set_ylabel(f"median fold error of {target} (family held out)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _curve_rows(rows: pd.DataFrame, family: str, knob: str, series: str) -> dict:
    """Rows per series value along `knob`, all at one setting of the other parameters:
    the setting measured most often for every series value (so the curves compare)."""
    part = rows[rows["family"] == family].copy()  # consolidated: columns are added below
    if part.empty:
        return {}
    params = pd.DataFrame([json.loads(p) for p in part["params"]], index=part.index)
    if knob not in params or series not in params:
        return {}
    others = [c for c in params.columns if c not in (knob, series)]
    label = ""
    if others:
        counts = params.groupby(others + [series]).size().unstack(series, fill_value=0)
        setting = counts.assign(_min=counts.min(axis=1), _sum=counts.sum(axis=1)).sort_values(
            ["_min", "_sum"], ascending=False).index[0]
        setting = setting if isinstance(setting, tuple) else (setting,)
        mask = np.all([params[c] == v for c, v in zip(others, setting, strict=True)], axis=0)
        params = params[mask]
        label = ", ".join(f"{c}={v}" for c, v in zip(others, setting, strict=True))
    return {value: (part.loc[group.index].assign(_knob=group[knob]).sort_values("_knob"), label)
            for value, group in params.groupby(series)}


def measured_curves(rows: pd.DataFrame) -> dict[str, dict]:
    """For each family of `CURVES`: {series value: (rows along the knob, setting label)},
    the rows carrying `_knob` and `_seconds` (compile seconds at the median reference)."""
    seconds = pd.Series(normalized_seconds(rows)[0], index=rows.index)
    out = {}
    for family, knob, series in CURVES:
        curves = _curve_rows(rows, family, knob, series)
        out[family] = {value: (part.assign(_seconds=seconds.loc[part.index]), label)
                       for value, (part, label) in curves.items()}
    return out


def scaling_curves(rows: pd.DataFrame, preds: pd.DataFrame, estimator, path: Path) -> Path:
    """Compile time along loop steps (by style) and transformer depth (by mode): measured
    points, the trained model (solid), and predictions with the family held out (dashed).

    Measured points are shown at the median reference speed, as the model is trained: the
    raw seconds of rows swept under heavier load are several times too high (the H100
    rows' reference compile took 0.19-2.1 s), which made a 2-layer transformer forward
    look slower to compile (6.7 s) than a 16-layer one (4.2 s); normalized, 1.07 and 1.69 s.
    """
    plt = _pyplot()
    plotted = measured_curves(rows)
    held = _held_out(preds)
    held = held[held["target"] == "compile_seconds"].set_index("row")["point"]
    fig, axes = plt.subplots(1, len(CURVES), figsize=(7 * len(CURVES), 5))
    for ax, (family, knob, series) in zip(np.atleast_1d(axes), CURVES, strict=True):
        curves = plotted[family]
        colors = plt.get_cmap("tab10").colors
        for (value, (part, label)), color in zip(sorted(curves.items()), colors, strict=False):
            fitted = estimator.predict(features_frame(part))["compile_seconds"]
            ax.scatter(part["_knob"], part["_seconds"], color=color, s=18,
                       label=f"{series}={value} measured")
            ax.plot(part["_knob"], fitted["point"], color=color, lw=1.5, label="model")
            ax.fill_between(part["_knob"], fitted["lo"], fitted["hi"], color=color, alpha=0.12)
            positions = [i for i in part.index if i in held.index]
            if positions:
                ax.plot(part.loc[positions, "_knob"], held.loc[positions], color=color, ls="--",
                        lw=1, label="family held out")
            ax.set_title(f"{family}: {label}", fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(knob)
        ax.set_ylabel("compile seconds (at the median reference speed)")
        if curves:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, f"no {family} rows", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_all(preds: pd.DataFrame, rows: pd.DataFrame, estimator, folder: Path,
              label: str | None = None) -> list[Path]:
    """Write every plot into `folder`; returns the files written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if label is None:
        first = rows.iloc[0] if len(rows) else {"backend": "cpu", "target": ""}
        label = Placement(first["backend"], first["target"]).label
    rows = rows.reset_index(drop=True)
    measured, by_family, scaling = figure_paths(folder, label)
    return [predicted_vs_measured(preds, measured, label), error_by_family(preds, by_family),
            scaling_curves(rows, preds, estimator, scaling)]


def figure_paths(folder: Path, label: str) -> list[Path]:
    """Where `write_all` writes its plots for `label`, in the order it returns them."""
    return [Path(folder) / f"{stem}_{label}.png"
            for stem in ("predicted_vs_measured", "error_by_family", "scaling")]


def widening_figure_path(folder: Path, label: str, quantity: str = "compile_seconds") -> Path:
    """Where `interval_widening` draws `quantity`'s widening for `label`."""
    name = "interval_widening" if quantity == "compile_seconds" else f"interval_widening_{quantity}"
    return Path(folder) / f"{name}_{label}.png"


def interval_widening(bench: pd.DataFrame, corpus: pd.DataFrame | None, rule, path: Path,
                      label: str = "cpu", quantity: str = "compile_seconds") -> Path:
    """How far each program's `quantity` strayed, in units of its unwidened interval's
    log offset, against its distance from the training rows (`interval_widening`'s
    ratios), with the widened interval's edge (`rule.scale`): points under it are inside."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    if corpus is not None and len(corpus):
        ax.scatter(corpus["distance"], corpus["ratio"], s=8, color="grey", alpha=0.5,
                   label=f"corpus libraries held out ({len(corpus)})")
    for run, part in bench.groupby("bench", sort=True):
        ax.scatter(part["distance"], part["ratio"], s=18, alpha=0.8,
                   label=f"{run} ({len(part)})")
    distances = pd.concat([bench["distance"], corpus["distance"] if corpus is not None
                           else bench["distance"]])
    grid = np.linspace(max(distances.min(), 1e-3), distances.max() * 1.05, 200)
    ax.plot(grid, np.ones_like(grid), "k:", lw=1, label="interval as fitted")
    ax.plot(grid, rule.scale(grid), "k-", lw=1.5, label="widened interval")
    ax.set_yscale("log")
    ax.set_ylim(bottom=1e-2)  # programs a hundredth of their offset off are all alike here
    ax.set_xlabel("distance from the training rows (mean of 5 nearest, standardized log inputs)")
    ax.set_ylabel("|log error| / interval log offset")
    ax.set_title(f"{label} {quantity}: which programs fall outside the 90% interval")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
