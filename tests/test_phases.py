"""Per-phase compile seconds read from a profiler trace (measure/phases.py)."""

import json
import time
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

from costmodel.measure import phases
from costmodel.measure.phases import PHASES, PhaseTrace, explained_seconds, phases_of

NAMED = ("xla", "hlo_through_layout", "hlo_after_layout", "backend", "codegen", "jit")


def _lowered(depth: int):
    def f(x, w):
        for _ in range(depth):
            x = jnp.tanh(x @ w) + x
        return x.sum()

    spec = (jax.ShapeDtypeStruct((16, 32), jnp.float32), jax.ShapeDtypeStruct((32, 32), jnp.float32))
    return jax.jit(f).lower(*spec)


@pytest.fixture(scope="module")
def traced():
    jax.jit(jnp.sin).lower(jnp.ones(2)).compile()  # backend start-up outside the trace
    lowered = _lowered(6)
    with PhaseTrace() as trace:
        start = time.perf_counter()
        lowered.compile()
        wall = time.perf_counter() - start
    return trace, wall


def test_a_real_compile_has_every_named_phase_within_its_wall_time(traced):
    trace, wall = traced
    assert trace.error == ""
    seconds = trace.seconds
    assert all(seconds[p] is not None and seconds[p] > 0 for p in NAMED), seconds
    assert 0 < explained_seconds(seconds) <= seconds["xla"] <= wall
    assert seconds["emit"] + seconds["kernels"] + seconds["jit"] <= seconds["backend"]
    # the backend (LLVM) dominates a small CPU compile; HLO passes are a few percent
    assert seconds["backend"] > 0.5 * wall
    # the costliest pass lies within the HLO phases (which pass that is moves with load:
    # `layout-assignment` usually, not always)
    hlo = seconds["hlo_through_layout"] + seconds["hlo_after_layout"]
    assert 0 < max(trace.passes.values()) < hlo
    assert len(trace.passes) == phases.TOP_PASSES
    assert list(trace.passes.values()) == sorted(trace.passes.values(), reverse=True)


def test_row_is_flat_seconds_and_json_passes(traced):
    trace, wall = traced
    row = trace.row(wall)
    assert set(row) == {*phases.SECONDS_COLUMNS, phases.PASSES_COLUMN, phases.ERROR_COLUMN}
    assert row["phase_backend_seconds"] == trace.seconds["backend"]
    assert json.loads(row[phases.PASSES_COLUMN]) == trace.passes


def test_a_second_trace_inside_one_gives_missing_phases_not_a_crash():
    lowered = _lowered(2)
    with PhaseTrace() as outer:
        with PhaseTrace() as inner:  # the profiler allows one session at a time
            lowered.compile()
    assert "start" in inner.error
    assert all(s is None for s in inner.seconds.values())
    assert explained_seconds(inner.seconds) is None
    assert inner.row(None)[phases.PASSES_COLUMN] is None
    assert outer.seconds["backend"] > 0


def _profile(*lines):
    """A ProfileData-shaped object: one host plane, lines of (name, start_ns, duration_ns)."""
    return SimpleNamespace(planes=[SimpleNamespace(name="/host:CPU", lines=[
        SimpleNamespace(name=f"t{i}", events=[SimpleNamespace(name=n, start_ns=s, duration_ns=d)
                                               for n, s, d in events])
        for i, events in enumerate(lines)])])


def test_nested_scopes_count_once_and_passes_by_exclusive_time():
    ms = 1_000_000
    seconds, passes = phases_of(_profile([
        ("HLO passes through layout assignment (jit_f)", 0, 10 * ms),
        ("simplification", 1 * ms, 6 * ms),
        ("simplification (jit_f)", 1 * ms, 6 * ms),  # XLA names a pipeline twice
        ("algsimp", 2 * ms, 4 * ms),
        ("layout-assignment", 8 * ms, 2 * ms),
        ("CpuCompiler::RunBackend", 10 * ms, 30 * ms),
        ("JitCompiler::Compile", 20 * ms, 5 * ms),
    ], [("FusionCompiler::Compile", 0, 7 * ms)], [("FusionCompiler::Compile", 0, 3 * ms)]))
    assert seconds["hlo_through_layout"] == pytest.approx(0.010)
    assert seconds["backend"] == pytest.approx(0.030)
    assert seconds["fusion_threads"] == pytest.approx(0.010)  # thread-seconds, summed
    assert seconds["hlo_after_layout"] is None and seconds["codegen"] is None
    assert explained_seconds(seconds) == pytest.approx(0.040)
    # simplification's 6 ms less algsimp's 4; JitCompiler is no HLO pass
    assert passes == {"algsimp": 0.004, "layout-assignment": 0.002, "simplification": 0.002}


def test_a_trace_without_known_events_has_every_phase_missing():
    seconds, passes = phases_of(_profile([("SomethingElse", 0, 5)]))
    assert seconds == dict.fromkeys(PHASES) and passes == {}


def test_a_gpu_compile_is_read_from_the_calling_threads_line():
    """XLA:GPU compiles on the thread that asked (a deviceless H100 compile put every
    scope on the "python" line; ptxas ran on the compile pool's threads). The fusion pass,
    the costliest of the biggest H100 misses, is both a phase and a pass."""
    ms = 1_000_000
    profile = SimpleNamespace(planes=[SimpleNamespace(name="/host:CPU", lines=[
        SimpleNamespace(name="python", events=[
            SimpleNamespace(name=n, start_ns=s, duration_ns=d) for n, s, d in (
                ("backend_compile_and_load", 0, 100 * ms),
                ("OptimizeHloModule", 1 * ms, 60 * ms),
                ("fusion", 2 * ms, 50 * ms),
                ("priority-fusion", 3 * ms, 40 * ms),
                ("cse", 55 * ms, 5 * ms),
                ("CompileToBackendResult", 62 * ms, 30 * ms))]),
        SimpleNamespace(name="tf_/1", events=[
            SimpleNamespace(name="PTX->CUBIN", start_ns=70 * ms, duration_ns=8 * ms)]),
        SimpleNamespace(name="tf_/2", events=[
            SimpleNamespace(name="PTX->CUBIN", start_ns=70 * ms, duration_ns=6 * ms)])])])
    seconds, passes = phases_of(profile)
    assert seconds["gpu_hlo"] == pytest.approx(0.060)
    assert seconds["gpu_priority_fusion"] == pytest.approx(0.040)
    assert seconds["gpu_backend"] == pytest.approx(0.030)
    assert seconds["gpu_ptx_threads"] == pytest.approx(0.014)  # thread-seconds, summed
    assert seconds["hlo_through_layout"] is None and explained_seconds(seconds) is None
    # the pipeline's own 60 - 50 - 5 ms and fusion's 50 - 40 are no pass's
    assert passes == {"priority-fusion": 0.040, "fusion": 0.010, "cse": 0.005}
