"""Shared fixtures."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import stores

from costmodel.features import MODEL_FEATURES

BENCH = Path(__file__).resolve().parents[1] / "bench"
# the rooms of bench/: benchmarks, per-model evaluations, archived research probes
BENCH_ROOMS = (BENCH, BENCH / "evaluations", BENCH / "archive")


def bench_module(name: str):
    """`bench/**/<name>.py` imported as a module (the benches are scripts, not a package);
    the modules it imports (`_scoring`, other benches' programs) import as they do when
    the script runs."""
    for room in BENCH_ROOMS:
        if str(room) not in sys.path:
            sys.path.append(str(room))
    (path,) = [room / f"{name}.py" for room in BENCH_ROOMS if (room / f"{name}.py").exists()]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# CI's corpus stage sets this: a test whose corpus library is missing then fails, never skips.
REQUIRE_CORPUS_ENV = "COSTMODEL_REQUIRE_CORPUS"


def corpus_library_missing(reason: str) -> None:
    """Skip a test whose `[corpus]` library is not installed (a failure in CI's corpus stage)."""
    if os.environ.get(REQUIRE_CORPUS_ENV):
        pytest.fail(f"{REQUIRE_CORPUS_ENV} is set but {reason}", pytrace=False)
    pytest.skip(reason)


def import_corpus_library(name: str):
    """`name` imported, or the test skipped as `corpus_library_missing` says."""
    try:
        return importlib.import_module(name)
    except ImportError:
        corpus_library_missing(f"{name} is not installed (pip install -e '.[corpus]')")


def make_rows(ops: np.ndarray, seed: int = 0, families: int = 4) -> pd.DataFrame:
    """Dataset-shaped rows with exact labels: compile = 1e-6 * ops^2 s, peak RSS =
    4096 * ops bytes, executable = 8 * tensor elements bytes; the reference compile
    takes 0.1 s. Other features are noise the model must learn to ignore."""
    rng = np.random.default_rng(seed)
    ops = np.asarray(ops, float)
    n = len(ops)
    data = {f"f_{name}": rng.uniform(0, 100, n) for name in MODEL_FEATURES}
    elements = rng.uniform(1e3, 1e7, n)
    for name in ("hlo_ops", "hlo_ops_inlined", "hlo_ops_trip_weighted"):
        data[f"f_{name}"] = ops
    data["f_tensor_sum_elements"] = elements
    seconds = 1e-6 * ops**2
    return pd.DataFrame({
        "row_id": [f"r{seed}-{i}" for i in range(n)],
        "family": [f"fam{i % families}" for i in range(n)],
        "status": "ok", "backend": "cpu", "target": "",
        "compile_seconds": seconds,
        "compile_seconds_all": [json.dumps([s, s * 1.1, s * 0.95]) for s in seconds],
        "peak_rss_bytes": 4096.0 * ops,
        "executable_memory_bytes": 8.0 * elements,
        "ref_seconds": 0.1,
        "jax_version": "0.10.2", "jaxlib_version": "0.10.2", "cpu_model": "test-cpu",
        **data,
    })


@pytest.fixture
def synthetic_rows():
    """Factory of exact synthetic dataset rows: `synthetic_rows(ops, seed=0, families=4)`."""
    return make_rows


@pytest.fixture(scope="session", autouse=True)
def _no_store_from_the_shell():
    """No test reaches a store that the environment pytest runs in names; `store` sets one."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(stores.URL_ENV, raising=False)
        yield


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server for the session (see tests/stores.py); skipped without one
    unless COSTMODEL_REQUIRE_POSTGRES is set."""
    with stores.postgres_server() as url:
        yield url


def _store_url(request, kind: str):
    if kind == "sqlite":
        return contextlib.nullcontext(None)
    return stores.fresh_postgres(request.getfixturevalue("postgres_url"))


@pytest.fixture(params=stores.PARAMS)
def store(request, monkeypatch):
    """Run the test on each store: "sqlite" (the default file at SAMPLES_DB) and
    "postgresql" (a fresh schema, named to the service by COSTMODEL_DATABASE_URL)."""
    with _store_url(request, request.param) as url:
        if url is not None:
            monkeypatch.setenv(stores.URL_ENV, url)
        yield request.param


@pytest.fixture(scope="module", params=stores.PARAMS)
def module_store(request):
    """(kind, DATABASE_URL or None for SQLite) shared by a module's tests, for servers
    started once per module."""
    with _store_url(request, request.param) as url:
        yield request.param, url


@pytest.fixture(scope="module")
def wrong_model(tmp_path_factory):
    """A real model trained on labels 30x too large: any honest retrain beats it."""
    from test_api_support import train_artifact

    return train_artifact(tmp_path_factory.mktemp("wrong") / "cpu", seed=1, scale=30.0)


@pytest.fixture(scope="module")
def good_data(tmp_path_factory):
    """A dataset file of 30 synthetic rows a retrain can learn from."""
    from test_api_support import rows, write_data

    return write_data(tmp_path_factory.mktemp("data") / "cpu.parquet", rows(30, seed=2))
