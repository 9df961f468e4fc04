"""Two bars of the hardening issue against `costmodel serve` on loopback (gunicorn, 2
workers), each in a fresh server:

- `memory`: `--requests` predictions of a small module carrying a unique 5 MB string
  attribute each, from 2 clients; the summed RSS of the worker processes (whoever they
  are by then: recycled workers count as they come) at the start, its peak, and at the
  end. The bar: the end within 20% of the start.
- `beside`: hostile clients loop the fan-out (depth 18) and the 200k-op module while one
  client asks for an honest prediction (a 5-step module) every 50 ms; latency of each.
  The bar: hostile ones answered or refused in under 1 s, honest ones under 200 ms.

Usage:
    python bench/api_pressure.py memory --requests 400 --json bench/results/api_memory.json
    python bench/api_pressure.py beside --seconds 30 --json bench/results/api_beside.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import _hostile_modules as H
from api_faults import HOST, _post, send, worker_boots, worker_crashes, worker_recycles

MB = 2**20


def workers_rss(master_pid: int) -> int:
    import psutil

    total = 0
    for child in psutil.Process(master_pid).children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def memory(server, requests: int, clients: int = 2) -> dict:
    start = workers_rss(server.process.pid)
    peak, samples, statuses = start, [], []
    lock = threading.Lock()
    indices = iter(range(requests))

    def loop() -> None:
        nonlocal peak
        while True:
            with lock:
                index = next(indices, None)
            if index is None:
                return
            value = f"{index:08d}" * (5 * MB // 8)  # unique: the request's number throughout
            status, _ = send(server.port, _post("/v1/predict", H.predict_body(
                H.with_string_attribute(value))), timeout=120)
            rss = workers_rss(server.process.pid)
            with lock:
                statuses.append(status)
                peak = max(peak, rss)
                samples.append(rss)

    threads = [threading.Thread(target=loop) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(2.0)
    end = workers_rss(server.process.pid)
    return {"requests": len(statuses), "ok": statuses.count(200),
            "other_statuses": sorted({str(s) for s in statuses} - {"200"}),
            "start_mb": round(start / MB, 1), "peak_mb": round(peak / MB, 1),
            "end_mb": round(end / MB, 1), "end_over_start": round(end / start, 3),
            "every_50th_mb": [round(s / MB, 1) for s in samples[::50]],
            "bar_end_within_20pct": end <= 1.2 * start}


def beside(server, seconds: float, hostile_clients: int = 2) -> dict:
    bodies = {"fan-out depth 18": _post("/v1/predict", H.predict_body(H.fanout(18))),
              "200k-op module": _post("/v1/predict", H.predict_body(H.flat(200_000)))}
    honest = _post("/v1/predict", H.predict_body(_honest_module()))
    times: dict[str, list[float]] = {name: [] for name in [*bodies, "honest"]}
    statuses: dict[str, list] = {name: [] for name in times}
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()

    def loop(name: str, data: bytes, pause: float) -> None:
        while time.monotonic() < stop_at:
            begin = time.perf_counter()
            status, _ = send(server.port, data, timeout=120)
            with lock:
                times[name].append(time.perf_counter() - begin)
                statuses[name].append(status)
            time.sleep(pause)

    threads = [threading.Thread(target=loop, args=(name, data, 0.0))
               for name, data in bodies.items() for _ in range(hostile_clients // 2 or 1)]
    threads.append(threading.Thread(target=loop, args=("honest", honest, 0.05)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {name: {"count": len(v), "statuses": sorted({str(s) for s in statuses[name]}),
                   "median_s": round(statistics.median(v), 3), "max_s": round(max(v), 3),
                   "p90_s": round(sorted(v)[int(0.9 * (len(v) - 1))], 3)}
            for name, v in times.items() if v}


def _honest_module() -> str:
    import jax
    import jax.numpy as jnp

    def f(x):
        for i in range(5):
            x = jnp.sin(x) * (i + 1.0) + x
        return x
    return jax.jit(f).lower(jax.ShapeDtypeStruct((8, 8), jnp.float32)).as_text()


def main(argv: list[str] | None = None) -> int:
    import tempfile
    from pathlib import Path

    from api_load import Server, _model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("mode", choices=["memory", "beside"])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", help="artifact folder (default: shipped cpu model)")
    parser.add_argument("--tiny", action="store_true", help="use a tiny synthetic model")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="costmodel-pressure-") as name:
        tmp = Path(name)
        model, kind = _model(args, tmp)
        server = Server(model, tmp, args.workers)
        try:
            server.wait_ready()
            time.sleep(1.0)
            booted = worker_boots(server.log_path.read_text())
            result = (memory(server, args.requests) if args.mode == "memory"
                      else beside(server, args.seconds))
            log_text = server.log_path.read_text()
            restarts = worker_boots(log_text) - booted
            crashes, recycles = worker_crashes(log_text), worker_recycles(log_text)
        finally:
            server.stop()
    result = {"mode": args.mode, "model": kind, "workers": args.workers, "host": HOST,
              **result, "worker_boots_after_start": restarts,
              "worker_crashes": crashes, "worker_recycles": recycles}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
