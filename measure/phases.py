"""Where one XLA compile spends its time: per-phase seconds from a `jax.profiler` trace.

XLA marks its compile phases with TraceMe scopes (`HLO passes through layout assignment
(jit_f)`, `CpuCompiler::RunBackend`, `JitCompiler::Compile`, one scope per HLO pass; for a
GPU, `OptimizeHloModule`, `priority-fusion`, `CompileToBackendResult`).
`PhaseTrace` records them around one compile and reads the `.xplane.pb` back. Event names
change between XLA versions, so a phase whose events are absent is `None`, and a trace
that cannot be taken at all gives every phase `None`: never an exception.

Tracing slows the compile a little (see bench/phase_overhead.py), so the harness runs it
on an extra compile of its own, never on the ones `compile_seconds` is taken from.
"""

from __future__ import annotations

import glob
import json
import math
import os
import tempfile
from collections import defaultdict

# phase -> event names (a name also matches with XLA's " (module name)" suffix).
PHASES = {
    "xla": ("PjRtCpuClient::Compile",),  # the client's whole compile
    "hlo_through_layout": ("HLO passes through layout assignment",),
    "hlo_after_layout": ("HLO passes after layout assignment",),
    "backend": ("CpuCompiler::RunBackend",),  # emission, kernels and LLVM
    "emit": ("ThunkEmitter::EmitEntryComputation",),
    "kernels": ("ThunkEmitter::ConsumeKernels",),
    "codegen": ("Codegen",),
    "jit": ("JitCompiler::Compile",),  # LLVM compile of the module on the compile thread
    # thread-seconds of fused kernels compiled on XLA's codegen pool (overlaps `emit`)
    "fusion_threads": ("FusionCompiler::Compile",),
    # XLA:GPU (seen compiling deviceless for an H100): the HLO pipeline, its fusion pass
    # (on the biggest H100 misses 46-84% of the compile), the backend (LLVM IR, PTX,
    # cubin), and thread-seconds of ptxas on the compile pool
    "gpu_hlo": ("OptimizeHloModule",),
    "gpu_priority_fusion": ("priority-fusion",),
    "gpu_backend": ("CompileToBackendResult",),
    "gpu_ptx_threads": ("PTX->CUBIN",),
}
# The phases only XLA:GPU's compile has (a CPU compile leaves them missing, and the other
# way round).
GPU_PHASES = tuple(p for p in PHASES if p.startswith("gpu_"))
# Phases that follow one another on the compile thread: their sum is what the trace
# explains of a compile's wall time.
PARTITION = ("hlo_through_layout", "hlo_after_layout", "backend")
HLO_PIPELINES = ("hlo_through_layout", "hlo_after_layout")
# Scopes whose nested events are HLO passes (for the top passes), on either backend, and
# phases that are themselves one pass (listed among the top passes too).
PASS_SCOPES = (*HLO_PIPELINES, "gpu_hlo")
PASS_PHASES = ("gpu_priority_fusion",)
TOP_PASSES = 5


def column(phase: str) -> str:
    """The dataset column of a phase."""
    return f"phase_{phase}_seconds"


COLUMNS = tuple(column(p) for p in PHASES)
WALL_COLUMN = "phase_wall_seconds"  # the traced compile's own wall time
PASSES_COLUMN = "phase_top_passes"  # JSON {pass name: exclusive seconds}, slowest first
ERROR_COLUMN = "phase_error"  # why phases are missing, "" when the trace was read
SECONDS_COLUMNS = (*COLUMNS, WALL_COLUMN)


def _base_name(name: str) -> str:
    return name.split(" (", 1)[0]


