"""Parent side of a measurement: start the child, watch its time and memory, read its row.

Faults are data: a child that exceeds its time limit is killed and recorded as
`timeout`; one whose RSS passes the memory limit (or that the kernel kills) as `oom`;
one that dies otherwise as `error` with what it printed last.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from .child import RESULT_PREFIX

POLL_SECONDS = 0.05
DEFAULT_TIMEOUT = 300.0
DEFAULT_MEMORY_LIMIT = 12 * 2**30


def run_child(spec: dict, timeout: float = DEFAULT_TIMEOUT,
              memory_limit: int = DEFAULT_MEMORY_LIMIT) -> dict:
    """Measure `spec` in a fresh process; always returns a dict with `status` and `message`."""
    import psutil

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "costmodel.training.child"],
                                stdin=subprocess.PIPE, stdout=out, stderr=err, text=True,
                                start_new_session=True)
        proc.stdin.write(json.dumps(spec))
        proc.stdin.close()
        watched = psutil.Process(proc.pid)
        started = time.monotonic()
        peak = 0
        verdict = None
        while proc.poll() is None:
            elapsed = time.monotonic() - started
            try:
                peak = max(peak, watched.memory_info().rss)
            except psutil.Error:
                pass
            if elapsed > timeout:
                verdict = ("timeout", f"killed after {timeout:.0f} s")
            elif peak > memory_limit:
                verdict = ("oom", f"killed at {peak / 2**30:.1f} GiB RSS "
                                  f"(limit {memory_limit / 2**30:.1f} GiB)")
            if verdict:
                _kill(proc)
                break
            time.sleep(POLL_SECONDS)
        proc.wait()
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if verdict is None:
        for line in reversed(stdout.splitlines()):
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX):])
                result["process_seconds"] = wall
                return result
        if proc.returncode == -signal.SIGKILL:
            verdict = ("oom", "killed by SIGKILL (likely the kernel's OOM killer)")
        else:
            tail = " | ".join(stderr.strip().splitlines()[-3:])
            verdict = ("error", f"measurement process exited {proc.returncode}: {tail}"[:2000])
    return {"status": verdict[0], "message": verdict[1], "process_seconds": wall,
            "child_peak_rss_bytes": peak}


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
