"""The device correction's chip model: the cost model's recipe fitted on the TPU sweep's
deviceless rows and the chip's rows together, the host one more input (`CHIP_HOST_INPUT`:
0 for the sweep machine, 1 for the chip's host), so chip programs lean on the sweep's
structure where they are few. Chip rows count `CHIP_ROW_WEIGHT` against a real sweep
row's 3 and carry no reference timing (the chip's host ran none beside the sweep's).

Held out by library (the synthetic programs in one fold of their own), half and half in log
seconds with the step and part models, on the chip's 271 real-library programs: median
fold 1.359 against 1.384 without it (bench/FINDINGS.md, "One model for both hosts").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES
from costmodel.models.device_correction import CHIP_HOST_INPUT, chip_model_log_seconds

from . import fit as F

CHIP_ROW_WEIGHT = 10.0
WEIGHT = 0.5  # the chip model's share of the log-space blend
SYNTHETIC = "synthetic"


def chip_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Model inputs of the chip's programs (a `Pairs` frame: features, `device` seconds,
    `library`; keys as index), with one chip's placement and the chip host's input."""
    X = frame[list(MODEL_FEATURES)].astype(float).reset_index(drop=True)
    return X.assign(chips=1.0, sharded_args=0.0, sharded_input_share=0.0,
                    **{CHIP_HOST_INPUT: 1.0})


def training_set(sweep: pd.DataFrame, frame: pd.DataFrame):
    """(inputs, seconds, reference, groups, weights, library) of the sweep's ok rows and
    the chip's programs together; groups hold out a library, or a synthetic family."""
    sweep = sweep[sweep["status"] == "ok"].drop_duplicates("key").reset_index(drop=True)
    XD = F.features_frame(sweep).assign(**{CHIP_HOST_INPUT: 0.0})
    X = pd.concat([XD, chip_rows(frame)], ignore_index=True)
    y = np.concatenate([sweep["compile_seconds"].to_numpy(float),
                        frame["device"].to_numpy(float)])
    ref = np.concatenate([pd.to_numeric(sweep["ref_seconds"], errors="coerce").to_numpy(float),
                          np.full(len(frame), np.nan)])
    chip_lib = frame["library"].to_numpy().astype(object)
    lib = np.concatenate([F.libraries(sweep), np.where(chip_lib == SYNTHETIC, "", chip_lib)])
    families = np.concatenate([F.families(sweep),
                               [str(k).split("|")[0] for k in frame.index]]).astype(object)
    groups = np.where(lib != "", lib, families)
    weight = F.row_weights(lib)
    weight[len(sweep):] *= CHIP_ROW_WEIGHT / F.ROW_OPTIONS["real_weight"]
    return X, y, ref, groups, weight, lib


def fit_chip_model(X, y, ref, groups, weight, lib, train=None):
    """The recipe fitted on the rows where `train` (all by default); no novelty rows kept
    (the correction reads its point only)."""
    from dataclasses import replace

    from .estimator import CompileCostModel

    keep = np.ones(len(y), bool) if train is None else train
    model = CompileCostModel(**F.model_params("tpu", {}))
    model.fit(X[keep].reset_index(drop=True), {"compile_seconds": y[keep]},
              groups=groups[keep], reference=ref[keep], sample_weight=weight[keep],
              interval_rows=lib[keep] != "")
    return replace(model.predictor_, novelty=None)


def held_out_log_seconds(sweep: pd.DataFrame, frame: pd.DataFrame,
                         progress=None) -> np.ndarray:
    """Each chip program's log seconds from a chip model fitted without its library (the
    synthetic programs: without any synthetic family)."""
    X, y, ref, groups, weight, lib = training_set(sweep, frame)
    n = len(y) - len(frame)
    chip_libs = frame["library"].to_numpy()
    synthetic_groups = set(groups[:n][lib[:n] == ""]) | set(groups[n:][chip_libs == SYNTHETIC])
    out = np.full(len(frame), np.nan)
    for held in np.unique(chip_libs):
        drop = (np.isin(groups, sorted(synthetic_groups)) if held == SYNTHETIC
                else groups == held)
        model = fit_chip_model(X, y, ref, groups, weight, lib, ~drop)
        test = chip_libs == held
        out[test] = chip_model_log_seconds(model, chip_rows(frame[test]).to_dict("records"))
        if progress:
            progress(held)
    return out
