"""Measuring one compile, inside a fresh measurement process (see `child.py`).

Order of work in the process: warm the backend with the reference program, trace and
lower the target, compile it once while sampling host RSS, then interleave further
repeats of the target (each from a new function object) with timings of the reference.
Every compile must produce exactly one backend-compile monitoring event; a compile with
none was a cache hit and is flagged, never recorded as a measurement.
"""

from __future__ import annotations

import contextlib
import re
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .phases import PhaseTrace
from .sharding import row_fields, sharded_placement
from .tpu_phases import TpuStageLog, module_name

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CacheHitError(RuntimeError):
    """A compile produced no backend compile: the measurement would time a cache hit."""


class RssSampler:
    """Samples this process's resident set size every `interval` seconds in a thread."""

    def __init__(self, interval: float = 0.005) -> None:
        import psutil

        self._proc = psutil.Process()
        self._interval = interval
        self._peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, self.rss())

    def rss(self) -> int:
        return self._proc.memory_info().rss

    def _run(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, self.rss())
            time.sleep(self._interval)

    @property
    def peak(self) -> int:
        return self._peak


class CompileEvents:
    """Collects backend-compile durations reported through `jax.monitoring`."""

    def __init__(self) -> None:
        import jax

        self.durations: list[float] = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, name: str, seconds: float, **_kw) -> None:
        if name == BACKEND_COMPILE_EVENT:
            self.durations.append(seconds)

    def mark(self) -> int:
        return len(self.durations)

    def since(self, mark: int) -> list[float]:
        return self.durations[mark:]


@dataclass
class Placement:
    """Where programs compile: CPU, a local GPU or TPU, or a deviceless GPU or TPU target."""

    backend: str
    target: str
    sharding: object = None
    deviceless: bool = False

    def jit(self, fn):
        import jax

        if self.sharding is None:
            return jax.jit(fn)
        return jax.jit(fn, out_shardings=self.sharding)

    def lower(self, fn, args):
        """(traced, lowered) of `fn(*args)` placed here; never compiles."""
        traced = self.jit(fn).trace(*self.args(args))
        return traced, traced.lower()

    def args(self, args):
        import jax

        if self.sharding is None:
            return args
        return jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=self.sharding), args)


def placement(backend: str, target: str) -> Placement:
    if backend == "cpu":
        return Placement("cpu", "")
    if backend == "tpu":
        from .tpu_target import tpu_sharding

        sharding, deviceless = tpu_sharding(target)
        return Placement("tpu", target, sharding, deviceless)
    from .gpu_target import gpu_sharding

    sharding, deviceless = gpu_sharding(target)
    return Placement("gpu", target, sharding, deviceless)


def compile_once(build, place: Placement, events: CompileEvents, trace: PhaseTrace | None = None):
    """Build a fresh program, trace+lower and compile it: (lower_s, compile_s, event_s, ...).

    With `trace`, the compile runs under that profiler trace (started and stopped outside
    the timed span)."""
    fn, args = build()
    t0 = time.perf_counter()
    traced, lowered = place.lower(fn, args)
    mark = events.mark()
    with trace if trace is not None else contextlib.nullcontext():
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
    fired = events.since(mark)
    if len(fired) != 1:
        raise CacheHitError(f"expected exactly one backend compile, saw {len(fired)}")
    return t1 - t0, t2 - t1, fired[0], traced, lowered, compiled


def optimized_hlo_stats(hlo_text: str) -> dict[str, int]:
    """Instruction count, fusion count and largest fusion of optimized HLO text."""
    instructions = 0
    fusions = 0
    largest = 0
    current_fused = None
    for line in hlo_text.splitlines():
        stripped = line.strip()
        if stripped.endswith("{") and ("computation" in stripped or stripped.startswith("%")
                                       or stripped.startswith("ENTRY")):
            current_fused = 0 if "fused" in stripped.split("(")[0] else None
            continue
        if stripped == "}":
            if current_fused is not None:
                largest = max(largest, current_fused)
            current_fused = None
            continue
        if " = " in stripped and not stripped.startswith("//"):
            instructions += 1
            if re.search(r"\bfusion\(", stripped):
                fusions += 1
            if current_fused is not None:
                current_fused += 1
    return {"hlo_instructions": instructions, "hlo_fusions": fusions,
            "hlo_largest_fusion": largest}


MEMORY_FIELDS = ("exec_argument_bytes", "exec_output_bytes", "exec_temp_bytes",
                 "exec_code_bytes", "executable_memory_bytes")


