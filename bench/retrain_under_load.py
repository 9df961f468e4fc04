"""Retrain under load: two retrain jobs over HTTP while 4 clients keep predicting.

Starts a real `costmodel serve` (gunicorn, the shipped models, the shipped training data)
on a free 127.0.0.1 port with a temporary samples database and retrain folder, then:

1. starts 4 client threads that alternate `POST /v1/predict` (a feature vector of a real
   program, or a small StableHLO module) and `GET /healthz` until both jobs are done;
2. sends the 915 measured rows of the 16 corpus families the shipped data leaves out
   (`bench/data/`) as samples and retrains the CPU model: a better candidate, which
   should be promoted;
3. sends poisoned samples that pass validation: copies of shipped programs with compile
   times 30x too long (the screen should drop them) and 2.5x too long (within what the
   screen lets through), and retrains again: should be rejected.

Reports failed requests (any status but 200, or no answer), latency p50/p99 per route,
and each job's outcome, to stdout and `bench/results/retrain_under_load.json`.
Bounded: every loop stops at `--deadline` seconds and at MAX_REQUESTS; loopback only.

Usage:
    python bench/retrain_under_load.py
    python bench/retrain_under_load.py --deadline 1200 --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from _client_threads import ClientThreads

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "retrain_under_load.json"
NEWCOMERS = ROOT / "bench" / "data" / "cpu_unshipped_families.parquet"
SHIPPED = ROOT / "training" / "data" / "cpu" / "rows.parquet"
CLIENTS = 4
MAX_REQUESTS = 500_000
POISON = ((30.0, 150), (2.5, 150))  # (factor on compile seconds, how many samples)
RETRAIN_TOKEN, SAMPLES_TOKEN = "bench-retrain-token", "bench-samples-token"
SMALL_MODULE = """func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.sine %arg0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _costmodel() -> str:
    """The `costmodel` command of this Python's environment (else the one on PATH)."""
    beside = Path(sys.executable).parent / "costmodel"
    return str(beside) if beside.exists() else "costmodel"


