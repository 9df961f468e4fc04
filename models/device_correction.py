"""A TPU model's step from the host it was measured on to the chip's own host.

The TPU rows are deviceless compiles on the project's 2-core sweep machines; a user on a
TPU VM waits for the compile on the VM's host. The two differ by program, not by one
factor (0.15-9x on the v5e's 13-core host: convolutions compile much faster there, float64
matmul gradients slower), so the step is a small forest over the model inputs and the
model's own prediction, fitted on programs compiled on both (`training.fitting.
device_correction`). Stored beside the model as plain arrays, loaded without pickle.

The two hosts differ by part of the compile more than by program: libtpu's HLO passes
ran about 4x slower on the v5e's host than on the sweep machine and its backend passes
(spread over 13 cores) about 2x faster. So a step may also carry `PartModels`: one forest
per part (HLO passes, backend, the rest) predicting that part's seconds on the sweep
machine, each part scaled by its factor for the chip's host, blended with the step.

A chip's labels are each program's seconds at the average state of the long processes
that measured them; a user's compile is most often a fresh process's first (a training
script's jit, an AOT compile), which on the v5e host took about twice as long. A step may
carry `FreshProcess`, the factor from one to the other, which predictions apply unless
asked for the labels' state (`WARM`).

It may also carry a chip model: the cost model's recipe fitted on the sweep rows and the
chip's together, told the host by one more input (`CHIP_HOST_INPUT`, 1 for the chip's),
blended in log seconds with the rest (`training.fitting.device_one_model`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .forest import FlatForest
from .novelty import Widening
from .predictor import Predictor

CORRECTION_FILE = "device_correction.npz"
BASE_COLUMN = "log_predicted_seconds"
CHIP_HOST_INPUT = "chip_host"  # the chip model's input: 1 for the chip's host, 0 the sweep's
CHIP_PREFIX = "chip."  # its arrays' names in the saved file
# the process states a chip prediction can be for: a fresh process's compile (as sweeps
# measure a row: the compiler started, then the program), or the labels' warmed state
FRESH, WARM = "fresh", "warm"
PROCESS_STATES = (FRESH, WARM)


def check_process_state(state: str) -> None:
    """Raise ValueError unless `state` is one of `PROCESS_STATES`."""
    if state not in PROCESS_STATES:
        raise ValueError(f"process_state must be one of {', '.join(PROCESS_STATES)}, "
                         f"not {state!r}")


@dataclass(frozen=True)
class FreshProcess:
    """A fresh process's compile over the labels' state, for a program of `seconds` at the
    labels' state: `scale * s ** power`, s clipped to the range of seconds it was fitted
    on (`low_s`, `high_s`), so the factor never leaves the measured one's range."""

    scale: float
    power: float
    low_s: float
    high_s: float
    about: Mapping[str, Any] = field(default_factory=dict)

    def factor(self, seconds) -> np.ndarray:
        clipped = np.clip(np.asarray(seconds, float), self.low_s, self.high_s)
        return self.scale * clipped ** self.power

    def at_labels_state(self, fresh_seconds) -> np.ndarray:
        """The seconds at the labels' state whose fresh-process prediction is
        `fresh_seconds` (the inverse of s -> s * factor(s))."""
        fresh = np.asarray(fresh_seconds, float)
        low, high = (b * self.factor(b) for b in (self.low_s, self.high_s))
        inside = (fresh / self.scale) ** (1.0 / (1.0 + self.power))
        return np.where(fresh <= low, fresh / self.factor(self.low_s),
                        np.where(fresh >= high, fresh / self.factor(self.high_s), inside))

    def as_dict(self) -> dict:
        return {"scale": self.scale, "power": self.power, "low_s": self.low_s,
                "high_s": self.high_s, "about": dict(self.about)}

    @classmethod
    def from_dict(cls, saved: Mapping | None) -> FreshProcess | None:
        if not saved:
            return None
        return cls(scale=float(saved["scale"]), power=float(saved["power"]),
                   low_s=float(saved["low_s"]), high_s=float(saved["high_s"]),
                   about=saved.get("about", {}))


