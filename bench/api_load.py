"""Latency and throughput of the HTTP service over loopback, under gunicorn.

Starts `costmodel.api.serve` on a free 127.0.0.1 port, then drives `POST /v1/predict`
with a real load generator (wrk when installed, else a bounded thread pool of
http.client connections) for four payloads: a feature vector, and StableHLO modules of
about 10 KB, 100 KB and 1 MB. Prints one table row per payload; `cpu ms` is the server's
CPU time per request (master and workers), which does not depend on what else runs.
Every loop is bounded in time and in request count; nothing leaves the loopback interface.

The model is the shipped CPU model when there is one, else (or with --tiny) a tiny
real model trained on synthetic rows in a temporary folder: prediction cost is the same
shape (boosted trees per target), but the figures then say nothing about accuracy.

Usage:
    python bench/api_load.py                       # 10 s per payload, 2 workers
    python bench/api_load.py --duration 5 --connections 8 --generator python
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
MAX_REQUESTS = 200_000  # per payload, on top of the time bound


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _tiny_model(out: Path) -> Path:
    """A real model fitted on 32 synthetic rows with exact labels (compile = 1e-6 ops^2 s)."""
    import numpy as np
    import pandas as pd

    from costmodel.features import MODEL_FEATURES
    from costmodel.training.build import retrain

    rng = np.random.default_rng(0)
    ops = np.geomspace(10, 5000, 32)
    data = {f"f_{name}": rng.uniform(0, 100, len(ops)) for name in MODEL_FEATURES}
    for name in ("hlo_ops", "hlo_ops_inlined", "hlo_ops_trip_weighted"):
        data[f"f_{name}"] = ops
    rows = pd.DataFrame({"row_id": [f"bench-{i}" for i in range(len(ops))],
                         "family": [f"fam{i % 4}" for i in range(len(ops))],
                         "status": "ok", "backend": "cpu", "target": "",
                         "compile_seconds": 1e-6 * ops**2, "peak_rss_bytes": 4096.0 * ops,
                         "executable_memory_bytes": 8.0 * data["f_tensor_sum_elements"],
                         **data})
    retrain(rows, "cpu", "", out, name="bench-tiny")
    return out


def _model(args, tmp: Path) -> tuple[Path, str]:
    from costmodel.models import default_path

    if args.model:
        return Path(args.model), "given"
    if not args.tiny and default_path("cpu").exists():
        return default_path("cpu"), "shipped"
    return _tiny_model(tmp / "model"), "tiny synthetic"


def _module_text(size: int) -> str:
    """Real StableHLO of an unrolled elementwise loop, about `size` bytes long."""
    import jax
    import jax.numpy as jnp

    def program(steps: int) -> str:
        def f(x):
            for i in range(steps):
                x = jnp.sin(x) * (i + 1.0) + x
            return x
        return jax.jit(f).lower(jax.ShapeDtypeStruct((64, 64), jnp.float32)).as_text()

    per_step = (len(program(21)) - len(program(1))) / 20
    return program(max(1, round((size - len(program(1))) / per_step)))


def _payloads() -> list[tuple[str, bytes]]:
    from costmodel.features import from_stablehlo

    texts = {label: _module_text(size) for label, size in
             (("stablehlo 10 KB", 10_000), ("stablehlo 100 KB", 100_000),
              ("stablehlo 1 MB", 1_000_000))}
    features = from_stablehlo(texts["stablehlo 10 KB"]).to_dict()
    out = [("features", json.dumps({"features": features, "backend": "cpu"}).encode())]
    out += [(label, json.dumps({"stablehlo": text}).encode()) for label, text in texts.items()]
    return out


class Server:
    """`costmodel.api.serve` in a subprocess; `config` updates the service configuration,
    `options` go to serve() (gunicorn settings)."""

    def __init__(self, model: Path, tmp: Path, workers: int, config: dict | None = None,
                 **options) -> None:
        self.port = _free_port()
        config = {"SAMPLES_DB": str(tmp / "samples.sqlite3"), "MODEL_PATHS": {"cpu": str(model)},
                  **(config or {})}
        script = ("import json, sys\nfrom costmodel.api import serve\nserve(sys.argv[1], "
                  "int(sys.argv[2]), workers=int(sys.argv[3]), config=json.loads(sys.argv[4]), "
                  "**json.loads(sys.argv[5]))")
        self.log_path = tmp / f"server-{self.port}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-c", script, HOST, str(self.port), str(workers), json.dumps(config),
             json.dumps(options)],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://{HOST}:{self.port}"

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError("server not ready")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the gunicorn master and its workers so far."""
        import psutil

        master = psutil.Process(self.process.pid)
        total = 0.0
        for proc in [master, *master.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


def _wrk(url: str, body: bytes, tmp: Path, duration: float, connections: int) -> dict:
    body_file = tmp / "body.json"
    body_file.write_bytes(body)
    script = tmp / "post.lua"
    script.write_text(f'local f = io.open("{body_file}", "rb")\nwrk.body = f:read("*a")\n'
                      'f:close()\nwrk.method = "POST"\n'
                      'wrk.headers["Content-Type"] = "application/json"\n')
    command = ["wrk", "-t", str(min(2, connections)), "-c", str(connections),
               "-d", f"{duration:g}s", "--timeout", "30s", "--latency", "-s", str(script),
               url + "/v1/predict"]
    text = subprocess.run(command, capture_output=True, text=True, timeout=duration + 60,
                          check=True).stdout
    units = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}

    def latency(pct: str) -> float:
        value, unit = re.search(rf"^\s*{pct}%\s+([\d.]+)(us|ms|s|m)\s*$", text, re.M).groups()
        return float(value) * units[unit]

    requests = int(re.search(r"(\d+) requests in", text).group(1))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sockets = re.search(r"Socket errors: (.*)", text)
    return {"requests": requests,
            "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1)),
            "p50": latency("50"), "p99": latency("99"),
            "errors": int(bad.group(1)) if bad else 0,
            "socket": sockets.group(1).strip() if sockets else "-"}