def _union_seconds(intervals: list[tuple[int, int]]) -> float:
    """Seconds covered by (start_ns, end_ns) intervals: nested or repeated scopes count once."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total += end - start
            reach = end
        elif end > reach:
            total += end - reach
            reach = end
    return total / 1e9


def _lines(profile) -> list[list[tuple[str, int, int]]]:
    """(name, start_ns, end_ns) of every host-plane event, line by line (one per thread).

    The calling thread's line ("python") is read too: the Python tracer is off, so it holds
    only TraceMe scopes, JAX's own on a CPU (whose compile runs on XLA's threads) and the
    whole compile on a GPU."""
    lines = []
    for plane in profile.planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            lines.append([(e.name, int(e.start_ns), int(e.start_ns + e.duration_ns))
                          for e in line.events])
    return lines


def _exclusive_seconds(events: list[tuple[str, int, int]]) -> dict[str, float]:
    """Seconds of each event name minus the scopes nested inside it (one thread's events)."""
    own: dict[str, float] = defaultdict(float)
    stack: list[list] = []  # open scopes: [name, start_ns, end_ns, seconds nested inside]

    def close(frame):
        name, start, end, nested = frame
        own[name] += (end - start) / 1e9 - nested
        if stack:
            stack[-1][3] += (end - start) / 1e9

    for name, start, end in sorted(events, key=lambda e: (e[1], -e[2])):
        while stack and stack[-1][2] <= start:
            close(stack.pop())
        stack.append([name, start, end, 0.0])
    while stack:
        close(stack.pop())
    return own


def phases_of(profile) -> tuple[dict[str, float | None], dict[str, float]]:
    """(seconds per phase, top HLO passes by exclusive seconds) of one traced compile."""
    wanted = {name: phase for phase, names in PHASES.items() for name in names}
    seconds: dict[str, float | None] = dict.fromkeys(PHASES)
    passes: dict[str, float] = defaultdict(float)
    for events in _lines(profile):
        spans = defaultdict(list)
        for name, start, end in events:
            phase = wanted.get(_base_name(name))
            if phase is not None:
                spans[phase].append((start, end))
        for phase, intervals in spans.items():
            seconds[phase] = (seconds[phase] or 0.0) + _union_seconds(intervals)
        pipelines = [iv for p in PASS_SCOPES for iv in spans.get(p, ())]
        inside = [e for e in events
                  if any(s <= e[1] and e[2] <= t for s, t in pipelines)]
        for name, own in _exclusive_seconds(inside).items():
            phase = wanted.get(_base_name(name))
            if phase is None or phase in PASS_PHASES:  # other phases' scopes are no pass
                passes[_base_name(name)] += own
    top = sorted(passes.items(), key=lambda kv: -kv[1])[:TOP_PASSES]
    return seconds, {name: round(s, 6) for name, s in top if s > 0}


def _load_profile(log_dir: str):
    from jax._src.profiler import ProfileData

    files = glob.glob(os.path.join(log_dir, "**", "*.xplane.pb"), recursive=True)
    if not files:
        raise FileNotFoundError("the trace wrote no .xplane.pb")
    return ProfileData.from_file(max(files, key=os.path.getmtime))


class PhaseTrace:
    """`with PhaseTrace() as trace: lowered.compile()`, then `trace.row(wall_seconds)`.

    Only what runs inside the block is traced; starting and stopping the profiler happen
    outside it, so a caller timing inside the block times the compile alone. The Python
    tracer stays off: it would trace every Python call of JAX's compile path.
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float | None] = dict.fromkeys(PHASES)
        self.passes: dict[str, float] = {}
        self.error = ""
        self._dir: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> PhaseTrace:
        try:
            import jax
            from jax._src.profiler import ProfileOptions

            options = ProfileOptions()
            options.python_tracer_level = 0
            self._dir = tempfile.TemporaryDirectory(prefix="costmodel-trace-")
            jax.profiler.start_trace(self._dir.name, profiler_options=options)
        except Exception as exc:  # a jax without the profiler: phases stay missing
            self.error = f"start: {type(exc).__name__}: {exc}"
            self._cleanup()
        return self

    def __exit__(self, *exc) -> None:
        if self._dir is None:
            return
        try:
            import jax

            jax.profiler.stop_trace()
            self.seconds, self.passes = phases_of(_load_profile(self._dir.name))
        except Exception as error:  # unreadable trace: phases stay missing
            self.error = f"read: {type(error).__name__}: {error}"
        finally:
            self._cleanup()

    def _cleanup(self) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def row(self, wall_seconds: float | None) -> dict:
        """The dataset columns of this trace (flat seconds per phase, passes as JSON)."""
        return {**{column(p): s for p, s in self.seconds.items()},
                WALL_COLUMN: wall_seconds,
                PASSES_COLUMN: json.dumps(self.passes) if self.passes else None,
                ERROR_COLUMN: self.error}


def explained_seconds(seconds: dict[str, float | None]) -> float | None:
    """Seconds the sequential phases account for; None when none of them was traced."""
    parts = [seconds.get(p) for p in PARTITION]
    if all(s is None for s in parts):
        return None
    return sum(s for s in parts if s is not None)


def part_seconds(row) -> dict[str, float] | None:
    """A row's compile seconds split into the parts of `costmodel.models.phase_shares`:
    HLO passes (both pipelines), the backend, and the rest, in the proportions its traced
    compile showed. None when the row has no usable trace."""
    try:
        wall = float(row[WALL_COLUMN])
        hlo = sum(float(row[column(p)]) for p in HLO_PIPELINES)
        backend = float(row[column("backend")])
        total = float(row["compile_seconds"])
    except (KeyError, TypeError, ValueError):
        return None
    if not all(map(math.isfinite, (wall, hlo, backend, total))) or wall <= 0 or total <= 0:
        return None
    hlo, backend = min(hlo / wall, 1.0), min(backend / wall, 1.0)
    other = max(1.0 - hlo - backend, 0.0)
    norm = hlo + backend + other
    return {"hlo": total * hlo / norm, "backend": total * backend / norm,
            "other": total * other / norm}
