"""Helpers for the API tests: a real tiny model, synthetic training data, programs.

Nothing here is faked: the model is trained with `costmodel.training.build.retrain` on a
couple dozen exact synthetic rows (the `make_rows` of conftest), which takes about a
second; with fewer than 20 rows per fold the boosted trees stay out and it is faster.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from conftest import make_rows

from costmodel.features import SCHEMA_VERSION, from_stablehlo
from costmodel.training.build import retrain
from costmodel.training.store import dataset

TOKEN = "test-retrain-token-0123456789"
SAMPLES_TOKEN = "test-samples-token-9876543210"
X = jax.ShapeDtypeStruct((8, 8), jnp.float32)


def rows(n: int = 24, seed: int = 0, scale: float = 1.0) -> pd.DataFrame:
    """`n` exact synthetic rows; `scale` multiplies compile seconds (a wrong model's data)."""
    data = make_rows(np.geomspace(10, 5000, n), seed=seed)
    data["compile_seconds"] = data["compile_seconds"] * scale
    return data


def train_artifact(out: Path, n: int = 24, seed: int = 0, scale: float = 1.0) -> Path:
    retrain(rows(n, seed, scale), "cpu", "", out, name=f"test-tiny-{seed}")
    return out


def one_thread_model(tmp_path_factory) -> Path:
    """The tiny model, trained on one thread (two shared cores: more threads only contend)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return train_artifact(tmp_path_factory.mktemp("model") / "cpu")


def write_data(path: Path, data: pd.DataFrame) -> Path:
    return dataset.export_parquet(data, path)


def config(tmp: Path, model: Path | None, **overrides: Any) -> dict[str, Any]:
    """A test configuration confined to `tmp` (never the user's ~/.cache)."""
    base = {
        "TESTING": True,
        "SAMPLES_DB": tmp / "samples.sqlite3",
        "RETRAIN_DIR": tmp / "retrained",
        "TRAINING_DATA": [],
        "MODEL_PATHS": {} if model is None else {("cpu", ""): model},
        "RETRAIN_TOKEN": None,
        "SAMPLES_TOKEN": None,
        "RETRAIN_MIN_ROWS": 10,
        "MODEL_SYNC_SECONDS": 0.0,
    }
    base.update(overrides)
    return base


def unrolled(steps: int):
    def f(x):
        for i in range(steps):
            x = jnp.sin(x) * (i + 1.0) + x
        return x
    return f


def stablehlo(steps: int = 5) -> str:
    return jax.jit(unrolled(steps)).lower(X).as_text()


def stablehlo_of_size(size: int) -> str:
    """A real module of about `size` bytes of text."""
    per_step = len(stablehlo(11)) - len(stablehlo(1))
    return stablehlo(max(1, round(10 * size / per_step)))


def feature_values(text: str) -> dict[str, float]:
    return from_stablehlo(text).model_inputs()


def feature_vector(text: str) -> dict[str, Any]:
    """What a client posts as `features`: `Features.to_dict()`-shaped, schema included."""
    return {"schema_version": SCHEMA_VERSION, **feature_values(text)}


def feature_body(**changes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"schema_version": SCHEMA_VERSION,
                              **feature_values(stablehlo(3))}
    values.update(changes)
    return {"features": values, "backend": "cpu"}


def error(code: int, name: str, description: str) -> dict[str, Any]:
    return {"code": code, "name": name, "description": description}


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def wait_for_job(get, job_id: str, timeout: float = 120.0) -> dict[str, Any]:
    """Poll `get(job_id) -> dict` until the job leaves queued/running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = get(job_id)
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.1)
    raise TimeoutError(f"job {job_id} still {job['status']} after {timeout} s: {json.dumps(job)}")

