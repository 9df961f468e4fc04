"""Model artifacts: the fitted model as plain arrays plus a JSON manifest that vouches for it.

An artifact is a folder holding `model.npz` (see `predictor.Predictor`) and
`manifest.json`. Loading checks the manifest (feature schema, feature names) and the
model file's sha256 before reading it, and reads it with pickles refused, so no file
runs code. Artifacts load only from this package's `default/` folder or a path the
operator names; the HTTP API never accepts one. Writing one is
`costmodel.training.fitting.publish.save`.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from costmodel.features import SCHEMA_VERSION, Placement
from costmodel.features.schema import OLDEST_READ, features_of

from .device_correction import FRESH, DeviceCorrection
from .predictor import Predictor

MODEL_FILE = "model.npz"
# what artifacts held before models were plain data: a pickle, no longer opened
PICKLED_FILE = "estimator.joblib"
MANIFEST_FILE = "manifest.json"
DEFAULT_ROOT = Path(__file__).parent / "default"
_REQUIRED = ("name", "version", "sha256", "schema_version", "features", "targets", "backend",
             "target")


class ArtifactError(ValueError):
    """An artifact is missing a file, fails its sha256 check, or does not match this schema."""


@dataclass
class Artifact:
    """A loaded (or just saved) model: where it lives, its manifest, and the predictor.

    Example:
        >>> art = costmodel.models.load_default("cpu")
        >>> art.predict([features.model_inputs()])["compile_seconds"]["point"]
        array([1.7])
    """

    path: Path
    manifest: dict
    predictor: Predictor
    # TPU models: the step from deviceless compiles here to compiles on the chip's host
    device_correction: DeviceCorrection | None = None

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def version(self) -> str:
        return self.manifest["version"]

    @property
    def backend(self) -> str:
        return self.manifest["backend"]

    @property
    def target(self) -> str:
        return self.manifest["target"]

    def predict(self, inputs: list[dict[str, float]], process_state: str = FRESH
                ) -> dict[str, dict[str, np.ndarray]]:
        """Predictions for feature dicts keyed by `MODEL_FEATURES` names, in seconds and bytes.

        Returns `{target: {"point", "lo", "hi"}}` with one value per input; raises
        ValueError naming any missing feature. `process_state` (a chip's model only):
        `"fresh"`, a fresh process's compile, or `"warm"`, the chip labels' state.
        """
        inputs = list(inputs)
        if not inputs:
            return {t: {k: np.array([]) for k in ("point", "lo", "hi")}
                    for t in self.manifest["targets"]}
        return self.on_device(inputs, self.predictor.predict(inputs),
                              process_state=process_state)

    def on_device(self, inputs: list[dict[str, float]], out: dict,
                  distance: np.ndarray | None = None, process_state: str = FRESH) -> dict:
        """`out` (the predictor's) with compile time and host memory moved to the chip's
        host when the model has a device correction; as it is otherwise. `distance`: each
        program's from the training rows, if already measured; `process_state`: as
        `predict`'s."""
        correction = self.device_correction
        if correction is None or "compile_seconds" not in out:
            return out
        if distance is None and correction.widening.uses_distance:
            distance = self.predictor.distance(inputs)
        point, lo, hi = correction.apply(inputs, out["compile_seconds"]["point"], distance,
                                         process_state)
        moved = {**out, "compile_seconds": {"point": point, "lo": lo, "hi": hi}}
        if correction.rss_added_bytes and "peak_rss_bytes" in out:
            moved["peak_rss_bytes"] = {k: np.asarray(v, float) + correction.rss_added_bytes
                                       for k, v in out["peak_rss_bytes"].items()}
        return moved


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def atomic_write(path: Path, write) -> None:
    """Write through a temporary file in the same folder, then rename over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; shipped models must be readable by all
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def verify(path: str | os.PathLike) -> dict:
    """The manifest of the artifact at `path`, after checking it without reading the model.

    Raises:
        ArtifactError: A file is missing, the manifest is unreadable, the feature schema
            or names differ from this costmodel's, or the estimator's sha256 differs.
    """
    path = Path(path)
    if not (path / MODEL_FILE).is_file() and (path / PICKLED_FILE).is_file():
        raise ArtifactError(
            f"model artifact at {path} holds a pickled estimator ({PICKLED_FILE}), which "
            f"this costmodel no longer opens; convert it once with `costmodel convert-model "
            f"{path}` (predictions stay the same)")
    for file in (MANIFEST_FILE, MODEL_FILE):
        if not (path / file).is_file():
            raise ArtifactError(f"model artifact at {path} is missing {file}")
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"unreadable {MANIFEST_FILE} at {path}: {exc}") from None
    missing = [key for key in _REQUIRED if key not in manifest]
    if missing:
        raise ArtifactError(f"{path / MANIFEST_FILE} lacks fields: {', '.join(missing)}")
    version = manifest["schema_version"]
    if not (isinstance(version, int) and OLDEST_READ <= version <= SCHEMA_VERSION):
        raise ArtifactError(
            f"schema_version mismatch: artifact {path} was trained on feature schema "
            f"{version}, this costmodel extracts schema {SCHEMA_VERSION} (and reads models "
            f"of {OLDEST_READ} to {SCHEMA_VERSION})")
    if list(manifest["features"]) != list(features_of(version)):
        theirs, ours = set(manifest["features"]), set(features_of(version))
        raise ArtifactError(
            f"feature names mismatch: artifact {path} lacks {sorted(ours - theirs)}, has extra "
            f"{sorted(theirs - ours)} (or a different order)")
    actual = sha256_of(path / MODEL_FILE)
    if actual != manifest["sha256"]:
        raise ArtifactError(
            f"sha256 mismatch for {path / MODEL_FILE}: manifest says {manifest['sha256']}, "
            f"file has {actual}")
    return manifest


def load(path: str | os.PathLike) -> Artifact:
    """Load the artifact at `path` (a folder the operator names), verified before reading.

    Example:
        >>> art = load("models/default/cpu")
        >>> art.version
        'cpu-1a2b3c4d'
    """
    path = Path(path)
    manifest = verify(path)
    try:
        predictor = Predictor.load(path / MODEL_FILE)
    except (OSError, ValueError, KeyError) as exc:
        raise ArtifactError(f"unreadable {MODEL_FILE} at {path}: {exc}") from None
    return Artifact(path=path, manifest=manifest, predictor=predictor,
                    device_correction=_device_correction(path, manifest))


def _device_correction(path: Path, manifest: dict) -> DeviceCorrection | None:
    entry = manifest.get("device_correction")
    if entry is None:
        return None
    file = path / str(entry.get("file", ""))
    if not file.is_file() or sha256_of(file) != entry.get("sha256"):
        raise ArtifactError(f"device correction of {path} is missing or fails its sha256 "
                            f"check ({file.name})")
    try:
        return DeviceCorrection.load(file)
    except (OSError, ValueError, KeyError) as exc:
        raise ArtifactError(f"unreadable {file.name} at {path}: {exc}") from None


def default_path(backend: str = "cpu", target: str = "") -> Path:
    """Folder of the shipped model for a backend and target: `default/cpu`, `default/gpu-h100`
    (a TPU topology's is its chip's, `default/tpu-v5e` for `v5e:4x4`)."""
    return DEFAULT_ROOT / Placement.of(backend, target).model.label


class NoModelError(ArtifactError):
    """No model ships for the backend and target asked for; the message names those that do."""


def shipped_models() -> list[tuple[str, str]]:
    """(backend, target) of every model that ships with costmodel."""
    from costmodel.features.environment import KNOWN_TARGETS

    return [(b, t) for b, targets in KNOWN_TARGETS.items() for t in targets
            if (default_path(b, t) / MANIFEST_FILE).is_file()]


def load_default(backend: str = "cpu", target: str = "") -> Artifact:
    """The shipped model for (backend, target), loaded once per process. Raises
    `NoModelError` when none ships for it."""
    served = Placement.of(backend, target).model
    backend, target = served.backend, served.target
    if not (default_path(backend, target) / MANIFEST_FILE).is_file():
        shipped = ", ".join(Placement(b, t).where for b, t in shipped_models())
        raise NoModelError(
            f"no model ships for {Placement(backend, target).where} (shipped: {shipped}); "
            f"measure it with `costmodel sweep --backend {backend}"
            f"{f' --target {target}' if target else ''}`, `costmodel train`, then pass "
            "model=<its folder>")
    return _load_default(backend, target)


@cache
def _load_default(backend: str, target: str) -> Artifact:
    return load(default_path(backend, target))


load_default.cache_clear = _load_default.cache_clear  # type: ignore[attr-defined]
