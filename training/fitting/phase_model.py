"""Fitting `costmodel.models.phase_shares.PhaseShares` on rows with a traced compile.

Each traced row splits into HLO passes, backend and the rest (`phases.part_seconds`);
the log ratio of each part to the backend's share is fitted by ridge least squares on
log size counts. Held out by library on the 353 traced CPU rows of schema 7, the shares
miss by 0.18 (sum of absolute share errors, median), and a machine whose backend alone is
2x slower would get its program's factor within 1.05x (median, p90 1.27x); with op
counts alone, 0.32 and 1.09x.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.measure.phases import part_seconds
from costmodel.measure.rows import FEATURE_PREFIX
from costmodel.models.phase_shares import BASE_PART, PARTS, PhaseShares
from costmodel.models.table import Table

TERMS = ("hlo_ops_inlined", "hlo_ops_trip_weighted", "fold_elements", "fold_dot_flops",
         "dot_flops", "fusion_cost_squares", "sequence_kernel_squares", "tensor_sum_elements")
MIN_ROWS = 30
FLOOR = 0.01  # shares below 1% are noise of the trace; the log ratio needs them positive
RIDGE = 0.1


def fit_phase_shares(rows: pd.DataFrame) -> PhaseShares | None:
    """Shares fitted on the rows of `rows` that have a usable trace; None with fewer than
    `MIN_ROWS` of them."""
    parts = [part_seconds(row) for row in rows.to_dict("records")]
    keep = np.array([p is not None for p in parts])
    if keep.sum() < MIN_ROWS:
        return None
    shares = pd.DataFrame([p for p in parts if p is not None])
    shares = shares.div(shares.sum(axis=1), axis=0).clip(lower=FLOOR)
    modelled = tuple(part for part in PARTS if part != BASE_PART)
    y = np.log(shares[list(modelled)].to_numpy() / shares[[BASE_PART]].to_numpy())
    table = Table(TERMS, rows.loc[keep, [FEATURE_PREFIX + t for t in TERMS]].to_numpy(float))
    A = np.column_stack([np.ones(len(y)), table.log_counts(TERMS)])
    coef = np.linalg.solve(A.T @ A + RIDGE * np.eye(A.shape[1]), A.T @ y).T
    return PhaseShares(TERMS, modelled, coef)