class Service:
    """`costmodel serve` in its own process group, configured through the environment."""

    def __init__(self, tmp: Path, workers: int) -> None:
        self.port = _free_port()
        self.url = f"http://{HOST}:{self.port}"
        env = {**os.environ, "COSTMODEL_SAMPLES_DB": str(tmp / "samples.sqlite3"),
               "COSTMODEL_RETRAIN_DIR": str(tmp / "retrained"),
               "COSTMODEL_RETRAIN_TOKEN": RETRAIN_TOKEN,
               "COSTMODEL_SAMPLES_TOKEN": SAMPLES_TOKEN}
        self.log_path = tmp / "server.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [_costmodel(), "serve", "--host", HOST, "--port", str(self.port),
             "--workers", str(workers)], env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: "
                                   f"{self.log_path.read_text()[-2000:]}")
            try:
                if call(self.url, "GET", "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError("server not ready")

    def worker_boots(self) -> int:
        return self.log_path.read_text(errors="replace").count("Booting worker")

    def stop(self) -> int:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(10)
        finally:
            self.log.close()


def call(url: str, method: str, path: str, body: dict | None = None, token: str | None = None,
         timeout: float = 60.0) -> tuple[int, dict]:
    """One request on a new connection; (status, JSON body)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


class Load(ClientThreads):
    """`CLIENTS` threads alternating predictions and health checks until `stop()`."""

    def __init__(self, url: str, bodies: list[dict], deadline: float) -> None:
        self.url, self.bodies, self.deadline = url, bodies, deadline
        self.latency: dict[str, list[float]] = {"/v1/predict": [], "/healthz": []}
        self.failures: list[str] = []
        super().__init__(CLIENTS)

    def count(self) -> int:
        return sum(len(v) for v in self.latency.values()) + len(self.failures)

    def _client(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        while not self._done.is_set() and time.monotonic() < self.deadline and (
                self.count() < MAX_REQUESTS):
            path = "/v1/predict" if rng.random() < 0.5 else "/healthz"
            body = self.bodies[rng.integers(len(self.bodies))] if path == "/v1/predict" else None
            start = time.perf_counter()
            try:
                status, answer = call(self.url, "POST" if body else "GET", path, body)
                failure = None if status == 200 else f"{path}: {status} {answer}"
            except OSError as exc:
                failure = f"{path}: {type(exc).__name__}: {exc}"
            elapsed = time.perf_counter() - start
            with self._lock:
                if failure is None:
                    self.latency[path].append(elapsed)
                else:
                    self.failures.append(failure)

    def summary(self) -> dict:
        out = {"requests": self.count(), "failed": len(self.failures),
               "first_failures": self.failures[:5]}
        for path, values in self.latency.items():
            ms = np.asarray(values) * 1e3
            out[path] = {"n": len(values), "p50_ms": round(float(np.percentile(ms, 50)), 1),
                         "p99_ms": round(float(np.percentile(ms, 99)), 1),
                         "max_ms": round(float(ms.max()), 1)} if len(values) else {"n": 0}
        return out


def _sample(record: dict, scale: float = 1.0) -> dict:
    """A dataset row as a `POST /v1/samples` body (labels times `scale` for poison)."""
    from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION

    labels = {api: float(record[stored]) for api, stored in (
        ("peak_memory_bytes", "peak_rss_bytes"),
        ("executable_memory_bytes", "executable_memory_bytes"))
        if np.isfinite(record.get(stored, np.nan))}
    return {"features": {"schema_version": SCHEMA_VERSION,
                         **{n: float(record[f"f_{n}"]) for n in MODEL_FEATURES}},
            "compile_seconds": float(record["compile_seconds"]) * scale, **labels,
            "environment": {"ref_seconds": float(record["ref_seconds"]),
                            "cpu_count": int(record["cpu_count"]),
                            "cpu_model": str(record["cpu_model"])}}


def _send_samples(url: str, bodies: list[dict]) -> dict:
    statuses: dict[int, int] = {}
    for body in bodies:
        status, _ = call(url, "POST", "/v1/samples", body, SAMPLES_TOKEN)
        statuses[status] = statuses.get(status, 0) + 1
    return statuses


def _poison(shipped) -> list[dict]:
    bodies = []
    for i, (factor, count) in enumerate(POISON):
        chosen = shipped.sample(count, random_state=i).to_dict("records")
        bodies += [_sample(record, factor) for record in chosen]
    return bodies


def _retrain(url: str, deadline: float) -> dict:
    """Start a CPU retrain job, wait for it; its final record and wall seconds."""
    start = time.monotonic()
    status, accepted = call(url, "POST", "/v1/retrain", {"backend": "cpu"}, RETRAIN_TOKEN)
    if status != 202:
        raise RuntimeError(f"retrain not accepted: {status} {accepted}")
    while time.monotonic() < deadline:
        _, job = call(url, "GET", f"/v1/retrain/{accepted['job']}", token=RETRAIN_TOKEN)
        if job["status"] not in ("queued", "running"):
            return {"wall_seconds": round(time.monotonic() - start, 1), **job}
        time.sleep(1.0)
    raise TimeoutError(f"retrain job {accepted['job']} unfinished at the deadline")


def _outcome(job: dict) -> dict:
    (result,) = job["results"] or [{}]
    keys = ("rows", "train_rows", "holdout_rows", "samples", "dropped_samples", "score_new",
            "score_current", "score_current_refit", "score_to_beat", "current_saw_holdout",
            "swapped", "version", "previous_version")
    return {"status": job["status"], "promoted": bool(job["swapped"]),
            "wall_seconds": job["wall_seconds"], "error": job["error"],
            **{k: result.get(k) for k in keys}}


def _predict_bodies(shipped) -> list[dict]:
    from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION

    record = shipped.iloc[0]
    features = {"schema_version": SCHEMA_VERSION,
                **{n: float(record[f"f_{n}"]) for n in MODEL_FEATURES}}
    return [{"features": features, "backend": "cpu"}, {"stablehlo": SMALL_MODULE}]


def run(args) -> dict:
    from costmodel.training.fitting.fit import select_rows
    from costmodel.training.store import dataset

    shipped = select_rows(dataset.load([SHIPPED]), "cpu")
    newcomers = select_rows(dataset.load([NEWCOMERS]), "cpu")
    deadline = time.monotonic() + args.deadline
    with tempfile.TemporaryDirectory(prefix="costmodel-retrain-load-") as tmp:
        service = Service(Path(tmp), args.workers)
        try:
            service.wait_ready()
            load = Load(service.url, _predict_bodies(shipped), deadline)
            load.start()
            sent_good = _send_samples(service.url, [_sample(r) for r in
                                                    newcomers.to_dict("records")])
            better = _outcome(_retrain(service.url, deadline))
            print(f"better candidate: {better}", flush=True)
            sent_poison = _send_samples(service.url, _poison(shipped))
            poisoned = _outcome(_retrain(service.url, deadline))
            print(f"poisoned candidate: {poisoned}", flush=True)
            load.stop()
            boots = service.worker_boots()
        finally:
            code = service.stop()
    return {"command": "python bench/retrain_under_load.py " + " ".join(sys.argv[1:]),
            "workers": args.workers, "clients": CLIENTS, "server_exit": code,
            "worker_boots": boots, "samples_sent": {"good": sent_good, "poison": sent_poison},
            "poison": [{"factor": f, "count": n} for f, n in POISON],
            "load": load.summary(), "better": better, "poisoned": poisoned}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--deadline", type=float, default=1800.0,
                        help="seconds after which every loop stops (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    report = run(args)
    load = report["load"]
    print(json.dumps(load, indent=2))
    print(f"failed requests {load['failed']} of {load['requests']}; better promoted: "
          f"{report['better']['promoted']}; poisoned promoted: {report['poisoned']['promoted']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    ok = load["failed"] == 0 and report["better"]["promoted"] and not report["poisoned"][
        "promoted"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
