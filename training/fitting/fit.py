"""Fitting the cost model to dataset rows: labels, drift normalization, train.

The estimator itself (`CompileCostModel`) lives in `estimator.py`, its baselines in
`baseline.py`; `training/build.py` trains, evaluates and saves a model in one call.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION
from costmodel.features.environment import chips, model_target
from costmodel.measure.rows import FEATURE_PREFIX

from ..store.dataset import behind_schema, with_added_features
from .baseline import drift_power
from .estimator import TARGETS, CompileCostModel, Table, augment
from .phase_model import fit_phase_shares
from .recipe import BACKEND_TERMS, DRIFT_TERMS

if TYPE_CHECKING:
    pass

# Fewest rows with a label that a target is fitted on (a power law needs two points).
# Recorded compiles and stored samples often lack some labels: each target trains on the
# rows that have it, and a target below this is left out of the model.
MIN_LABELLED_ROWS = 2


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
    """The ok rows measured for `backend` and `target`, and for every TPU topology of the
    chip `target` names (`v5e:2x2` rows train the `v5e` model)."""
    targets = data["target"].fillna("").map(lambda t: model_target(backend, t))
    rows = data[(data["status"] == "ok") & (data["backend"] == backend)
                & (targets == (target or ""))]
    return rows.reset_index(drop=True)


def features_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """Model inputs of dataset rows: one column per name of `MODEL_FEATURES`, then for TPU
    rows the placement inputs (`placement_frame`)."""
    columns = {FEATURE_PREFIX + name: name for name in MODEL_FEATURES}
    if any(c not in rows.columns for c in columns):  # rows of an earlier schema, not loaded
        rows = with_added_features(rows)            # through `dataset.load`
    missing = [c for c in columns if c not in rows.columns]
    if missing:
        raise ValueError(f"dataset lacks feature columns: {', '.join(missing)}")
    frame = rows.loc[:, list(columns)].rename(columns=columns).astype(float)
    if len(rows) and "backend" in rows and (rows["backend"] == "tpu").all():
        frame = pd.concat([frame, placement_frame(rows).set_axis(frame.index)], axis=1)
    return frame


def fit_inputs(rows: pd.DataFrame) -> pd.DataFrame:
    """`features_frame` of rows a model of this schema is fitted on: every input known
    (an FFT row recorded by an earlier schema lacks what this one added)."""
    frame = features_frame(rows)
    stale = frame.isna().any(axis=1).to_numpy() | behind_schema(rows)
    if stale.any():
        raise ValueError(
            f"{int(stale.sum())} rows lack model inputs this feature schema added or "
            f"changed (an FFT or a select recorded before schema {SCHEMA_VERSION}, e.g. "
            f"{rows['key'][stale].iloc[0]}); lower them again: python -m "
            "costmodel.training.measure.reextract FILE --stale-only")
    return frame


def placement_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """`PLACEMENT_INPUTS` of dataset rows: chips from each row's target, the sharding from
    the columns the measurement wrote (none sharded where a row predates them)."""
    def column(name: str) -> np.ndarray:
        values = rows[name] if name in rows else pd.Series(np.nan, index=rows.index)
        return pd.to_numeric(values, errors="coerce").fillna(0.0).to_numpy(float)

    out = {"chips": rows["target"].fillna("").map(chips).to_numpy(float),
           "sharded_args": column("sharded_args"),
           "sharded_input_share": column("sharded_input_share")}
    return pd.DataFrame(out)


def families(rows: pd.DataFrame) -> np.ndarray:
    """Program family per row ("unknown" where a row has none)."""
    if "family" not in rows:
        return np.full(len(rows), "unknown", dtype=object)
    return rows["family"].fillna("unknown").astype(str).to_numpy()


def libraries(rows: pd.DataFrame) -> np.ndarray:
    """The public library each row's program is built from ("" for synthetic families):
    the `library` column measured rows carry (`Family.library`)."""
    if "library" not in rows:
        return np.full(len(rows), "", dtype=object)
    return rows["library"].fillna("").astype(str).to_numpy()


def holdout_groups(rows: pd.DataFrame) -> np.ndarray:
    """What the interval's out-of-fold residuals hold out together: a real program's
    library (so intervals are as wide as a new library's errors), else its family."""
    library = libraries(rows)
    return np.where(library != "", library, families(rows))


# Training options that are not `CompileCostModel` arguments, with their defaults: how
# much a program built with a public library counts against a synthetic family's
# (`row_weights`). Real programs are what users compile; at 3 (against 1), holding each
# library out, median fold 1.318 -> 1.306, p90 2.05 -> 1.96 on the first 160 real rows.
ROW_OPTIONS = {"real_weight": 3.0}


def row_weights(library: np.ndarray, real_weight: float = ROW_OPTIONS["real_weight"]
                ) -> np.ndarray:
    """Each row's weight in a fit, from its `libraries` entry: `real_weight` for a real
    program, 1 for a synthetic family's."""
    return np.where(np.asarray(library) != "", float(real_weight), 1.0)


def split_options(params: dict | None) -> tuple[dict, dict]:
    """`params` as (`CompileCostModel` arguments, row options: `ROW_OPTIONS` updated)."""
    params = dict(params or {})
    return ({k: v for k, v in params.items() if k not in ROW_OPTIONS},
            {k: params.get(k, default) for k, default in ROW_OPTIONS.items()})


def labels(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Label arrays by target (NaN where a row has none)."""
    return {t: pd.to_numeric(rows[t], errors="coerce").to_numpy(float)
            for t in TARGETS if t in rows.columns}


def usable_labels(target: str, values: np.ndarray) -> np.ndarray:
    """Which values can train `target`: finite and not negative (compile time positive)."""
    keep = np.isfinite(values) & (values >= 0)
    return keep & (values > 0) if target == "compile_seconds" else keep


def label_counts(rows: pd.DataFrame) -> dict[str, int]:
    """Rows with a usable label, per target (0 where the column is missing)."""
    present = labels(rows)
    return {t: int(usable_labels(t, present[t]).sum()) if t in present else 0
            for t in TARGETS}


def untrainable_targets(rows: pd.DataFrame) -> dict[str, int]:
    """Targets with fewer than `MIN_LABELLED_ROWS` usable labels, and how many they have:
    what `train` leaves out of the model."""
    return {t: n for t, n in label_counts(rows).items() if n < MIN_LABELLED_ROWS}


def model_params(backend: str, params: dict | None = None) -> dict:
    """`CompileCostModel` arguments for `backend`: its own size terms, then `params`."""
    return {**BACKEND_TERMS.get(backend, {}), **(params or {})}


def train(data: pd.DataFrame, backend: str, target: str = "", **params) -> CompileCostModel:
    """Fit a `CompileCostModel` on the ok rows of `data` for one backend and target.

    Each target trains on the rows that have its label; targets with too few such rows
    are left out (`untrainable_targets` names them). Compile time cannot be left out.
    Rows with a traced compile also fit the model's phase shares (what a per-part
    calibration weighs by).

    Example:
        >>> model = train(dataset.load("training/data/cpu/rows.parquet"), "cpu", "")
    """
    rows = select_rows(data, backend, target)
    if len(rows) == 0:
        raise ValueError(f"no ok rows for backend={backend!r} target={target!r}")
    missing = untrainable_targets(rows)
    if "compile_seconds" in missing:
        raise ValueError(f"too few rows with a compile_seconds label "
                         f"({missing['compile_seconds']}; need {MIN_LABELLED_ROWS})")
    y = {t: v for t, v in labels(rows).items() if t not in missing}
    reference = (pd.to_numeric(rows["ref_seconds"], errors="coerce").to_numpy(float)
                 if "ref_seconds" in rows else None)
    params, options = split_options(params)
    model = CompileCostModel(**model_params(backend, params))
    library = libraries(rows)
    model.fit(fit_inputs(rows), y, groups=holdout_groups(rows), reference=reference,
              sample_weight=row_weights(library, **options), interval_rows=library != "")
    model.predictor_ = replace(model.predictor_, phase_shares=fit_phase_shares(rows))
    return model
