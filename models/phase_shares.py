"""What share of a program's compile each part of XLA takes: HLO passes, the backend
(LLVM code generation on a CPU; libtpu's backend passes and code generation on a TPU), and
the rest (JAX's lowering hand-off, compile set-up).

`costmodel profile` sets a compile's measured parts beside the predicted ones these shares
give. (Calibration does not weigh part factors by them: on real programs measured on a
second CPU kind, the machines' ratios did not follow the shares; see
`costmodel.training.measure.calibrate`.) The shares are a multinomial logit in log size
counts, fitted on the training rows that carry a `jax.profiler` trace of their compile, or
for a TPU libtpu's log of it (`costmodel.training.fitting.phase_model`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .table import Table

PARTS = ("hlo", "backend", "other")
BASE_PART = "backend"  # the logit's reference part: the largest in most compiles


@dataclass(frozen=True, eq=False)
class PhaseShares:
    """`coef[i]` holds the intercept then one weight per term of `terms` for the log
    ratio of part `modelled[i]` to the backend's share."""

    terms: tuple[str, ...]
    modelled: tuple[str, ...]
    coef: np.ndarray

    def predict(self, table: Table) -> dict[str, np.ndarray]:
        """Share of each part of `PARTS` per row of `table` (rows sum to 1)."""
        logs = table.log_counts(self.terms)
        ratios = self.coef[:, 0][None, :] + logs @ self.coef[:, 1:].T  # rows x modelled
        exp = np.exp(np.column_stack([np.zeros(len(logs)), ratios]))
        shares = exp / exp.sum(axis=1, keepdims=True)
        out = {BASE_PART: shares[:, 0]}
        out.update({part: shares[:, i + 1] for i, part in enumerate(self.modelled)})
        return {part: out[part] for part in PARTS}