def _python_load(url: str, body: bytes, duration: float, connections: int) -> dict:
    """Closed-loop load from `connections` threads, each bounded in time and count."""
    port = int(url.rsplit(":", 1)[1])
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + duration
    per_thread = MAX_REQUESTS // connections
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}

    def loop() -> None:
        conn = http.client.HTTPConnection(HOST, port, timeout=30)
        mine, failed = [], 0
        for _ in range(per_thread):
            if time.monotonic() >= deadline:
                break
            start = time.perf_counter()
            try:
                conn.request("POST", "/v1/predict", body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                ok = response.status == 200
                if response.will_close:
                    conn.close()  # gunicorn's sync workers close after each response
            except (OSError, http.client.HTTPException):
                ok = False
                conn.close()
            mine.append((time.perf_counter() - start) * 1e3)
            failed += not ok
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += failed

    started = time.monotonic()
    threads = [threading.Thread(target=loop) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(duration + 60)
    elapsed = time.monotonic() - started
    latencies.sort()
    quantiles = statistics.quantiles(latencies, n=100, method="inclusive") \
        if len(latencies) > 1 else latencies * 99
    return {"requests": len(latencies), "rps": len(latencies) / elapsed,
            "p50": quantiles[49], "p99": quantiles[98], "errors": errors[0], "socket": "-"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per payload")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--generator", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--model", help="artifact folder (default: shipped cpu model)")
    parser.add_argument("--tiny", action="store_true", help="use a tiny synthetic model")
    args = parser.parse_args(argv)
    generator = args.generator
    if generator == "auto":
        generator = "wrk" if shutil.which("wrk") else "python"

    with tempfile.TemporaryDirectory(prefix="costmodel-bench-") as name:
        tmp = Path(name)
        model, kind = _model(args, tmp)
        payloads = _payloads()
        server = Server(model, tmp, args.workers)
        try:
            server.wait_ready()
            print(f"# gunicorn workers={args.workers}, {args.connections} connections, "
                  f"{args.duration:g} s per payload, generator={generator}, model={kind}, "
                  f"cpus={os.cpu_count()}, load average before={os.getloadavg()[0]:.1f}")
            print(f"{'payload':<18} {'bytes':>9} {'requests':>9} {'req/s':>8} "
                  f"{'p50 ms':>8} {'p99 ms':>8} {'cpu ms':>7} {'non-200':>7}  socket errors")
            for label, body in payloads:
                cpu = server.cpu_seconds()
                if generator == "wrk":
                    row = _wrk(server.url, body, tmp, args.duration, args.connections)
                else:
                    row = _python_load(server.url, body, args.duration, args.connections)
                cpu_ms = (server.cpu_seconds() - cpu) * 1e3 / max(row["requests"], 1)
                print(f"{label:<18} {len(body):>9} {row['requests']:>9} {row['rps']:>8.1f} "
                      f"{row['p50']:>8.1f} {row['p99']:>8.1f} {cpu_ms:>7.1f} {row['errors']:>7}  "
                      f"{row['socket']}",
                      flush=True)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
