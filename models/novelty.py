"""How unlike the training programs a program is, and how far that widens its intervals.

The compile-time interval comes from held-out residuals of the corpus, and covers the
corpus's libraries held out about equally well near and far from the other training rows.
Programs of libraries nobody here wrote do not: on the stored benches (118 timings of 34
libraries, CPU model of 2026-12-02), the two fifths whose model inputs lay farthest from
every training row fell inside the interval 61-63% of the time, the nearer three fifths
83-96%; the corpus's libraries held out, 92-96% in every fifth (`bench/evaluations/interval_novelty.py`,
`bench/data/novelty/`). So the interval's log offsets scale with that distance
(`Widening`), fitted on those benches (`training.evaluation.interval_widening`). The
host-memory interval widens the same way, fitted on the benches that measured host memory.

Distance: the mean Euclidean distance to the `NEIGHBORS` nearest training rows, each model
input as log(1 + count) standardized by the training rows' spread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .table import counts_or_zero

# Nearest training rows the distance averages over. 1, 5 and 10 rank the CPU benches'
# misses alike (Spearman of miss ratio and distance 0.36, 0.33, 0.32); the rule fitted on
# them covers 86%, 90% and 91% of the benches with each library held out of the fit.
NEIGHBORS = 5
# Floor of a model input's spread (in log units): an input constant over the training rows
# would otherwise turn any change of it into an enormous distance.
SPREAD_FLOOR = 0.25
# The targets whose intervals widen: the benches time compiles, and the outside-libraries
# runs also measure each compile's peak host memory.
WIDENED_TARGETS = ("compile_seconds", "peak_rss_bytes")


def log_inputs(values: np.ndarray) -> np.ndarray:
    """log(1 + count) of raw model inputs (negative and NaN counts as 0)."""
    return np.log1p(counts_or_zero(np.maximum(np.asarray(values, float), 0.0)))


@dataclass(frozen=True, eq=False)
class Novelty:
    """The training rows' model inputs, standardized, and the distance of new rows from them.

    Attributes:
        center, spread: Per input, the training rows' mean and spread of log(1 + count).
        reference: The distinct training rows, standardized (float16: half the file of
            float32, and distances differ by under 0.1%).
    """

    center: np.ndarray
    spread: np.ndarray
    reference: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> Novelty:
        """From the raw model inputs of the training rows (rows x inputs)."""
        logs = log_inputs(values)
        center = logs.mean(axis=0)
        spread = np.maximum(logs.std(axis=0), SPREAD_FLOOR)
        reference = np.unique(((logs - center) / spread).astype(np.float16), axis=0)
        return cls(center=center, spread=spread, reference=reference)

    def distance(self, values: np.ndarray) -> np.ndarray:
        """Per row of raw model inputs, its mean distance to the nearest training rows."""
        rows = (log_inputs(values) - self.center) / self.spread
        reference, reference_norms = self._reference64
        neighbors = min(NEIGHBORS, len(reference))
        out = np.empty(len(rows))
        # in blocks: an evaluation scores thousands of rows against thousands
        for start in range(0, len(rows), 512):
            block = rows[start:start + 512]
            squared = ((block ** 2).sum(1)[:, None] + reference_norms[None, :]
                       - 2.0 * block @ reference.T)
            nearest = np.partition(np.maximum(squared, 0.0), neighbors - 1, axis=1)
            out[start:start + 512] = np.sqrt(nearest[:, :neighbors]).mean(axis=1)
        return out

    @cached_property
    def _reference64(self) -> tuple[np.ndarray, np.ndarray]:
        # converted once: a prediction is one row against every training row
        reference = self.reference.astype(np.float64)
        return reference, (reference ** 2).sum(1)

    def arrays(self) -> dict[str, np.ndarray]:
        return {"novelty.center": self.center, "novelty.spread": self.spread,
                "novelty.reference": self.reference}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Novelty:
        return cls(*(np.asarray(arrays[f"novelty.{name}"])
                     for name in ("center", "spread", "reference")))


@dataclass(frozen=True)
class Widening:
    """How much a target's interval log offsets grow with a program's distance d
    from the training rows: `max(1, factor * max(1, d / onset) ** power)`.

    Never below 1: the held-out residuals set the narrowest interval, and the benches can
    only widen it. Of the stored CPU benches' 118 timings, each library scored against a
    rule fitted without it, 89.8% fell inside this way; letting near programs' intervals
    narrow (no floor) covered 88.1%, and one factor for all 87.3% (`bench/data/novelty/`).
    `power` 0 is one factor for every program (then `onset` does not matter).
    """

    factor: float = 1.0
    onset: float = math.inf
    power: float = 0.0

    @property
    def uses_distance(self) -> bool:
        return self.power != 0.0 and math.isfinite(self.onset)

    def scale(self, distance: np.ndarray) -> np.ndarray:
        """The multiplier of each program's interval log offsets."""
        distance = np.asarray(distance, float)
        if not self.uses_distance:
            return np.full(distance.shape, max(1.0, self.factor))
        return np.maximum(1.0, self.factor
                          * np.maximum(1.0, distance / self.onset) ** self.power)

    def canonical(self) -> Widening:
        """The same scale with a factor of at least 1: a smaller factor only moves where
        the growth starts (`factor * (d / onset) ** power == (d / later) ** power`)."""
        if not self.uses_distance:
            return Widening(max(1.0, self.factor))
        if self.factor >= 1.0:
            return self
        return Widening(1.0, self.onset * self.factor ** (-1.0 / self.power), self.power)

    def as_dict(self) -> dict[str, float | None]:
        return {"factor": self.factor,
                "onset": self.onset if math.isfinite(self.onset) else None,
                "power": self.power}

    @classmethod
    def from_dict(cls, described: Mapping | None) -> Widening:
        """From `as_dict` (or an older record holding only a factor); None: no widening."""
        described = described or {}
        onset = described.get("onset")
        return cls(factor=float(described.get("factor", 1.0)),
                   onset=math.inf if onset is None else float(onset),
                   power=float(described.get("power", 0.0)))