@dataclass(frozen=True, eq=False)
class PartModels:
    """Chip-host seconds as the sum over compile parts of `factors[i]` times
    exp(`forests[i]`(log1p of the inputs `feature_names`)): each forest predicts its
    part's log seconds on the sweep machine (`training.fitting.device_parts`)."""

    parts: tuple[str, ...]
    feature_names: tuple[str, ...]
    forests: tuple[FlatForest, ...]
    factors: tuple[float, ...]

    def log_seconds(self, inputs: Sequence[Mapping[str, float]]) -> np.ndarray:
        X = np.array([[np.log1p(max(float(row[n]), 0.0)) for n in self.feature_names]
                      for row in inputs], float).reshape(len(inputs), len(self.feature_names))
        seconds = sum(factor * np.exp(forest.predict(X))
                      for forest, factor in zip(self.forests, self.factors))
        return np.log(np.maximum(seconds, 1e-6))

    def arrays(self) -> dict[str, np.ndarray]:
        return {f"part{i}.{k}": v for i, forest in enumerate(self.forests)
                for k, v in forest.arrays().items()}

    def meta(self) -> dict:
        return {"parts": list(self.parts), "feature_names": list(self.feature_names),
                "factors": list(self.factors)}

    @classmethod
    def from_saved(cls, meta: Mapping, data) -> PartModels:
        forests = tuple(FlatForest.from_arrays({k.split(".", 1)[1]: data[k] for k in data.files
                                                if k.startswith(f"part{i}.")})
                        for i in range(len(meta["parts"])))
        return cls(parts=tuple(meta["parts"]), feature_names=tuple(meta["feature_names"]),
                   forests=forests, factors=tuple(float(f) for f in meta["factors"]))


