"""A bounded fault run against `costmodel serve` on loopback: hostile requests and slow clients.

Starts the real service (gunicorn, 2 workers) on a free 127.0.0.1 port, then
1. sends at least `--requests` hostile requests of every kind in `KINDS` (malformed HTTP,
   bodies built to make validation slow, bad Unicode, oversized and chunked bodies,
   wrong types and ranges) from 4 client threads while a probe asks `/healthz` every
   20 ms;
2. opens `--slow` connections that send half a request and stall, and probes `/healthz`
   until the server's read deadline has answered them all (408).

Reports statuses by kind, 5xx answers and missing answers (both must be 0), worker
crashes (timeouts, signals, non-zero exits in gunicorn's log: must be 0; recycling after
MAX_REQUESTS is counted apart) and the probe's latency. Every loop is bounded in count
and time; nothing leaves the loopback interface. `api_fuzz.py` is the generated
counterpart: random requests from a grammar, not this list.

Usage:
    python bench/api_faults.py --json bench/results/api_faults.json
    python bench/api_faults.py --requests 300 --slow 10       # a quick look
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import socket
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable

import _hostile_modules as H

HOST = "127.0.0.1"
MB = 2**20
SMALL_MODULE = ("func.func public @main(%arg0: tensor<8xf32>) -> tensor<8xf32> {\n"
                "  %0 = stablehlo.sine %arg0 : tensor<8xf32>\n  return %0 : tensor<8xf32>\n}\n")


def _post(path: str, body: bytes, headers: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n{headers}\r\n"
            ).encode() + body


def _json(path: str, text: str) -> bytes:
    return _post(path, text.encode("utf-8", "surrogatepass"))


def _chunked(body: bytes, chunk: int = 64 * 1024) -> bytes:
    head = (f"POST /v1/predict HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    parts = [b"%x\r\n%s\r\n" % (len(body[i:i + chunk]), body[i:i + chunk])
             for i in range(0, len(body), chunk)]
    return head + b"".join(parts) + b"0\r\n\r\n"


def _raw(text: str) -> bytes:
    return text.encode("latin-1")


def _stablehlo(text: str) -> bytes:
    return _post("/v1/predict", json.dumps({"stablehlo": text}).encode())


def _kinds() -> dict[str, Callable[[], bytes]]:
    """Each hostile request by name; built lazily (some are megabytes)."""
    valid = json.dumps({"stablehlo": SMALL_MODULE}).encode()
    return {
        # Bodies built to make validation slow (the quote-escape run was quadratic).
        "escaped quotes 1 MB": lambda: _json("/v1/predict",
                                             '{"stablehlo": "\\"' + '\\\\\\"' * 250_000 + '"}'),
        "escaped quotes 360 KB": lambda: _json(
            "/v1/predict", '{"stablehlo": "\\"' + '\\\\\\"' * 90_000 + '"}'),
        "open braces 1 MB": lambda: _stablehlo("{" * MB),
        "quotes 1 MB": lambda: _stablehlo('"' * MB),
        "brackets in strings 1 MB": lambda: _stablehlo('"' + "{" * MB + '"'),
        "garbage module 2 MB": lambda: _stablehlo("%x = stablehlo.add " * (2 * MB // 20)),
        "nested JSON arrays": lambda: _post("/v1/predict", b"[" * 100_000 + b"]" * 100_000),
        "nested JSON objects": lambda: _post("/v1/predict", b'{"a":' * 50_000 + b"1" +
                                             b"}" * 50_000),
        # Text the parser or the error handler cannot take.
        "lone surrogate in module": lambda: _json("/v1/predict", '{"stablehlo": "\\ud800"}'),
        "lone surrogate in field name": lambda: _json("/v1/predict", '{"\\udc00": 1}'),
        "lone surrogate in feature name": lambda: _json(
            "/v1/predict", '{"features": {"\\ud800": 1}}'),
        "NUL in module": lambda: _json("/v1/predict", '{"stablehlo": "module {\\u0000}"}'),
        "NUL in field name": lambda: _json("/v1/predict", '{"\\u0000": 1}'),
        "invalid UTF-8 bytes": lambda: _post("/v1/predict", b'{"stablehlo": "\xff\xfe"}'),
        "duplicate keys": lambda: _json("/v1/predict",
                                        '{"stablehlo": "a", "stablehlo": "b"}'),
        # Sizes and framing.
        "chunked over the limit": lambda: _chunked(valid[:-1] + b" " * (9 * MB) + b"}"),
        "chunked small and valid": lambda: _chunked(valid),
        "bad chunk size": lambda: _raw(
            "POST /v1/predict HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n"
            "Content-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
        "Content-Length over the limit": lambda: _raw(
            "POST /v1/predict HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
            f"Content-Length: {9 * MB}\r\n\r\n" + '{"stablehlo": "'),
        "both Content-Length and chunked": lambda: _raw(
            "POST /v1/predict HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n"
            "Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n0\r\n\r\n"),
        "URL of 10 KB": lambda: _raw(f"GET /{'a' * 10_000} HTTP/1.1\r\nHost: h\r\n\r\n"),
        "200 headers": lambda: _raw("GET /healthz HTTP/1.1\r\nHost: h\r\n" +
                                    "".join(f"X-{i}: v\r\n" for i in range(200)) + "\r\n"),
        "header of 20 KB": lambda: _raw(f"GET /healthz HTTP/1.1\r\nX-Big: {'v' * 20_000}\r\n\r\n"),
        "malformed request line": lambda: _raw("GARBAGE\r\n\r\n"),
        "bad HTTP version": lambda: _raw("GET /healthz HTTP/9.9\r\nHost: h\r\n\r\n"),
        "header without colon": lambda: _raw("GET /healthz HTTP/1.1\r\nHost h\r\n\r\n"),
        # Well-formed JSON that the endpoints do not take.
        "not JSON": lambda: _post("/v1/predict", b"{not json"),
        "top-level array": lambda: _post("/v1/predict", b"[1, 2]"),
        "NaN constant": lambda: _post("/v1/predict", b'{"features": {"hlo_ops": NaN}}'),
        "huge integer": lambda: _post("/v1/predict", b'{"features": {"hlo_ops": 1' +
                                      b"0" * 400 + b"}}"),
        "wrong content type": lambda: _raw(
            "POST /v1/predict HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\n"
            "Content-Length: 2\r\n\r\n{}"),
        "unknown backend": lambda: _json("/v1/predict", json.dumps(
            {"stablehlo": SMALL_MODULE, "backend": "tpu"})),
        "target without its backend": lambda: _json("/v1/predict", json.dumps(
            {"stablehlo": SMALL_MODULE, "target": "h100"})),
        "batch over the limit": lambda: _json("/v1/predict", json.dumps(
            {"instances": [{"stablehlo": SMALL_MODULE}] * 5000})),
        "empty module": lambda: _stablehlo(""),
        "advise with NaN budget": lambda: _post("/v1/advise", b'{"stablehlo": "x", '
                                                b'"budget_seconds": NaN}'),
        "advise with negative budget": lambda: _json("/v1/advise", json.dumps(
            {"stablehlo": SMALL_MODULE, "budget_seconds": -1})),
        "sample with absurd labels": lambda: _json("/v1/samples", json.dumps(
            {"stablehlo": SMALL_MODULE, "compile_seconds": 1e-320, "peak_rss_bytes": 1e30})),
        "retrain without token": lambda: _post("/v1/retrain", b"{}"),
        "unknown route": lambda: _raw("GET /v1/nothing HTTP/1.1\r\nHost: h\r\n\r\n"),
        "wrong method": lambda: _raw("DELETE /v1/predict HTTP/1.1\r\nHost: h\r\n\r\n"),
        **_round_two_kinds(),
    }


def _round_two_kinds() -> dict[str, Callable[[], bytes]]:
    """The kinds of the second attack pass: parser crashes, runaway extraction, integer
    overflow, framing, ids and field sizes the first kinds did not reach."""
    from costmodel.features import SCHEMA_VERSION

    huge_int = "1" + "0" * 400
    return {
        "affine-map stack bomb": lambda: _stablehlo(H.affine_bomb()),
        "affine-map 200k terms": lambda: _stablehlo(H.affine_bomb(200_000, "d0 + ")),
        "fan-out chain depth 18": lambda: _stablehlo(H.fanout(18)),
        "200k-op module": lambda: _stablehlo(H.flat(200_000)),
        "int-overflow dims": lambda: _stablehlo(H.overflow_dims()),
        "int-overflow dims in a batch": lambda: _json("/v1/predict", json.dumps(
            {"instances": [{"stablehlo": H.overflow_dims()}, {"stablehlo": SMALL_MODULE}]})),
        "xchunked transfer encoding": lambda: _raw(
            "POST /v1/predict HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n"
            "Content-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
        "%00 sample id": lambda: _raw("GET /v1/samples/%00 HTTP/1.1\r\nHost: h\r\n\r\n"),
        "%00 retrain id": lambda: _raw("GET /v1/retrain/%00 HTTP/1.1\r\nHost: h\r\n\r\n"),
        "1 MB unknown key": lambda: _json("/v1/predict", '{"' + "k" * MB + '": 1}'),
        "100k unknown keys": lambda: _json("/v1/predict", json.dumps(
            {f"k{i:06d}": 1 for i in range(100_000)})),
        "schema_version 17.0": lambda: _json("/v1/predict", '{"features": {"schema_version": '
                                             f'{SCHEMA_VERSION}.0}}, "backend": "cpu"}}'),
        "host_cpu_count 10**400": lambda: _json(
            "/v1/predict", f'{{"features": {{"schema_version": {SCHEMA_VERSION}, '
            '"host_cpu_count": ' + huge_int + '}, "backend": "cpu"}'),
        "5 MB jaxlib_version": lambda: _json("/v1/predict", json.dumps(
            {"features": {"schema_version": SCHEMA_VERSION, "jaxlib_version": "9" * (5 * MB)},
             "backend": "cpu"})),
        "5 MB string attribute": lambda: _stablehlo(H.with_string_attribute("a" * (5 * MB))),
    }


def send(port: int, data: bytes, timeout: float = 60.0) -> tuple[int | None, bytes]:
    """Send raw request bytes on a new connection; (status, body), status None if no answer."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server answered (413) and closed before taking it all
        response = http.client.HTTPResponse(sock)
        try:
            response.begin()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            return None, b""


