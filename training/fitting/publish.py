"""Writing model artifacts: the fitted model as plain arrays and the manifest vouching for it.

Also converts artifacts saved before models were plain data (a pickled estimator) into
the current form, with identical predictions.
"""

from __future__ import annotations

import json
import os
import sys
import types
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION, Placement
from costmodel.models.artifact import (
    MANIFEST_FILE,
    MODEL_FILE,
    PICKLED_FILE,
    Artifact,
    ArtifactError,
    atomic_write,
    sha256_of,
    verify,
)
from costmodel.models.forest import ARRAYS as FOREST_ARRAYS
from costmodel.models.forest import FlatForest
from costmodel.models.predictor import Bands, Predictor, TargetModel, as_predictor, jsonable


def save(estimator: Any, path: str | os.PathLike, *, backend: str, target: str,
         data: pd.DataFrame, metrics: dict, name: str) -> Artifact:
    """Write `model.npz` and `manifest.json` into folder `path` and return the artifact.

    Args:
        estimator: A fitted `CompileCostModel` (or its `Predictor`).
        path: Folder to write (created if needed; existing files are replaced).
        backend, target: What the model predicts for, e.g. ("gpu", "h100").
        data: The dataset rows it was trained on (for fingerprint and environment).
        metrics: Evaluation report to record.
        name: Human-readable model name.
    """
    import sklearn

    from ..measure.calibrate import training_set
    from ..store.dataset import fingerprint

    predictor = as_predictor(estimator)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    atomic_write(path / MODEL_FILE, predictor.save)
    (path / PICKLED_FILE).unlink(missing_ok=True)
    label = Placement(backend, target).label
    data_fingerprint = fingerprint(data)
    sha256 = sha256_of(path / MODEL_FILE)
    reference = pd.to_numeric(data.get("ref_seconds", pd.Series(dtype=float)), errors="coerce")
    manifest = {
        "name": name,
        # the data and the model: retraining the same rows with other code is a new version
        "version": f"{label}-{data_fingerprint[:8]}-{sha256[:6]}",
        "sha256": sha256,
        "schema_version": SCHEMA_VERSION,
        "features": list(MODEL_FEATURES),
        "targets": list(predictor.targets),
        "backend": backend,
        "target": target,
        "jax_versions": _distinct(data, "jax_version"),
        "jaxlib_versions": _distinct(data, "jaxlib_version"),
        "sklearn_version": sklearn.__version__,  # fitted with; loading does not need it
        "environment": {"cpu_model": _distinct(data, "cpu_model"),
                        "cpu_count": _distinct(data, "cpu_count"),
                        "harness_version": _distinct(data, "harness_version"),
                        "xla_flags": _distinct(data, "xla_flags")},
        "training_data": {"fingerprint": data_fingerprint, "rows": int(len(data)),
                          "families": {str(k): int(v) for k, v in
                                       data["family"].value_counts().sort_index().items()}
                          if "family" in data else {}},
        "reference_seconds": float(reference.median()) if reference.notna().any() else None,
        # how compile seconds follow the reference's (`costmodel calibrate` carries the
        # model to another machine by it)
        "reference_power": float(predictor.reference_power),
        # the training machine's figures for `costmodel calibrate` (CPU compiles only)
        "calibration_set": training_set(data, predictor.reference_seconds,
                                        predictor.reference_power) if backend == "cpu" else {},
        "metrics": metrics,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    _write_manifest(path, manifest)
    return Artifact(path=path, manifest=manifest, predictor=predictor)


def _distinct(data: pd.DataFrame, column: str) -> list:
    if column not in data.columns:
        return []
    return sorted({v for v in data[column].dropna().tolist() if v != ""}, key=str)


def _write_manifest(path: Path, manifest: dict) -> None:
    text = json.dumps(jsonable(manifest), indent=2, allow_nan=False) + "\n"
    atomic_write(path / MANIFEST_FILE, lambda handle: handle.write(text.encode()))


def convert_pickled(path: str | os.PathLike) -> Artifact:
    """Rewrite a pickled artifact (`estimator.joblib`) at `path` as plain data, in place.

    The pickle is opened only after its sha256 matches the manifest, as loading did
    before. The manifest keeps its version (the model is the same); its sha256 becomes
    the new file's and `converted_from` records the old one. Raises ArtifactError when
    the folder holds no such artifact or its sha256 does not match.
    """
    import joblib

    path = Path(path)
    if not (path / PICKLED_FILE).is_file():
        raise ArtifactError(f"no pickled estimator to convert at {path / PICKLED_FILE}")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    if sha256_of(path / PICKLED_FILE) != manifest.get("sha256"):
        raise ArtifactError(f"sha256 mismatch for {path / PICKLED_FILE}; not opening it")
    with _legacy_forest_module():
        estimator = joblib.load(path / PICKLED_FILE)
    predictor = _from_pickled(estimator)
    atomic_write(path / MODEL_FILE, predictor.save)
    manifest = {**manifest, "converted_from": manifest["sha256"],
                "sha256": sha256_of(path / MODEL_FILE)}
    _write_manifest(path, manifest)
    (path / PICKLED_FILE).unlink()
    verify(path)
    return Artifact(path=path, manifest=manifest, predictor=predictor)


class _LegacyFlatForest:
    """What a pickled `costmodel.training.forest.FlatForest` unpickles into: its fields."""


class _legacy_forest_module:
    """Makes the removed module of pickled forests importable while a pickle loads."""

    NAME = "costmodel.training.forest"

    def __enter__(self):
        self.saved = sys.modules.get(self.NAME)
        module = types.ModuleType(self.NAME)
        module.FlatForest = _LegacyFlatForest
        sys.modules[self.NAME] = module

    def __exit__(self, *exc):
        if self.saved is None:
            sys.modules.pop(self.NAME, None)
        else:
            sys.modules[self.NAME] = self.saved


def _from_pickled(estimator) -> Predictor:
    """The `Predictor` of a `CompileCostModel` pickled before models were plain data (its
    per-target parts were dicts)."""
    targets = {}
    for target, fitted in estimator.models_.items():
        bands = fitted.get("bands")
        targets[target] = TargetModel(
            form=estimator.forms_[target], terms=tuple(estimator.terms_[target]),
            added=tuple(estimator.added_[target]), coef=np.asarray(fitted["coef"], float),
            forest=_forest(fitted["forest"]), lo=float(fitted["lo"]), hi=float(fitted["hi"]),
            bands=None if not bands else Bands(*(np.asarray(bands[k], float)
                                                 for k in ("edges", "lo", "hi"))),
            oof_residual_mad=fitted.get("oof_residual_mad"))
    recipe = {name: value for name, value in vars(estimator).items()
              if not name.endswith("_")}
    return Predictor(feature_names=tuple(estimator.feature_names_in_), targets=targets,
                     tree_exclude=tuple(getattr(estimator, "tree_exclude", ())),
                     reference_power=float(estimator.reference_power_),
                     reference_seconds=estimator.reference_seconds_, recipe=recipe)


def _forest(old) -> FlatForest | None:
    if old is None:
        return None
    return FlatForest.from_arrays({**{name: getattr(old, name) for name in FOREST_ARRAYS},
                                   "depth": old.depth, "baseline": old.baseline})
