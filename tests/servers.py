"""Service processes for the end-to-end tests: `costmodel.api.serve` (gunicorn) and
`costmodel.api.retrain_worker`, each a subprocess on this machine, with a tiny client."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
READ_TIMEOUT = 2.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def jsonable(config: dict[str, Any]) -> dict[str, Any]:
    """A test configuration as JSON for a subprocess: paths as text, MODEL_PATHS keyed
    "backend" or "backend/target"."""
    out = {key: str(value) if isinstance(value, Path) else value for key, value in config.items()}
    if isinstance(out.get("TRAINING_DATA"), list):
        out["TRAINING_DATA"] = [str(p) for p in out["TRAINING_DATA"]]
    if out.get("MODEL_PATHS"):
        out["MODEL_PATHS"] = {"/".join(k for k in key if k) if isinstance(key, tuple) else key:
                              str(path) for key, path in out["MODEL_PATHS"].items()}
    return out


class Process:
    """A Python subprocess running `script` with `args`, its output in `log`."""

    def __init__(self, log: Path, script: str, *args: str) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-c", script, *args], stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "OMP_NUM_THREADS": "1"})

    def output(self) -> str:
        return self.log.read_text()[-3000:]

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)


class Server(Process):
    """A `costmodel.api.serve` subprocess on a free loopback port and a urllib client."""

    def __init__(self, tmp: Path, config: dict, workers: int = 2, name: str = "server") -> None:
        self.port = free_port()
        script = ("import json, sys\nfrom costmodel.api import serve\n"
                  f"serve(sys.argv[1], int(sys.argv[2]), workers={workers}, "
                  f"read_timeout={READ_TIMEOUT}, config=json.loads(sys.argv[3]))\n")
        super().__init__(tmp / f"{name}.log", script, HOST, str(self.port),
                         json.dumps(jsonable(config)))

    def request(self, method: str, path: str, body=None, headers=None) -> tuple[int, dict]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
        req = urllib.request.Request(f"http://{HOST}:{self.port}{path}", data=data,
                                     headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.output()}")
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"server not ready: {self.output()}")


# A retrain worker whose artifact writer, once the candidate is complete on disk (under
# its partial name, not yet renamed or promoted), says where and then hangs: the test
# kills it there, at the last moment before the store would record a promotion.
HANG_AFTER_SAVE = """
import threading
from pathlib import Path
from costmodel.api import retrain_job
real_save = retrain_job.save
def save_then_hang(estimator, path, **kwargs):
    real_save(estimator, path, **kwargs)
    Path(sys.argv[2]).write_text(str(path))
    threading.Event().wait()
retrain_job.save = save_then_hang
"""


class RetrainWorker(Process):
    """`costmodel.api.retrain_worker.run_worker(config)` in a subprocess; with `hang_file`,
    hung after writing its first candidate (see HANG_AFTER_SAVE)."""

    def __init__(self, tmp: Path, config: dict, hang_file: Path | None = None,
                 name: str = "worker") -> None:
        script = ("import json, sys\n" + (HANG_AFTER_SAVE if hang_file else "") +
                  "from costmodel.api.retrain_worker import run_worker\n"
                  "run_worker(json.loads(sys.argv[1]), poll_seconds=0.1)\n")
        super().__init__(tmp / f"{name}.log", script, json.dumps(jsonable(config)),
                         str(hang_file or ""))
