"""Parent side of a measurement: start a fresh process, watch its time and memory, read
its row.

Faults are data: a process over its time limit is killed and recorded as `timeout`; one
whose RSS passes the memory limit (or that the kernel kills) as `oom`; one that dies
otherwise as `error` with what it said last. Processes come from a per-thread zygote
(`zygote.py`, jax pre-imported, one fork per program) or, with `use_zygote=False`, from
a plain `python -m costmodel.training.measure.child`.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .child import RESULT_PREFIX

POLL_SECONDS = 0.05
DEFAULT_TIMEOUT = 300.0
DEFAULT_MEMORY_LIMIT = 12 * 2**30

_local = threading.local()
_all_zygotes: list = []  # every zygote started, so they are ended when the process exits


@atexit.register
def close_zygotes() -> None:
    """End every zygote; the next measurement starts a fresh one (one that inherits this
    process's environment and CPU affinity as they are then)."""
    for zygote in _all_zygotes:
        zygote.close()
    _all_zygotes.clear()
    _local.__dict__.pop("zygotes", None)


class _Zygote:
    """One pre-loaded zygote process per (thread, backend)."""

    def __init__(self, backend: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "costmodel.training.measure.zygote", backend],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, request: dict) -> None:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the measurement zygote exited")
        return json.loads(line)

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            stream.close()


def _zygote(backend: str) -> _Zygote:
    zygotes = getattr(_local, "zygotes", None)
    if zygotes is None:
        zygotes = _local.zygotes = {}
    zygote = zygotes.get(backend)
    if zygote is None or not zygote.alive():
        zygote = zygotes[backend] = _Zygote(backend)
        _all_zygotes.append(zygote)
    return zygote


def _watch(pid: int, finished, timeout: float, memory_limit: int) -> tuple[tuple | None, int]:
    """Poll `pid` until `finished()`; kill it past the time or memory limit."""
    import psutil

    try:
        watched = psutil.Process(pid)
    except psutil.Error:
        watched = None
    started = time.monotonic()
    peak = 0
    while not finished():
        if watched is not None:
            try:
                peak = max(peak, watched.memory_info().rss)
            except psutil.Error:
                pass
        verdict = None
        if time.monotonic() - started > timeout:
            verdict = ("timeout", f"killed after {timeout:.0f} s")
        elif peak > memory_limit:
            verdict = ("oom", f"killed at {peak / 2**30:.1f} GiB RSS "
                              f"(limit {memory_limit / 2**30:.1f} GiB)")
        if verdict:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return verdict, peak
    return None, peak


def _result_from(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return None


def _died(code: int | None, said: str) -> tuple[str, str]:
    if code == -signal.SIGKILL:
        return "oom", "killed by SIGKILL (likely the kernel's OOM killer)"
    tail = " | ".join(said.strip().splitlines()[-3:])
    return "error", f"measurement process exited {code}: {tail}"[:2000]


def _run_forked(spec: dict, timeout: float, memory_limit: int):
    zygote = _zygote(spec.get("backend", "cpu"))
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        zygote.send({"spec": spec, "out": out.name})
        pid = zygote.read(timeout=60)["pid"]
        exit_line: dict = {}

        def finished() -> bool:
            message = zygote.read(timeout=POLL_SECONDS)
            if message is not None:
                exit_line.update(message)
            return "exit" in exit_line

        verdict, peak = _watch(pid, finished, timeout, memory_limit)
        while "exit" not in exit_line:  # reap the killed child before the next spec
            exit_line.update(zygote.read(timeout=60) or {})
        return verdict, peak, _result_from(out.read()), exit_line["exit"], ""


def _run_subprocess(spec: dict, timeout: float, memory_limit: int):
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "costmodel.training.measure.child"],
                                stdin=subprocess.PIPE, stdout=out, stderr=err, text=True,
                                start_new_session=True)
        proc.stdin.write(json.dumps(spec))
        proc.stdin.close()

        def finished() -> bool:
            if proc.poll() is None:
                time.sleep(POLL_SECONDS)
                return False
            return True

        verdict, peak = _watch(proc.pid, finished, timeout, memory_limit)
        proc.wait()
        out.seek(0)
        err.seek(0)
        return verdict, peak, _result_from(out.read()), proc.returncode, err.read()


def run_child(spec: dict, timeout: float = DEFAULT_TIMEOUT,
              memory_limit: int = DEFAULT_MEMORY_LIMIT, use_zygote: bool = True) -> dict:
    """Measure `spec` in a fresh process; always returns a dict with `status` and `message`."""
    started = time.monotonic()
    run = _run_forked if use_zygote else _run_subprocess
    verdict, peak, result, code, said = run(spec, timeout, memory_limit)
    wall = time.monotonic() - started
    if verdict is None and result is not None:
        result["process_seconds"] = wall
        return result
    if verdict is None:
        verdict = _died(code, said)
    return {"status": verdict[0], "message": verdict[1], "process_seconds": wall,
            "child_peak_rss_bytes": peak}
