"""Fitting the cost model to dataset rows: labels, drift normalization, train, retrain.

The estimator itself (`CompileCostModel`) lives in `estimator.py`, its baselines in
`baseline.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES

from .baseline import drift_power
from .dataset import FEATURE_PREFIX
from .estimator import (
    BACKEND_TERMS,
    DRIFT_TERMS,
    TARGETS,
    CompileCostModel,
    Table,
    augment,
)

if TYPE_CHECKING:
    from costmodel.models import Artifact


def normalized_seconds(rows: pd.DataFrame) -> tuple[np.ndarray, float]:
    """Compile seconds of dataset rows as if measured at the median reference time, and the
    power of `ref / median ref` divided out (fitted on these rows, within families).

    Rows are measured under varying load; this is the drift-free label evaluation uses.
    """
    seconds = pd.to_numeric(rows["compile_seconds"], errors="coerce").to_numpy(float)
    if "ref_seconds" not in rows:
        return seconds, 0.0
    ref = pd.to_numeric(rows["ref_seconds"], errors="coerce").to_numpy(float)
    keep = (seconds > 0) & (ref > 0)
    if keep.sum() < 3:
        return seconds, 0.0
    drift = np.where(ref > 0, np.log(np.where(ref > 0, ref, 1.0) / np.median(ref[keep])), 0.0)
    logs = augment(Table.of(features_frame(rows), MODEL_FEATURES)).log_counts(DRIFT_TERMS)
    power = drift_power(logs[keep], np.log(seconds[keep]), drift[keep],
                        families(rows)[keep])
    return seconds * np.exp(-power * drift), power


def select_rows(data: pd.DataFrame, backend: str, target: str = "") -> pd.DataFrame:
    """The ok rows measured for `backend` and `target`."""
    rows = data[(data["status"] == "ok") & (data["backend"] == backend)
                & (data["target"].fillna("") == (target or ""))]
    return rows.reset_index(drop=True)


def features_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Model inputs of dataset rows: one column per name of `MODEL_FEATURES`."""
    columns = {FEATURE_PREFIX + name: name for name in MODEL_FEATURES}
    missing = [c for c in columns if c not in rows.columns]
    if missing:
        raise ValueError(f"dataset lacks feature columns: {', '.join(missing)}")
    return rows.loc[:, list(columns)].rename(columns=columns).astype(float)


def families(rows: pd.DataFrame) -> np.ndarray:
    """Program family per row ("unknown" where a row has none)."""
    if "family" not in rows:
        return np.full(len(rows), "unknown", dtype=object)
    return rows["family"].fillna("unknown").astype(str).to_numpy()


def labels(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Label arrays by target (NaN where a row has none)."""
    return {t: pd.to_numeric(rows[t], errors="coerce").to_numpy(float)
            for t in TARGETS if t in rows.columns}


def model_params(backend: str, params: dict | None = None) -> dict:
    """`CompileCostModel` arguments for `backend`: its own size terms, then `params`."""
    return {**BACKEND_TERMS.get(backend, {}), **(params or {})}


def train(data: pd.DataFrame, backend: str, target: str = "", **params) -> CompileCostModel:
    """Fit a `CompileCostModel` on the ok rows of `data` for one backend and target.

    Example:
        >>> model = train(dataset.load("training/data/cpu/rows.parquet"), "cpu", "")
    """
    rows = select_rows(data, backend, target)
    if len(rows) == 0:
        raise ValueError(f"no ok rows for backend={backend!r} target={target!r}")
    reference = rows["ref_seconds"].to_numpy(float) if "ref_seconds" in rows else None
    model = CompileCostModel(**model_params(backend, params))
    return model.fit(features_frame(rows), labels(rows), groups=families(rows),
                     reference=reference)


def retrain(data: pd.DataFrame, backend: str, target: str, out: Path, name: str) -> Artifact:
    """Fit, evaluate (leave-one-family-out) and save an artifact at `out`, in minutes."""
    from costmodel.models import save

    from .evaluate import evaluate

    rows = select_rows(data, backend, target)
    estimator = train(rows, backend, target)
    metrics = evaluate(rows, backend, target, splits=("leave_family_out",),
                       models=("costmodel",))
    return save(estimator, out, backend=backend, target=target, data=rows, metrics=metrics,
                name=name)


def build_default(data_paths: Sequence[str | Path], backend: str = "cpu", target: str = "",
                  out: Path | None = None) -> Artifact:
    """Train on the named data, evaluate, and write the shipped model with plots and card.

    Writes to `costmodel.models.default_path(backend, target)` unless `out` is given.

    Example:
        >>> build_default(["training/data/cpu/rows.parquet"], "cpu")
    """
    from costmodel.models import default_path, save

    from . import dataset, plots
    from .evaluate import run_evaluation, write_card

    rows = select_rows(dataset.load(list(data_paths)), backend, target)
    out = Path(out) if out is not None else default_path(backend, target)
    result = run_evaluation(rows, backend, target)
    estimator = train(rows, backend, target)
    artifact = save(estimator, out, backend=backend, target=target, data=rows,
                    metrics=result.report, name=f"costmodel-{out.name}")
    figures = plots.write_all(result.predictions, rows, estimator, out)
    write_card(out / "MODEL_CARD.md", artifact.manifest, result.report, rows, figures,
               artifact)
    return artifact
