"""`predict`: how long a compile will take and how much memory it needs, before compiling."""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from costmodel.features import (
    Features,
    Placement,
    from_stablehlo,
    normalize_target,
)

from ._explain import Effect, effects


def _fmt_seconds(s: float) -> str:
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.3g} s"
    return f"{s / 60:.1f} min"


def _where(backend: str, target: str) -> str:
    return Placement(backend, target).where


def _fmt_bytes(b: float) -> str:
    if math.isnan(b):
        return "unknown"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= size:
            return f"{b / size:.3g} {unit}"
    return f"{b:.0f} B"


@dataclass(frozen=True)
class Prediction:
    """A compile-cost prediction. Intervals are 90% intervals (low, high).

    Example:
        >>> p = costmodel.predict(f, x)
        >>> p.compile_seconds, p.compile_seconds_interval   # point and 90% interval
    """

    compile_seconds: float
    compile_seconds_interval: tuple[float, float]
    peak_memory_bytes: float
    peak_memory_bytes_interval: tuple[float, float]
    executable_memory_bytes: float
    executable_memory_bytes_interval: tuple[float, float]
    backend: str
    target: str
    model_version: str
    calibration_scale: float = 1.0
    # How far the program's model inputs lie from every training row (`models.novelty`;
    # None for a model saved without them): past a widening's onset the compile-time
    # or host-memory interval is wider.
    distance_from_training: float | None = None
    # a TPU chip's compile: "fresh" (early in a fresh process) or "warm" (after about a
    # hundred other compiles in the process); None where the model draws no such line
    process_state: str | None = None
    features: Features | None = field(default=None, repr=False, compare=False)
    _artifact: Any = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        lo, hi = self.compile_seconds_interval
        where = _where(self.backend, self.target)
        if self.process_state:
            where += f", {self.process_state} process"
        return (f"Prediction(compile ≈ {_fmt_seconds(self.compile_seconds)} "
                f"({_fmt_seconds(lo)}-{_fmt_seconds(hi)}), host memory ≈ "
                f"{_fmt_bytes(self.peak_memory_bytes)}, {where})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly fields, the same ones the HTTP API returns."""
        return {
            "compile_seconds": self.compile_seconds,
            "compile_seconds_interval": list(self.compile_seconds_interval),
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_memory_bytes_interval": list(self.peak_memory_bytes_interval),
            "executable_memory_bytes": self.executable_memory_bytes,
            "executable_memory_bytes_interval": list(self.executable_memory_bytes_interval),
            "backend": self.backend,
            "target": self.target,
            "model_version": self.model_version,
            "calibration_scale": self.calibration_scale,
            "distance_from_training": self.distance_from_training,
            "process_state": self.process_state,
        }

    def explain(self, top: int = 5) -> list[Effect]:
        """What drives this prediction: for each quantity of the program the model reads,
        what halving it would do to the predicted compile time (`Effect.factor`: 0.6 means
        40% faster), largest effect first. Effects the model cannot justify (a halving
        that predicts a slower compile) and those under 1% are left out (`_explain`).

        Example:
            >>> for effect in costmodel.predict(f, x).explain(top=3):
            ...     print(effect)
        """
        if self.features is None or self._artifact is None:
            raise ValueError("this prediction carries no features to explain")
        return effects(self.features.model_inputs(), self._artifact, top)


def load_model(model):
    """An `Artifact` from what `model=` takes: None (the shipped default, chosen later by
    backend and target), an `Artifact`, or the folder of one (`costmodel train --out`)."""
    if model is None or not isinstance(model, (str, os.PathLike)):
        return model
    path = Path(model).expanduser().resolve()
    manifest = path / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"no model artifact at {model} (expected {manifest})")
    # reloaded when retrained in place: the manifest is rewritten on every save
    return _load_model(str(path), manifest.stat().st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _load_model(path: str, _mtime_ns: int):
    from costmodel.models import load

    return load(path)


def model_placement(model, backend: str | None, target: str | None) -> tuple[str | None, str | None]:
    """(backend, target) to predict for: as given, else the model's own when one is given."""
    if model is None or backend is not None or target is not None:
        return backend, target
    artifact = load_model(model)
    return artifact.backend, artifact.target


def predict_features(features: Features, model=None, process_state: str = "fresh"
                     ) -> Prediction:
    """Predict from already extracted features (what the HTTP API does with StableHLO).

    `model` is a `costmodel.models.Artifact` or its folder; by default the shipped model
    for the features' backend and target. `process_state` (a TPU chip's model): `"fresh"`,
    a compile early in a fresh process (a training script's first jit, an AOT compile), or
    `"warm"`, in a process that has compiled about a hundred programs (about half as long
    on the v5e host; `models/default/tpu-v5e/MODEL_CARD.md`). A model trained without some target (its rows
    lacked that label) predicts NaN there. Raises `costmodel.models.NoModelError` when no
    model ships for the features' backend and target, `costmodel.models.ArtifactError`
    when a model is unusable, ValueError when the model is for another backend or target.
    """
    from costmodel.models import load_default
    from costmodel.models.calibration import UNCALIBRATED, load_calibration, widen_interval
    from costmodel.models.device_correction import check_process_state

    check_process_state(process_state)  # a CPU model never reads it, but it must be one
    artifact = load_model(model) or load_default(features.backend, features.target)
    # a TPU topology (`v5e:4x4`) is served by its chip's model, which reads the chip count
    served = Placement(features.backend, features.target).model
    if (artifact.backend, artifact.target) != (served.backend, served.target):
        raise ValueError(
            f"model {artifact.path} predicts for {_where(artifact.backend, artifact.target)}, "
            f"not {_where(features.backend, features.target)}")
    inputs = features.model_inputs()
    out, distance = artifact.predictor.predict_with_distance([inputs])
    # this machine's CPU speed, or the TPU VM host's (`costmodel calibrate [--backend tpu]`):
    # the latter is relative to a prediction for the chip's host, so only a model with a
    # device correction makes one
    calibration = (load_calibration(backend=artifact.backend, target=artifact.target)
                   if artifact.backend != "tpu" or artifact.device_correction is not None
                   else UNCALIBRATED)
    scale = calibration.scale

    def triple(name: str, factor: float = 1.0) -> tuple[float, tuple[float, float]]:
        part = out.get(name)
        if part is None:  # the model was trained without this target
            return math.nan, (math.nan, math.nan)
        return (float(part["point"][0]) * factor,
                (float(part["lo"][0]) * factor, float(part["hi"][0]) * factor))

    if artifact.device_correction is not None:
        # moved to the chip's own host (a TPU VM); the scale is that host's over the one
        # the correction was fitted on (`costmodel calibrate --backend tpu`)
        out = artifact.on_device([inputs], out, distance, process_state)
    seconds, seconds_iv = triple("compile_seconds", scale)
    # an unsure calibration widens the compile-time interval, never the memory ones
    seconds_iv = widen_interval(seconds, *seconds_iv, calibration.log_uncertainty)
    rss, rss_iv = triple("peak_rss_bytes")
    exe, exe_iv = triple("executable_memory_bytes")
    return Prediction(seconds, seconds_iv, rss, rss_iv, exe, exe_iv,
                      backend=features.backend, target=features.target,
                      model_version=artifact.version, calibration_scale=scale,
                      distance_from_training=None if distance is None else float(distance[0]),
                      process_state=process_state if getattr(
                          artifact.device_correction, "fresh", None) is not None else None,
                      features=features, _artifact=artifact)


def predict_stablehlo(text: str, backend: str | None = "cpu", target: str | None = None,
                      model=None) -> Prediction:
    """Predict from StableHLO module text. Raises `StableHLOParseError` for bad text."""
    backend, target = normalize_target(backend, target)
    return predict_features(from_stablehlo(text, backend=backend, target=target), model=model)