def memory_fields(compiled) -> dict[str, int | None]:
    try:
        stats = compiled.memory_analysis()
    except Exception:  # not every backend implements it
        stats = None
    if stats is None:
        return dict.fromkeys(MEMORY_FIELDS)
    arg = int(stats.argument_size_in_bytes)
    out = int(stats.output_size_in_bytes)
    temp = int(stats.temp_size_in_bytes)
    alias = int(getattr(stats, "alias_size_in_bytes", 0))
    return {"exec_argument_bytes": arg, "exec_output_bytes": out, "exec_temp_bytes": temp,
            "exec_code_bytes": int(stats.generated_code_size_in_bytes),
            "executable_memory_bytes": arg + out + temp - alias}


def repeats_for(first_seconds: float, max_repeats: int) -> int:
    """Repeat cheap compiles more: noise matters most where compiles are short."""
    if first_seconds < 2.0:
        return max_repeats
    if first_seconds < 15.0:
        return min(max_repeats, 2)
    return 1


def measure(build, backend: str = "cpu", target: str = "", max_repeats: int = 3,
            trace_phases: bool = True, sharding: str | None = None,
            warmup: Sequence[Callable[[], tuple]] = ()) -> dict:
    """Measure compiles of `build()` programs in this (fresh) process. Returns the labels.

    `build` returns a new (fn, args) on each call. The row's features come from the
    first lowering, through the same extractor prediction uses. With `trace_phases`, one
    more compile, after all timed ones, runs under a profiler trace for the per-phase
    columns (`phases.py`); without, those columns are missing values. XLA:TPU traces
    nothing: its stages come from libtpu's log of the first timed compile instead
    (`tpu_phases.py`; the log is on for every compile of a TPU measurement process, and
    capturing it costs no more than the noise, see bench/tpu_log_overhead.py). With
    `sharding` (a TPU topology target), the program compiles SPMD over all its devices
    (`sharding.py`); the reference still compiles on one. `warmup`: builds of other
    programs compiled once each, untimed, before the reference is timed.
    """
    from costmodel.features import from_lowered

    from .reference import build_reference

    events = CompileEvents()
    place = placement(backend, target)
    program = place if sharding is None else sharded_placement(place, sharding)
    compile_once(build_reference, place, events)  # warm-up: backend and LLVM start-up
    for other in warmup:
        compile_once(other, place, events)
    ref_times = [compile_once(build_reference, place, events)[1]]

    fn, args = build()
    t0 = time.perf_counter()
    traced, lowered = program.lower(fn, args)
    lower_seconds = time.perf_counter() - t0
    features = from_lowered(traced, lowered, backend=backend, target=target)

    stage_log = TpuStageLog(module_name(lowered)) if trace_phases and backend == "tpu" else None
    mark = events.mark()
    # the log is read after the sampler stops, so parsing it counts in no RSS peak
    with stage_log or contextlib.nullcontext(), RssSampler() as sampler:
        baseline = sampler.rss()
        t1 = time.perf_counter()
        compiled = lowered.compile()
        first = time.perf_counter() - t1
    fired = events.since(mark)
    if len(fired) != 1:
        raise CacheHitError(f"expected exactly one backend compile, saw {len(fired)}")
    peak_rss = max(0, sampler.peak - baseline)
    memory = memory_fields(compiled)
    hlo_text = compiled.as_text()
    hlo_stats = optimized_hlo_stats(hlo_text)
    del compiled

    times, event_times = [first], [fired[0]]
    for _ in range(repeats_for(first, max_repeats) - 1):
        ref_times.append(compile_once(build_reference, place, events)[1])
        _, seconds, event_seconds, *_ = compile_once(build, program, events)
        times.append(seconds)
        event_times.append(event_seconds)

    trace, traced_seconds = PhaseTrace(), None
    if stage_log is not None:
        trace, traced_seconds = stage_log, first
    elif trace_phases:  # its own compile: tracing must not touch the labels above
        traced_seconds = compile_once(build, program, events, trace=trace)[1]

    median = statistics.median(times)
    return {
        "backend": backend,
        "target": target,
        "deviceless": place.deviceless,
        "lower_seconds": lower_seconds,
        "compile_seconds": median,
        "compile_seconds_min": min(times),
        "compile_seconds_spread": (max(times) - min(times)) / median if median > 0 else 0.0,
        "compile_seconds_all": times,
        "backend_compile_seconds": statistics.median(event_times),
        "repeats": len(times),
        "peak_rss_bytes": peak_rss,
        "ref_seconds": statistics.median(ref_times),
        **memory,
        **hlo_stats,
        **trace.row(traced_seconds),
        **(row_fields(program, sharding, features, hlo_text) if backend == "tpu" else {}),
        "features": features.to_dict(),
    }
