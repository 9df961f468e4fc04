"""A generated fuzz run against `costmodel serve` on loopback: seeded random requests.

Independent of `api_faults.py`'s list of kinds: every request is drawn from a grammar of
StableHLO modules (random functions, types with any dims and element types, ops with
regions, calls between functions, attributes of every sort), then mutated at the byte
level (spans deleted, repeated, swapped, random tokens inserted), and wrapped in a random
JSON body (fields replaced by random JSON values, unknown keys, batches) for a random
route, or sent as mutated raw HTTP. Case `i` of seed `s` is rebuilt from (s, i) alone, so
any failure is reproducible with `--seed s --only i`.

Reports statuses by route, answers of 5xx and missing answers (both must be 0, with the
first cases of each kept in the result), worker restarts (gunicorn's "Booting worker"
lines beyond the first) and the slowest answers. Bounded in count and time.

Usage:
    python bench/api_fuzz.py --cases 2000 --json bench/results/api_fuzz.json
    python bench/api_fuzz.py --seed 3 --only 417      # rebuild and send one case
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections import Counter, defaultdict

from api_faults import HOST, HealthProbe, send, worker_boots, worker_crashes, worker_recycles

DTYPES = ["f32", "f16", "bf16", "f64", "i1", "i8", "i32", "i64", "ui8", "complex<f32>"]
DIMS = [0, 1, 2, 3, 7, 64, 1000, 2**31, 2**63 - 1, 2**64, -1]
UNARY = ["sine", "tanh", "exponential", "negate", "abs", "sqrt", "log", "not", "floor"]
BINARY = ["add", "multiply", "subtract", "divide", "maximum", "and", "power"]
TOKENS = ["{", "}", "(", ")", "<", ">", "[", "]", ",", ":", "=", "->", "%0", "%arg0", "@main",
          "tensor<", "x", "f32>", "stablehlo.add", "func.func", "return", '"', "\\", "#loc",
          "loc(", "affine_map<(d0) -> (d0)>", "dense<", "0x7FC0", "- ", "+ ", "\x00",
          "\ud800", "é", "//", "\n", "module", "call @f0", "^bb0", "...", "?"]
STRING_CHARS = 'ab\\"é%'
DENSE = ["0.0", "[1, 2]", '"0xDEAD"', "true"]
ROUTES = ["/v1/predict", "/v1/predict", "/v1/advise", "/v1/blame", "/v1/samples"]


def tensor_type(rng: random.Random, wild: bool = True) -> str:
    if not wild:  # what a valid module of float elementwise math takes
        dims = [str(rng.choice([1, 2, 3, 7, 64])) for _ in range(rng.randint(0, 4))]
        return f"tensor<{'x'.join([*dims, rng.choice(['f32', 'f16', 'bf16', 'f64'])])}>"
    rank = rng.choice([0, 0, 1, 2, 2, 3, 4, rng.randint(5, 80)])
    dims = [str(rng.choice(DIMS[:7]) if rng.random() < 0.9 else rng.choice(DIMS))
            for _ in range(rank)]
    return f"tensor<{'x'.join([*dims, rng.choice(DTYPES)])}>"


def attribute(rng: random.Random, depth: int = 0) -> str:
    pick = rng.randrange(8 if depth < 4 else 4)
    if pick == 0:
        return '"' + "".join(rng.choice(STRING_CHARS) for _ in range(rng.randint(0, 40))) + '"'
    if pick == 1:
        return str(rng.choice([0, -1, 2**63, 10**rng.randint(1, 60)]))
    if pick == 2:
        return rng.choice(["true", "unit", "1.5e308 : f64", "0x7FF8000000000000 : f64"])
    if pick == 3:
        return f"dense<{rng.choice(DENSE)}> : {tensor_type(rng)}"
    if pick in (4, 5):
        return "[" + ", ".join(attribute(rng, depth + 1) for _ in range(rng.randint(0, 5))) + "]"
    if pick == 6:
        return "{" + ", ".join(f"k{i} = {attribute(rng, depth + 1)}"
                               for i in range(rng.randint(0, 4))) + "}"
    return f"#stablehlo<comparison_direction {rng.choice(['EQ', 'LT', 'XX'])}>"


def function(rng: random.Random, name: str, callees: list[str], kind: str | None) -> str:
    """A function of `kind` to `kind`; any type, op and attribute when `kind` is None."""
    wild = kind is None
    kind = kind or tensor_type(rng)
    unary, binary = (UNARY, BINARY) if wild else (UNARY[:7], BINARY[:5])
    lines = [f"  func.func {rng.choice(['public', 'private'])} @{name}(%arg0: {kind}) -> {kind} {{"]
    last = "%arg0"
    for i in range(rng.randint(0, 12)):
        pick = rng.random()
        if pick < 0.4:
            op = f"stablehlo.{rng.choice(unary)} {last}"
        elif pick < 0.7:
            op = f"stablehlo.{rng.choice(binary)} {last}, %arg0"
        elif pick < 0.85 and callees:
            lines.append(f"    %{i} = call @{rng.choice(callees)}({last}) : ({kind}) -> {kind}")
            last = f"%{i}"
            continue
        else:
            target, extra = ((attribute(rng), attribute(rng)) if wild
                             else ('"fuzz_target"', rng.choice(['"s"', "3 : i64", "[1, 2]"])))
            op = f'"stablehlo.custom_call"({last}) {{call_target_name = {target}, x.a = {extra}}}'
            lines.append(f"    %{i} = {op} : ({kind}) -> {kind}")
            last = f"%{i}"
            continue
        lines.append(f"    %{i} = {op} : {kind}" + (f" loc(\"l{i}\")" if rng.random() < 0.2
                                                    else ""))
        last = f"%{i}"
    lines += [f"    return {last} : {kind}", "  }"]
    return "\n".join(lines)


def module(rng: random.Random) -> str:
    """Half the modules valid (float math, calls to earlier functions), half wild (any
    type, attribute and call, recursion included)."""
    wild = rng.random() < 0.5
    kind = None if wild else tensor_type(rng, wild=False)
    names = [f"f{i}" for i in range(rng.randint(0, 5))]
    funcs = []
    for i, name in enumerate(names):
        # callees are earlier functions; a wild one now and then itself or a later one
        later = names[i:i + 2] if wild and rng.random() < 0.2 else []
        funcs.append(function(rng, name, names[:i] + later, kind))
    funcs.append(function(rng, "main", names, kind))
    attributes = attribute(rng) if wild else '"x"'
    head = "module @m" + (f" attributes {{x.a = {attributes}}}" if rng.random() < 0.3 else "")
    return head + " {\n" + "\n".join(funcs) + "\n}\n"


def mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.choice([0, 0, 1, 1, 2, 4, 8])):
        if not text:
            break
        a = rng.randrange(len(text))
        b = min(len(text), a + rng.randint(1, 64))
        pick = rng.randrange(5)
        if pick == 0:
            text = text[:a] + text[b:]
        elif pick == 1:
            text = text[:a] + text[a:b] * rng.choice([2, 10, 100, 2000]) + text[b:]
        elif pick == 2:
            text = text[:a] + rng.choice(TOKENS) * rng.choice([1, 1, 3, 500]) + text[a:]
        elif pick == 3:
            c = rng.randrange(len(text))
            text = text[:a] + text[c:c + 32] + text[b:]
        else:
            text = text[:a]
    return text


def json_value(rng: random.Random, depth: int = 0):
    pick = rng.randrange(9 if depth < 5 else 6)
    if pick == 0:
        return rng.choice([0, -1, 2**63, 10**rng.randint(10, 400), True, None])
    if pick == 1:
        return rng.choice([0.0, -0.0, 1e308, 5e-324, 17.0, 2.5])
    if pick == 2:
        return "".join(rng.choice("a\"\\é\ud800\x00 ") for _ in range(rng.randint(0, 30)))
    if pick == 3:
        return "x" * rng.choice([1, 1000, 2**20])
    if pick == 4:
        return rng.choice(["cpu", "gpu", "tpu", "h100", "v5e", "", "CPU"])
    if pick == 5:
        return 17
    if pick in (6, 7):
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["stablehlo", "features", "backend", "k", "x" * 100]):
            json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def body(rng: random.Random) -> dict:
    out: dict = {"stablehlo": mutate(module(rng), rng)}
    if rng.random() < 0.3:
        out = {"features": {"schema_version": rng.choice([17, 17, "17", 17.5]),
                            rng.choice(["hlo_ops", "flops", "nope"]): json_value(rng)}}
    for _ in range(rng.choice([0, 0, 0, 1, 3])):
        out[rng.choice(["backend", "target", "budget_seconds", "compile_seconds",
                        "environment", "instances", "k" * rng.choice([1, 5000])])] = \
            json_value(rng)
    if rng.random() < 0.1:
        out = {"instances": [out] * rng.choice([1, 2, 50])}
    return out


def request(seed: int, index: int) -> dict:
    """Case `index` of `seed` as parts: method, path, body, and a header line mutated or
    None; rebuilt from (seed, index) alone."""
    rng = random.Random(f"{seed}-{index}")
    route = rng.choice(ROUTES)
    if rng.random() < 0.08:
        path = rng.choice(["/v1/samples/", "/v1/retrain/"]) + rng.choice(
            ["%00", "%ff", "0" * 32, "../x", "%2e%2e", "a" * 5000, "é"])
        return {"route": "GET ids", "method": "GET", "path": path, "body": b"",
                "mutated": None}
    payload = json.dumps(body(rng), ensure_ascii=rng.random() < 0.5).encode(
        "utf-8", "surrogatepass")
    mutated = None
    if rng.random() < 0.1:  # framing: a mutated header line (never a longer body)
        line = rng.choice([f"Host: {HOST}", "Content-Type: application/json", "Connection: close"])
        mutated = mutate(line, rng).replace("\r", "").replace("\n", "") or "X: y"
    return {"route": route, "method": "POST", "path": route, "body": payload,
            "mutated": mutated}


def case(seed: int, index: int, samples_token: str) -> tuple[str, bytes]:
    """(route, raw request bytes) of case `index` of `seed`."""
    parts = request(seed, index)
    if parts["method"] == "GET":
        return parts["route"], f"GET {parts['path']} HTTP/1.1\r\nHost: h\r\n\r\n".encode()
    headers = [f"POST {parts['path']} HTTP/1.1", f"Host: {HOST}",
               "Content-Type: application/json", f"Content-Length: {len(parts['body'])}",
               "Connection: close"]
    if parts["path"] == "/v1/samples":
        headers.append(f"Authorization: Bearer {samples_token}")
    if parts["mutated"] is not None:
        headers.append(parts["mutated"])
    head = ("\r\n".join(headers) + "\r\n\r\n").encode("utf-8", "surrogatepass")
    return parts["route"], head + parts["body"]


def fuzz(port: int, seed: int, cases: int, threads: int, token: str,
         deadline_s: float) -> dict:
    statuses: dict[str, Counter] = defaultdict(Counter)
    failures: list[dict] = []
    slowest: list[tuple[float, int, str]] = []
    lock = threading.Lock()
    indices = iter(range(cases))
    stop_at = time.monotonic() + deadline_s

    def loop() -> None:
        while time.monotonic() < stop_at:
            with lock:
                index = next(indices, None)
            if index is None:
                return
            route, data = case(seed, index, token)
            start = time.perf_counter()
            status, answer = send(port, data, timeout=90)
            elapsed = time.perf_counter() - start
            with lock:
                statuses[route][status] += 1
                slowest.append((elapsed, index, route))
                if status is None or status >= 500:
                    failures.append({"case": index, "route": route, "status": status,
                                     "request_head": data[:300].decode("latin-1"),
                                     "answer": answer[:300].decode("latin-1")})

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(deadline_s + 120)
    every = [s for counts in statuses.values() for s in counts.elements()]
    slowest.sort(reverse=True)
    return {"seed": seed, "cases": len(every),
            "server_errors": sum(1 for s in every if s is not None and s >= 500),
            "no_answer": sum(1 for s in every if s is None),
            "by_route": {route: {str(k): v for k, v in sorted(c.items(), key=str)}
                         for route, c in sorted(statuses.items())},
            "slowest": [{"case": i, "route": r, "seconds": round(t, 3)}
                        for t, i, r in slowest[:5]],
            "failures": failures[:20]}


def main(argv: list[str] | None = None) -> int:
    import tempfile
    from pathlib import Path

    from api_load import Server, _model

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", type=int, help="send case ONLY of the seed, print it")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=600.0, help="time bound")
    parser.add_argument("--model", help="artifact folder (default: shipped cpu model)")
    parser.add_argument("--tiny", action="store_true", help="use a tiny synthetic model")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    token = "fuzz-samples-token-0123456789"
    with tempfile.TemporaryDirectory(prefix="costmodel-fuzz-") as name:
        tmp = Path(name)
        model, kind = _model(args, tmp)
        server = Server(model, tmp, args.workers, config={"SAMPLES_TOKEN": token})
        try:
            server.wait_ready()
            time.sleep(1.0)
            booted = worker_boots(server.log_path.read_text())
            if args.only is not None:
                route, data = case(args.seed, args.only, token)
                print(route, data[:2000])
                print(send(server.port, data, timeout=90))
                return 0
            probe = HealthProbe(server.port)
            probe.start()
            started = time.monotonic()
            result = fuzz(server.port, args.seed, args.cases, args.threads, token,
                          args.seconds)
            result["seconds"] = round(time.monotonic() - started, 1)
            result["healthz"] = probe.stop()
            log_text = server.log_path.read_text()
            result["worker_restarts"] = worker_boots(log_text) - booted
            result["worker_crashes"] = worker_crashes(log_text)
            result["worker_recycles"] = worker_recycles(log_text)
        finally:
            server.stop()
    result = {"model": kind, "workers": args.workers, **result}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    ok = result["server_errors"] == 0 and result["no_answer"] == 0 and \
        result["worker_crashes"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
