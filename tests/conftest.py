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

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
# the rooms of bench/: benchmarks, per-model evaluations, archived research probes
BENCH_ROOMS = (BENCH, BENCH / "evaluations", BENCH / "archive")


def _bench_path(name: str) -> Path:
    (path,) = [room / f"{name}.py" for room in BENCH_ROOMS if (room / f"{name}.py").exists()]
    return path


def bench_module(name: str):
    """`bench/**/<name>.py` imported as a module (the benches are scripts, not a package);
    the modules it imports (`_scoring`, other benches' programs) import as they do when
    the script runs."""
    for room in BENCH_ROOMS:
        if str(room) not in sys.path:
            sys.path.append(str(room))
    spec = importlib.util.spec_from_file_location(name, _bench_path(name))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bench_json(name: str, *args: str) -> dict:
    """`bench/**/<name>.py args --json FILE` run in a process of its own: the JSON it
    writes. Its predictions then do not follow what the tests before lowered (after a
    netket program, jax lowered a spectral step's two equal transforms to two functions,
    not one: a 5% different prediction)."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.json"
        subprocess.run([sys.executable, str(_bench_path(name)), *args, "--json", str(out)], check=True,
                       cwd=ROOT, capture_output=True)
        return json.loads(out.read_text())


# CI's corpus stage sets this: a test whose corpus library is missing then fails, never skips.
REQUIRE_CORPUS_ENV = "COSTMODEL_REQUIRE_CORPUS"


def scored_outside_runs(runs: dict[str, Path]) -> dict[str, dict]:
    """Each stored outside-libraries run (name -> its folder) scored by the shipped model
    as `bench/evaluations/outside_libraries.py score` scores it."""
    bench = bench_module("outside_libraries")
    return {name: bench.score(run) for name, run in runs.items()}


def libraries_used_before(results: tuple[str, ...]) -> set[str]:
    """The libraries of the CPU training rows and of the named stored bench results."""
    used = set(pd.read_parquet(ROOT / "training/data/cpu/rows.parquet", columns=["library"])[
        "library"].dropna())
    for name in results:
        used |= set(json.loads((ROOT / f"bench/results/{name}.json").read_text())["libraries"])
    return used


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
    takes 0.1 s. Other features are noise the model must learn to ignore; the transform
    inputs schema 18 added are zero (no FFT), as in most measured rows."""
    from costmodel.features.schema import features_of

    rng = np.random.default_rng(seed)
    ops = np.asarray(ops, float)
    n = len(ops)
    data = {f"f_{name}": rng.uniform(0, 100, n) for name in features_of(17)}
    data.update({f"f_{name}": np.zeros(n) for name in MODEL_FEATURES if f"f_{name}" not in data})
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


@pytest.fixture(scope="session", autouse=True)
def _no_calibration_from_the_home_folder(tmp_path_factory):
    """No prediction in a test is scaled by a calibration the machine running the tests
    saved (`costmodel calibrate` writes one to the user cache); a test that wants one sets
    its own file."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COSTMODEL_CALIBRATION",
                     str(tmp_path_factory.mktemp("calibration") / "none.json"))
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


# -- the retrain tests on real measured rows (tests/retrain_support.py) ----------------------

@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """(parquet path, rows) of 8 shipped synthetic CPU families: the service's training
    data (the rows these tests were written against; real programs sort among them)."""
    from test_api_support import write_data

    from costmodel.training.fitting.fit import select_rows
    from costmodel.training.store import dataset

    data = dataset.load([ROOT / "training/data/cpu/rows.parquet"])
    data = data[data["library"].fillna("") == ""]
    chosen = select_rows(data[data["family"].isin(sorted(set(data["family"]))[:8])], "cpu")
    return write_data(tmp_path_factory.mktemp("shipped") / "cpu.parquet", chosen), chosen


@pytest.fixture(scope="module")
def newcomers():
    """Measured rows of 4 families the shipped data leaves out. Not `flow`: the 8-family
    served model under-predicts its two 32-layer gradients about 4.7x, more than their
    smaller neighbours, and the screen drops those honest rows (a false positive of the
    screen, open)."""
    from costmodel.training.fitting.fit import select_rows
    from costmodel.training.store import dataset

    data = dataset.load([ROOT / "bench/data/cpu_unshipped_families.parquet"])
    families = sorted(set(data["family"]) - {"flow"})[:4]
    return select_rows(data[data["family"].isin(families)], "cpu")


@pytest.fixture(scope="module")
def served(tmp_path_factory, shipped):
    """The current model: the memorizing recipe fitted on every shipped row, the ones a
    retrain holds out among them, as the shipped model was."""
    from retrain_support import MEMORIZING

    from costmodel.training.fitting.fit import train
    from costmodel.training.fitting.publish import save

    out = tmp_path_factory.mktemp("served") / "cpu"
    estimator = train(shipped[1], "cpu", "", **MEMORIZING)
    save(estimator, out, backend="cpu", target="", data=shipped[1], metrics={}, name="served")
    return out


@pytest.fixture
def numbered_sample_ids(monkeypatch):
    """Sample ids in the order samples arrive, not random: which samples the holdout takes
    (by the hash of their id) is then the same on every run."""
    import itertools
    import types
    import uuid

    from costmodel.api import samples

    counter = itertools.count()
    monkeypatch.setattr(samples, "uuid", types.SimpleNamespace(
        uuid4=lambda: uuid.UUID(int=next(counter))))