class HealthProbe(threading.Thread):
    """Asks GET /healthz every `every` seconds on a fresh connection until stopped."""

    def __init__(self, port: int, every: float = 0.02, limit: int = 100_000) -> None:
        super().__init__(daemon=True)
        self.port, self.every, self.limit = port, every, limit
        self.latencies_ms: list[float] = []
        self.failures = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set() and len(self.latencies_ms) < self.limit:
            start = time.perf_counter()
            status, _ = send(self.port, b"GET /healthz HTTP/1.1\r\nHost: h\r\n"
                                        b"Connection: close\r\n\r\n", timeout=70)
            self.latencies_ms.append((time.perf_counter() - start) * 1e3)
            self.failures += status != 200
            self._halt.wait(self.every)

    def stop(self) -> dict:
        self._halt.set()
        self.join(80)
        return latency_summary(self.latencies_ms) | {"failures": self.failures}


def latency_summary(values: list[float]) -> dict:
    if len(values) < 2:
        return {"count": len(values)}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"count": len(values), "p50_ms": round(cuts[49], 2), "p99_ms": round(cuts[98], 2),
            "max_ms": round(max(values), 2)}


def hostile_run(port: int, total: int, threads: int = 4, deadline_s: float = 900.0) -> dict:
    """At least `total` hostile requests, every kind in turn; statuses by kind."""
    kinds = _kinds()
    payloads = {name: build() for name, build in kinds.items()}
    rounds = max(1, -(-total // len(payloads)))
    plan = [name for _ in range(rounds) for name in payloads]
    statuses: dict[str, Counter] = defaultdict(Counter)
    millis: dict[str, list[float]] = defaultdict(list)
    lock = threading.Lock()
    queue = iter(plan)
    stop_at = time.monotonic() + deadline_s

    def loop() -> None:
        while time.monotonic() < stop_at:
            with lock:
                name = next(queue, None)
            if name is None:
                return
            start = time.perf_counter()
            status, _ = send(port, payloads[name])
            elapsed = (time.perf_counter() - start) * 1e3
            with lock:
                statuses[name][status] += 1
                millis[name].append(elapsed)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(deadline_s + 120)
    every = [status for counts in statuses.values() for status in counts.elements()]
    return {"kinds": len(payloads), "requests": len(every),
            "server_errors": sum(1 for s in every if s is not None and s >= 500),
            "no_answer": sum(1 for s in every if s is None),
            "by_kind": {name: {"bytes": len(payloads[name]),
                               "statuses": {str(k): v for k, v in sorted(c.items(), key=str)},
                               "median_ms": round(statistics.median(millis[name]), 1),
                               "max_ms": round(max(millis[name]), 1)}
                        for name, c in statuses.items()}}


def slow_clients(port: int, count: int, wait_s: float) -> dict:
    """`count` connections that stop half way (headers + 6 of 1000 body bytes, or half
    the headers); how each was answered within `wait_s` seconds."""
    partial = [b"POST /v1/predict HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
               b"Content-Length: 1000\r\n\r\n{\"sta",
               b"POST /v1/predict HTTP/1.1\r\nHost: h\r\nContent-Ty"]
    socks = []
    for data in itertools.islice(itertools.cycle(partial), count):
        sock = socket.create_connection((HOST, port), timeout=wait_s)
        sock.sendall(data)
        socks.append(sock)
    answers: Counter = Counter()
    json_bodies = 0
    for sock in socks:
        response = http.client.HTTPResponse(sock)
        try:
            response.begin()
            body = response.read()
            answers[response.status] += 1
            json_bodies += body.startswith(b"{") and b'"code"' in body
        except (OSError, http.client.HTTPException):
            answers[None] += 1
        finally:
            sock.close()
    return {"clients": count, "answers": {str(k): v for k, v in answers.items()},
            "json_error_bodies": json_bodies}


def with_probe(port: int, work: Callable[[], dict]) -> dict:
    """Run `work` while a HealthProbe asks /healthz; its result gains the probe's figures."""
    probe = HealthProbe(port)
    probe.start()
    started = time.monotonic()
    result = work()
    result["seconds"] = round(time.monotonic() - started, 1)
    result["healthz"] = probe.stop()
    return result


def worker_boots(log_text: str) -> int:
    return log_text.count("Booting worker")


def worker_crashes(log_text: str) -> int:
    """Workers that died or were killed (a timeout, a signal, a non-zero exit); a worker
    recycled after MAX_REQUESTS (`worker_recycles`) exits cleanly and is not counted."""
    lines = log_text.splitlines()
    return sum(1 for line in lines if "WORKER TIMEOUT" in line or "exited with code" in line
               or ("was sent SIG" in line and "was sent SIGTERM" not in line))


def worker_recycles(log_text: str) -> int:
    return log_text.count("Autorestarting worker")


def main(argv: list[str] | None = None) -> int:
    import tempfile
    from pathlib import Path

    from api_load import Server, _model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="hostile requests at least")
    parser.add_argument("--slow", type=int, default=50, help="slow clients at once")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--model", help="artifact folder (default: shipped cpu model)")
    parser.add_argument("--tiny", action="store_true", help="use a tiny synthetic model")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="costmodel-faults-") as name:
        tmp = Path(name)
        model, kind = _model(args, tmp)
        server = Server(model, tmp, args.workers)
        try:
            server.wait_ready()
            time.sleep(1.0)
            booted = worker_boots(server.log_path.read_text())
            hostile = with_probe(server.port, lambda: hostile_run(server.port, args.requests))
            slow = with_probe(server.port, lambda: slow_clients(server.port, args.slow, 60))
            log_text = server.log_path.read_text()
            restarts = worker_boots(log_text) - booted
            crashes, recycles = worker_crashes(log_text), worker_recycles(log_text)
        finally:
            server.stop()
        # The worker this replaced, against the two stalled clients of the bug report.
        sync = Server(model, tmp, args.workers, worker_class="sync")
        try:
            sync.wait_ready()
            time.sleep(1.0)
            sync_slow = with_probe(sync.port, lambda: slow_clients(sync.port, 2, 90))
        finally:
            sync.stop()
    result = {"model": kind, "workers": args.workers, "hostile": hostile, "slow": slow,
              "worker_restarts": restarts, "worker_crashes": crashes,
              "worker_recycles": recycles, "sync_worker_two_slow_clients": sync_slow}
    print(json.dumps({k: v for k, v in result.items()}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    ok = (hostile["server_errors"] == 0 and hostile["no_answer"] == 0 and crashes == 0
          and slow["answers"].get("None", 0) == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