@dataclass(frozen=True, eq=False)
class DeviceCorrection:
    """log(on-chip host seconds / predicted deviceless seconds) = forest(inputs, log
    prediction). `lo`, `hi`: log offsets of the 90% interval around a corrected
    prediction, from the held-out residuals of model and step together. `about`: what it
    was fitted on (rows, chip, host) and its held-out figures."""

    feature_names: tuple[str, ...]
    forest: FlatForest
    lo: float
    hi: float
    # bytes the chip's host adds to a compile's host RSS growth (its allocator arenas and
    # threads), from fresh-process compiles there; 0 for a step fitted without them
    rss_added_bytes: float = 0.0
    about: Mapping[str, Any] = field(default_factory=dict)
    # the part models and their weight in the log-space blend with the step (0: step only)
    parts: PartModels | None = None
    parts_weight: float = 0.0
    # the chip model and its weight in the log-space blend with the above (0: none)
    chip_model: Predictor | None = None
    chip_model_weight: float = 0.0
    # how far past `lo` and `hi` the interval reaches, growing with a program's distance
    # from the training rows: programs of libraries no fit has seen miss the chip by more
    # than the held-out residuals say (`Widening()`: as they say)
    widening: Widening = field(default_factory=Widening)
    # a fresh process's compile over the labels' state (None: predictions at that state)
    fresh: FreshProcess | None = None

    def log_factor(self, inputs: Sequence[Mapping[str, float]],
                   predicted_seconds: Sequence[float] | np.ndarray) -> np.ndarray:
        """The log factor for each program (its model inputs, the base prediction)."""
        base = np.log(np.maximum(np.asarray(predicted_seconds, float), 1e-6))
        names = [n for n in self.feature_names if n != BASE_COLUMN]
        X = np.array([[np.log1p(max(float(row[n]), 0.0)) for n in names] for row in inputs],
                     float).reshape(len(base), len(names))
        step = self.forest.predict(np.column_stack([X, base]))
        if self.parts is not None and self.parts_weight:
            by_parts = self.parts.log_seconds(inputs) - base
            step = (1.0 - self.parts_weight) * step + self.parts_weight * by_parts
        if self.chip_model is None or not self.chip_model_weight:
            return step
        w = self.chip_model_weight
        return (1.0 - w) * step + w * (chip_model_log_seconds(self.chip_model, inputs) - base)

    def widened(self, widening: Widening, record: Mapping | None) -> DeviceCorrection:
        """This correction with `widening`, and `record` (what it was fitted on, if known)
        in what it says about itself."""
        about = {**self.about, **({"widening": dict(record)} if record else {})}
        return replace(self, widening=widening, about=about)

    def with_fresh(self, fresh: FreshProcess | None) -> DeviceCorrection:
        """This correction with `fresh` as its fresh-process factor, in what it says about
        itself too."""
        about = {k: v for k, v in self.about.items() if k != "fresh_process"}
        if fresh is not None:
            about["fresh_process"] = fresh.as_dict()
        return replace(self, fresh=fresh, about=about)

    def apply(self, inputs: Sequence[Mapping[str, float]], seconds: np.ndarray,
              distance: np.ndarray | None = None, process_state: str = FRESH
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(point, lo, hi) on the chip's host for base predictions `seconds`, in a process of
        `process_state` (`FRESH`, or `WARM`: the labels' state); `distance`: each program's
        from the training rows, which a widening that grows with it needs."""
        check_process_state(process_state)
        point = np.asarray(seconds, float) * np.exp(self.log_factor(inputs, seconds))
        if self.widening.uses_distance and distance is None:
            raise ValueError("this device correction's interval widens with the distance "
                             "from the training rows: pass each program's")
        if self.fresh is not None and process_state == FRESH:
            point = point * self.fresh.factor(point)
        scale = self.widening.scale(np.zeros(len(point)) if distance is None else distance)
        return point, point * np.exp(self.lo * scale), point * np.exp(self.hi * scale)

    def save(self, file) -> None:
        """Write to `file`, a path or a binary handle (what `atomic_write` passes)."""
        meta = {"feature_names": list(self.feature_names), "lo": self.lo, "hi": self.hi,
                "rss_added_bytes": self.rss_added_bytes, "about": dict(self.about),
                "parts": None if self.parts is None else self.parts.meta(),
                "parts_weight": self.parts_weight, "chip_model": self.chip_model is not None,
                "chip_model_weight": self.chip_model_weight,
                "widening": self.widening.as_dict(),
                "fresh": None if self.fresh is None else self.fresh.as_dict()}
        extra = {} if self.parts is None else self.parts.arrays()
        if self.chip_model is not None:
            extra.update({CHIP_PREFIX + k: v for k, v in self.chip_model.arrays().items()})
        np.savez(file, meta=np.array(json.dumps(meta)), **self.forest.arrays(), **extra)

    @classmethod
    def load(cls, path: str | Path) -> DeviceCorrection:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            forest = FlatForest.from_arrays(data)
            parts = (None if not meta.get("parts")
                     else PartModels.from_saved(meta["parts"], data))
            chip = (None if not meta.get("chip_model") else Predictor.from_arrays(
                {k[len(CHIP_PREFIX):]: data[k] for k in data.files if k.startswith(CHIP_PREFIX)}))
        return cls(feature_names=tuple(meta["feature_names"]), forest=forest,
                   lo=float(meta["lo"]), hi=float(meta["hi"]),
                   rss_added_bytes=float(meta.get("rss_added_bytes", 0.0)),
                   about=meta.get("about", {}), parts=parts,
                   parts_weight=float(meta.get("parts_weight", 0.0)), chip_model=chip,
                   chip_model_weight=float(meta.get("chip_model_weight", 0.0)),
                   widening=_widening(meta.get("widening")),
                   fresh=FreshProcess.from_dict(meta.get("fresh")))


def _widening(saved) -> Widening:
    """A saved widening: its `as_dict`, a bare factor, or none."""
    return Widening(factor=float(saved)) if isinstance(saved, (int, float)) \
        else Widening.from_dict(saved)


def chip_model_log_seconds(model: Predictor, inputs: Sequence[Mapping[str, float]]
                           ) -> np.ndarray:
    """The chip model's log compile seconds on the chip's host for each program."""
    rows = [{**row, CHIP_HOST_INPUT: 1.0} for row in inputs]
    # its point only: the log scale is log seconds for compile time, no interval needed
    return np.maximum(model.predict_log(rows)["compile_seconds"], np.log(1e-6))
