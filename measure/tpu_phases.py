"""Where one XLA:TPU compile spends its time, read from libtpu's own log.

libtpu emits no profiler events for its compile, but at INFO level its log gives each
compile's stages: `HLO_PASSES`, `BACKEND_PASSES`, `CODE_GENERATION` and `END_TO_END stage
duration: 14.7ms`, and the module's name (`XLA::TPU running hlo passes for 67
instructions, module: jit_f`); with `PASS_LOG_ENV` too, every HLO pass's time. libtpu
reads its log levels once, when it starts, so `LOG_ENV` must be in the environment before
a process's first TPU compile (the measurement process sets it, and the log is then on for
every compile of that process); `TpuStageLog` captures file descriptor 2 around one
compile and reads its stages back. Stages missing from the log are `None` and say why in
`error`, never an exception.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
from collections import defaultdict
from dataclasses import dataclass, field

from .phases import PHASES, TOP_PASSES, phase_row

# phase -> libtpu's stage name; END_TO_END also counts time outside the other three
STAGES = {"tpu_hlo": "HLO_PASSES", "tpu_backend": "BACKEND_PASSES",
          "tpu_codegen": "CODE_GENERATION", "tpu_end_to_end": "END_TO_END"}
LOG_ENV = {"TPU_MIN_LOG_LEVEL": "0", "TPU_STDERR_LOG_LEVEL": "0"}
# Per-pass times log ~1000 more lines a compile and may cost ~5% of its CPU time
# (bench/tpu_log_overhead.py), so they are opt-in: the labels' compiles log them too
PASS_LOG_ENV = {"TPU_VMODULE": "hlo_pass_pipeline=1"}
LOG_OFF_HINT = ("libtpu logged no compile stages: its INFO log must be on before libtpu "
                "starts (" + " ".join(f"{k}={v}" for k, v in LOG_ENV.items()) + ")")

_RECORD = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +(\d+) [^\]\s]+\] ?(.*)$")
# numbers may carry thousands separators ("for 1,254 instructions")
_START = re.compile(r"^XLA::TPU running hlo passes for [0-9,]+ instructions, module: (\S+)")
_STAGE = re.compile(r"^([A-Z_]+) stage duration: ([0-9,.]+) ?([a-zµ]+)")
_PIPELINE = re.compile(r"^Running HLO pass pipeline on module (\S+): (.+)$")
_PASS = re.compile(r"^HLO pass: (.+?) time: ([0-9,.]+) ?([a-zµ]+)")
# a backend worker names its module after its BACKEND_PASSES and CODE_GENERATION lines
_NAMED = re.compile(r"^XLA::TPU module name: (\S+)|^\(HLO module ([^)\s]+)\)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_STAGE_PHASE = {stage: phase for phase, stage in STAGES.items()}


def _seconds(value: str, unit: str) -> float | None:
    scale = _UNIT.get(unit)
    return None if scale is None else float(value.replace(",", "")) * scale


@dataclass
class TpuCompileLog:
    """What the log said about one compile of one module."""

    module: str | None
    thread: str
    stages: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    pass_seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    pipelines: set[str] = field(default_factory=set)
    done: bool = False  # its END_TO_END line was seen

    def top_passes(self, count: int = TOP_PASSES) -> dict[str, float]:
        """The slowest HLO passes by seconds summed over their runs. Pipelines report
        themselves as passes too; they are left out, so no time counts twice."""
        own = {name: s for name, s in self.pass_seconds.items() if name not in self.pipelines}
        top = sorted(own.items(), key=lambda kv: -kv[1])[:count]
        return {name: round(s, 6) for name, s in top if s > 0}


def _records(text: str):
    """(severity, thread, message) of every glog-style line; continuation lines are skipped."""
    for line in text.splitlines():
        match = _RECORD.match(line.encode("utf-8", "replace"))
        if match:
            severity, thread, message = (g.decode("utf-8", "replace") for g in match.groups())
            yield severity, thread, message


def compiles_of(text: str) -> list[TpuCompileLog]:
    """Every compile the log text shows, in the order they started.

    Stage lines do not name their module. HLO_PASSES and END_TO_END come from the thread
    that started the compile; BACKEND_PASSES and CODE_GENERATION from a backend worker,
    which names the module in its next lines (`XLA::TPU module name: jit_f`, `(HLO module
    jit_f)`), so they wait for that name; one still unnamed when a compile ends goes to
    that compile if it lacks the stage. Pass lines go to the module their thread last ran
    a pipeline on."""
    compiles: list[TpuCompileLog] = []
    thread_module: dict[str, str] = {}
    waiting: dict[str, list[tuple[str, float]]] = defaultdict(list)  # worker -> stages

    def running(module: str | None = None, thread: str | None = None) -> TpuCompileLog | None:
        found = [c for c in compiles if not c.done and (module is None or c.module == module)
                 and (thread is None or c.thread == thread)]
        return found[-1] if found else None

    def name_worker(thread: str, module: str) -> None:
        target = running(module=module) or running() or _anonymous(compiles, thread)
        for phase, seconds in waiting.pop(thread, []):
            target.stages[phase] = seconds

    def end(compile_: TpuCompileLog) -> None:
        """A compile ends: unnamed worker stages it lacks are its; the rest wait on."""
        for thread, stages in list(waiting.items()):
            waiting[thread] = []
            for phase, seconds in stages:
                if phase in compile_.stages:
                    waiting[thread].append((phase, seconds))
                else:
                    compile_.stages[phase] = seconds
        compile_.done = True

    for _severity, thread, message in _records(text):
        if match := _START.match(message):
            compiles.append(TpuCompileLog(match.group(1), thread))
        elif match := _STAGE.match(message):
            phase = _STAGE_PHASE.get(match.group(1))
            seconds = _seconds(match.group(2), match.group(3))
            if phase is None or seconds is None:
                continue
            if phase in ("tpu_backend", "tpu_codegen"):
                waiting[thread].append((phase, seconds))
                continue
            compile_ = running(thread=thread) or running() or _anonymous(compiles, thread)
            compile_.stages[phase] = seconds
            if phase == "tpu_end_to_end":
                end(compile_)
        elif match := _NAMED.match(message):
            if waiting.get(thread):
                name_worker(thread, match.group(1) or match.group(2))
        elif match := _PIPELINE.match(message):
            thread_module[thread] = match.group(1)
            for c in compiles:
                if c.module == match.group(1) and not c.done:
                    c.pipelines.add(match.group(2))
        elif match := _PASS.match(message):
            seconds = _seconds(match.group(2), match.group(3))
            owner = running(module=thread_module.get(thread))
            if seconds is not None and owner is not None and owner.module is not None:
                owner.pass_seconds[match.group(1)] += seconds
    return compiles


def _anonymous(compiles: list[TpuCompileLog], thread: str) -> TpuCompileLog:
    """A compile for stage lines whose start the log did not show."""
    compiles.append(TpuCompileLog(None, thread))
    return compiles[-1]


def compile_of(text: str, module: str | None = None) -> tuple[TpuCompileLog | None, str]:
    """(the finished compile of `module` in the log, "") or (None, why not). Without a
    module name, or when none matches it, a log of exactly one finished compile gives
    that one."""
    finished = [c for c in compiles_of(text) if c.done]
    named = [c for c in finished if module is not None and c.module == module]
    if named:
        return named[-1], ""
    if len(finished) == 1:
        return finished[0], ""
    if not finished:
        return None, LOG_OFF_HINT
    return None, (f"{len(finished)} compiles in the log, none of module {module!r}: "
                  f"{sorted({str(c.module) for c in finished})}")


class StderrCapture:
    """Captures what native code writes to file descriptor 2 inside the block (`.text`).

    Records above INFO, and text that is no INFO record, are passed on to the real
    stderr as they arrive (polled from the capture file, so a process that dies in the
    block has shown them already); Python's own `sys.stderr` writes bypass the capture.
    """

    POLL_SECONDS = 0.05

    def __init__(self) -> None:
        self.text = ""
        self._chunks: list[bytes] = []
        self._pending = b""
        self._in_info = False  # the last record was INFO: its continuation lines are too
        self._offset = 0

    def __enter__(self) -> StderrCapture:
        if sys.stderr is not None:
            sys.stderr.flush()
        self._real = os.dup(2)  # first: with no fd 2 there is nothing to undo
        self._file = tempfile.TemporaryFile(prefix="costmodel-stderr-")
        self._python = sys.stderr
        sys.stderr = os.fdopen(os.dup(self._real), "w", buffering=1, errors="backslashreplace")
        os.dup2(self._file.fileno(), 2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        try:
            os.dup2(self._real, 2)
            self._stop.set()
            self._thread.join()
            self._pump(final=True)
        finally:
            replacement, sys.stderr = sys.stderr, self._python
            replacement.close()
            os.close(self._real)
            self._file.close()
            self.text = b"".join(self._chunks).decode("utf-8", "replace")

    def _poll(self) -> None:
        while not self._stop.wait(self.POLL_SECONDS):
            self._pump()

    def _pump(self, final: bool = False) -> None:
        while data := os.pread(self._file.fileno(), 1 << 20, self._offset):
            self._offset += len(data)
            self._chunks.append(data)
            self._pending += data
        *lines, self._pending = self._pending.split(b"\n")
        if final and self._pending:
            lines, self._pending = [*lines, self._pending], b""
        shown = [line for line in lines if self._shown(line)]
        if shown:
            os.write(self._real, b"".join(line + b"\n" for line in shown))

    def _shown(self, line: bytes) -> bool:
        match = _RECORD.match(line)
        if match:
            self._in_info = match.group(1) == b"I"
        return not self._in_info


class TpuStageLog:
    """`with TpuStageLog("jit_f") as log: lowered.compile()`, then `log.row(wall_seconds)`:
    the same columns as `phases.PhaseTrace.row`, the TPU stages filled in."""

    def __init__(self, module: str | None = None) -> None:
        self.module = module
        self.seconds: dict[str, float | None] = dict.fromkeys(PHASES)
        self.passes: dict[str, float] = {}
        self.error = ""
        self._capture = StderrCapture()

    def __enter__(self) -> TpuStageLog:
        try:
            self._capture.__enter__()
        except OSError as exc:  # no fd 2 to redirect: stages stay missing
            self.error = f"capture: {type(exc).__name__}: {exc}"
            self._capture = None
        return self

    def __exit__(self, *exc) -> None:
        if self._capture is None:
            return
        self._capture.__exit__(*exc)
        found, self.error = compile_of(self._capture.text, self.module)
        if found is not None:
            self.seconds.update({p: found.stages.get(p) for p in STAGES})
            self.passes = found.top_passes()
            missing = [STAGES[p] for p in STAGES if p not in found.stages]
            if missing:
                self.error = "stages missing from the log: " + ", ".join(missing)

    def row(self, wall_seconds: float | None) -> dict:
        return phase_row(self.seconds, self.passes, self.error, wall_seconds)


def module_name(lowered) -> str | None:
    """The name libtpu's log gives the module of `lowered` (`jit_f`), if it can be read."""
    try:
        return str(lowered.compiler_ir("stablehlo").operation.attributes["sym_name"].value)
    except Exception:  # no MLIR module at hand: the log's only compile is taken
        return None
