"""Fit the part models of a TPU device correction (`costmodel.models.device_correction.
PartModels`) and score them with each library held out.

libtpu's log splits each compile into HLO passes, backend passes and code generation
(`measure/tpu_phases.py`); the sweep machine's rows carrying it (`--phase-rows`) train one
boosted model per part of `phase_shares.PARTS` on the model inputs. The chip's host runs
each part at its own speed (HLO passes on one slow core, backend work spread over its
cores), so its seconds are the parts' predictions, each times a factor fitted on the
programs compiled on the chip. Held out, a program's parts come from models fitted
without its library, and its factors from the other libraries' held-out parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES
from costmodel.measure.phases import part_seconds
from costmodel.models.device_correction import PartModels
from costmodel.models.forest import FlatForest
from costmodel.models.phase_shares import PARTS

# A few hundred rows per part: deeper than the step's trees, as the parts' seconds follow
# the whole program (the step reads a handful of counts and corrects a prediction).
BOOSTER = {"max_depth": 4, "max_iter": 300, "learning_rate": 0.05, "min_samples_leaf": 8,
           "l2_regularization": 1.0, "random_state": 0}
FLOOR_SECONDS = 1e-3  # a part the log showed at ~0 s: its log needs a floor
# The blend's weight on the part models against the step (log space), chosen on the v5e
# pairs held out by library (bench/FINDINGS.md, "The chip's host, part by part").
WEIGHT = 0.5
SYNTHETIC = "synthetic"


@dataclass
class PartRows:
    """Sweep rows with a usable phase split: log1p model inputs, log seconds of each part
    and the library (`synthetic` for the built-in families)."""

    X: np.ndarray
    Y: np.ndarray
    libraries: np.ndarray

    def __len__(self) -> int:
        return len(self.Y)


def inputs_of(frame: pd.DataFrame, prefix: str = "") -> np.ndarray:
    """log1p of the model inputs, in `MODEL_FEATURES` order (as `PartModels` reads them)."""
    values = frame[[prefix + name for name in MODEL_FEATURES]].to_numpy(float)
    return np.log1p(np.nan_to_num(values, nan=0.0).clip(min=0))


def part_rows(rows: pd.DataFrame) -> PartRows:
    """The ok rows of `rows` whose compile libtpu's log (or a trace) split into parts; a
    program measured more than once keeps its latest row."""
    ok = rows[rows["status"] == "ok"]
    if "measured_at" in ok.columns:
        ok = ok.sort_values("measured_at")
    ok = ok.drop_duplicates("key", keep="last")
    split = [part_seconds(record) for record in ok.to_dict("records")]
    keep = np.array([s is not None for s in split], bool)
    if not keep.any():
        raise ValueError("no phase row has a usable split of its compile into parts")
    seconds = np.array([[s[p] for p in PARTS] for s in split if s is not None], float)
    libraries = ok["library"].fillna("").replace("", SYNTHETIC).to_numpy()[keep]
    return PartRows(inputs_of(ok[keep], "f_"), np.log(seconds.clip(min=FLOOR_SECONDS)),
                    libraries)


def _boosters(rows: PartRows, train: np.ndarray) -> list:
    from sklearn.ensemble import HistGradientBoostingRegressor

    return [HistGradientBoostingRegressor(**BOOSTER).fit(rows.X[train], rows.Y[train, j])
            for j in range(len(PARTS))]


def fit_factors(seconds: np.ndarray, chip: np.ndarray) -> np.ndarray:
    """Per-part factors minimising the absolute log error of `seconds @ factors` against
    the chip's seconds (robust to the few programs one host handles unlike the other)."""
    from scipy.optimize import minimize

    target = np.log(chip)

    def loss(log_factors: np.ndarray) -> float:
        return float(np.abs(np.log(seconds @ np.exp(log_factors)) - target).sum())

    start = np.full(seconds.shape[1], np.median(target - np.log(seconds.sum(axis=1))))
    found = minimize(loss, start, method="Nelder-Mead",
                     options={"maxiter": 4000, "xatol": 1e-5, "fatol": 1e-8})
    return np.exp(found.x)


def held_out_parts(rows: PartRows, X: np.ndarray, libraries: np.ndarray) -> np.ndarray:
    """Each program's part seconds (rows: programs of `X`) from models fitted on the phase
    rows of the other libraries."""
    out = np.zeros((len(X), len(PARTS)))
    for library in np.unique(libraries):
        test = libraries == library
        for j, booster in enumerate(_boosters(rows, rows.libraries != library)):
            out[test, j] = np.exp(booster.predict(X[test]))
    return out


def held_out_log_seconds(parts: np.ndarray, chip: np.ndarray,
                         libraries: np.ndarray) -> np.ndarray:
    """log chip-host seconds of each program: its held-out parts times factors fitted on
    the other libraries' programs."""
    out = np.zeros(len(chip))
    for library in np.unique(libraries):
        test = libraries == library
        factors = fit_factors(parts[~test], chip[~test])
        out[test] = np.log(parts[test] @ factors)
    return out


def fit_part_models(rows: PartRows, held_parts: np.ndarray, chip: np.ndarray) -> PartModels:
    """Part models on every phase row; factors from every program's held-out parts (what
    an unseen program's parts look like to them)."""
    boosters = _boosters(rows, np.ones(len(rows), bool))
    return PartModels(parts=PARTS, feature_names=tuple(MODEL_FEATURES),
                      forests=tuple(FlatForest.from_booster(b) for b in boosters),
                      factors=tuple(float(f) for f in fit_factors(held_parts, chip)))
