"""Model artifacts: a fitted estimator file plus a JSON manifest that vouches for it.

An artifact is a folder holding `estimator.joblib` and `manifest.json`. Loading checks
the manifest (feature schema, feature names) and the estimator file's sha256 before the
pickle is opened, so a swapped or corrupted file is refused, never executed. Artifacts
load only from this package's `default/` folder or a path the operator names; the HTTP
API never accepts one.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION, normalize_target

ESTIMATOR_FILE = "estimator.joblib"
MANIFEST_FILE = "manifest.json"
DEFAULT_ROOT = Path(__file__).parent / "default"
_REQUIRED = ("name", "version", "sha256", "schema_version", "features", "targets", "backend",
             "target")


class ArtifactError(ValueError):
    """An artifact is missing a file, fails its sha256 check, or does not match this schema."""


@dataclass
class Artifact:
    """A loaded (or just saved) model: where it lives, its manifest, and the estimator.

    Example:
        >>> art = costmodel.models.load_default("cpu")
        >>> art.predict([features.model_inputs()])["compile_seconds"]["point"]
        array([1.7])
    """

    path: Path
    manifest: dict
    estimator: Any

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

    def predict(self, inputs: list[dict[str, float]]) -> dict[str, dict[str, np.ndarray]]:
        """Predictions for feature dicts keyed by `MODEL_FEATURES` names, in seconds and bytes.

        Returns `{target: {"point", "lo", "hi"}}` with one value per input; raises
        ValueError naming any missing feature.
        """
        inputs = list(inputs)
        if not inputs:
            return {t: {k: np.array([]) for k in ("point", "lo", "hi")}
                    for t in self.manifest["targets"]}
        return self.estimator.predict(inputs)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _jsonable(value: Any) -> Any:
    """Plain JSON: NaN and infinities become null, numpy scalars Python numbers."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _atomic_write(path: Path, write) -> None:
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


def _distinct(data: pd.DataFrame, column: str) -> list:
    if column not in data.columns:
        return []
    return sorted({v for v in data[column].dropna().tolist() if v != ""}, key=str)


def save(estimator: Any, path: str | os.PathLike, *, backend: str, target: str,
         data: pd.DataFrame, metrics: dict, name: str) -> Artifact:
    """Write `estimator.joblib` and `manifest.json` into folder `path` and return the artifact.

    Args:
        estimator: A fitted model with `predict(DataFrame)` and `targets_`.
        path: Folder to write (created if needed; existing files are replaced).
        backend, target: What the model predicts for, e.g. ("gpu", "h100").
        data: The dataset rows it was trained on (for fingerprint and environment).
        metrics: Evaluation report to record.
        name: Human-readable model name.
    """
    import joblib
    import sklearn

    from costmodel.training.dataset import fingerprint

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    _atomic_write(path / ESTIMATOR_FILE, lambda handle: joblib.dump(estimator, handle))
    label = backend + (f"-{target}" if target else "")
    data_fingerprint = fingerprint(data)
    sha256 = _sha256(path / ESTIMATOR_FILE)
    reference = pd.to_numeric(data.get("ref_seconds", pd.Series(dtype=float)), errors="coerce")
    manifest = {
        "name": name,
        # the data and the estimator: retraining the same rows with other code is a new version
        "version": f"{label}-{data_fingerprint[:8]}-{sha256[:6]}",
        "sha256": sha256,
        "schema_version": SCHEMA_VERSION,
        "features": list(MODEL_FEATURES),
        "targets": list(getattr(estimator, "targets_", ())),
        "backend": backend,
        "target": target,
        "jax_versions": _distinct(data, "jax_version"),
        "jaxlib_versions": _distinct(data, "jaxlib_version"),
        "sklearn_version": sklearn.__version__,
        "environment": {"cpu_model": _distinct(data, "cpu_model"),
                        "cpu_count": _distinct(data, "cpu_count"),
                        "harness_version": _distinct(data, "harness_version"),
                        "xla_flags": _distinct(data, "xla_flags")},
        "training_data": {"fingerprint": data_fingerprint, "rows": int(len(data)),
                          "families": {str(k): int(v) for k, v in
                                       data["family"].value_counts().sort_index().items()}
                          if "family" in data else {}},
        "reference_seconds": float(reference.median()) if reference.notna().any() else None,
        "metrics": metrics,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    text = json.dumps(_jsonable(manifest), indent=2, allow_nan=False) + "\n"
    _atomic_write(path / MANIFEST_FILE, lambda handle: handle.write(text.encode()))
    return Artifact(path=path, manifest=manifest, estimator=estimator)


def verify(path: str | os.PathLike) -> dict:
    """The manifest of the artifact at `path`, after checking it without unpickling anything.

    Raises:
        ArtifactError: A file is missing, the manifest is unreadable, the feature schema
            or names differ from this costmodel's, or the estimator's sha256 differs.
    """
    path = Path(path)
    for file in (MANIFEST_FILE, ESTIMATOR_FILE):
        if not (path / file).is_file():
            raise ArtifactError(f"model artifact at {path} is missing {file}")
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"unreadable {MANIFEST_FILE} at {path}: {exc}") from None
    missing = [key for key in _REQUIRED if key not in manifest]
    if missing:
        raise ArtifactError(f"{path / MANIFEST_FILE} lacks fields: {', '.join(missing)}")
    if manifest["schema_version"] != SCHEMA_VERSION:
        raise ArtifactError(
            f"schema_version mismatch: artifact {path} was trained on feature schema "
            f"{manifest['schema_version']}, this costmodel extracts schema {SCHEMA_VERSION}")
    if list(manifest["features"]) != list(MODEL_FEATURES):
        theirs, ours = set(manifest["features"]), set(MODEL_FEATURES)
        raise ArtifactError(
            f"feature names mismatch: artifact {path} lacks {sorted(ours - theirs)}, has extra "
            f"{sorted(theirs - ours)} (or a different order)")
    actual = _sha256(path / ESTIMATOR_FILE)
    if actual != manifest["sha256"]:
        raise ArtifactError(
            f"sha256 mismatch for {path / ESTIMATOR_FILE}: manifest says {manifest['sha256']}, "
            f"file has {actual}")
    return manifest


def load(path: str | os.PathLike) -> Artifact:
    """Load the artifact at `path` (a folder the operator names), verified before unpickling.

    Example:
        >>> art = load("models/default/cpu")
        >>> art.version
        'cpu-1a2b3c4d'
    """
    import joblib

    path = Path(path)
    manifest = verify(path)
    return Artifact(path=path, manifest=manifest, estimator=joblib.load(path / ESTIMATOR_FILE))


def default_path(backend: str = "cpu", target: str = "") -> Path:
    """Folder of the shipped model for a backend and target: `default/cpu`, `default/gpu-h100`."""
    backend, target = normalize_target(backend, target)
    return DEFAULT_ROOT / (backend + (f"-{target}" if target else ""))


def load_default(backend: str = "cpu", target: str = "") -> Artifact:
    """The shipped model for (backend, target), loaded once per process."""
    return _load_default(*normalize_target(backend, target))


@cache
def _load_default(backend: str, target: str) -> Artifact:
    return load(default_path(backend, target))


load_default.cache_clear = _load_default.cache_clear  # type: ignore[attr-defined]
