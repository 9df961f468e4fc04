"""Can malformed StableHLO crash or hang the process that parses it?

Mutates real module texts (byte flips, truncation, deleted/duplicated/swapped lines,
swapped op names and types) and feeds each to `costmodel.features.from_stablehlo` in a
child process; a child that dies from a signal or runs past the time limit is a finding.

    python bench/fuzz_stablehlo_parser.py --cases 2000
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys

CHILD = r"""
import json, sys
from costmodel.features import from_stablehlo, StableHLOParseError
texts = json.loads(sys.stdin.read())
for i, text in enumerate(texts):
    try:
        from_stablehlo(text)
        print("ok", i, flush=True)
    except StableHLOParseError:
        print("rejected", i, flush=True)
    except Exception as exc:
        print("other", i, type(exc).__name__, str(exc)[:100].replace("\n", " "), flush=True)
"""


def seeds() -> list[str]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    x = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    progs = [
        lambda a: jnp.sin(a) @ a,
        lambda a: lax.scan(lambda c, _: (jnp.tanh(c @ c), None), a, None, length=3)[0],
        jax.grad(lambda a: jnp.sum(jnp.linalg.cholesky(a @ a.T + jnp.eye(8)))),
        lambda a: lax.cond(a[0, 0] > 0, jnp.sin, jnp.cos, a),
    ]
    return [jax.jit(p).lower(x).as_text() for p in progs]


def mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    kind = rng.randrange(7)
    if kind == 0:
        cut = rng.randrange(len(text))
        return text[:cut]
    if kind == 1:
        chars = list(text)
        for _ in range(rng.randint(1, 5)):
            chars[rng.randrange(len(chars))] = chr(rng.choice([0, 10, 34, 37, 40, 41, 60, 62,
                                                               64, 123, 125, 0x41, 0xff]))
        return "".join(chars)
    if kind == 2 and len(lines) > 2:
        del lines[rng.randrange(len(lines))]
    elif kind == 3:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[rng.randrange(len(lines))])
    elif kind == 4 and len(lines) > 2:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 5:
        ops = ["stablehlo.add", "stablehlo.while", "stablehlo.dot_general", "func.call",
               "stablehlo.custom_call", "stablehlo.reduce", "stablehlo.constant"]
        i = rng.randrange(len(lines))
        for op in ops:
            if op in lines[i]:
                lines[i] = lines[i].replace(op, rng.choice(ops))
    else:
        types = ["tensor<8x8xf32>", "tensor<f32>", "tensor<i1>", "tensor<8xf32>",
                 "tensor<?x8xf32>", "tensor<0x8xf32>", "tensor<8x8xcomplex<f32>>"]
        i = rng.randrange(len(lines))
        for t in types:
            if t in lines[i]:
                lines[i] = lines[i].replace(t, rng.choice(types), 1)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    base = seeds()
    cases = [mutate(rng.choice(base), rng) for _ in range(args.cases)]
    counts = {"ok": 0, "rejected": 0, "other": 0, "crashed": 0, "hung": 0}
    for start in range(0, len(cases), args.batch):
        batch = cases[start:start + args.batch]
        try:
            proc = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(batch),
                                  capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            counts["hung"] += 1
            print(f"batch {start}: timed out")
            continue
        seen = proc.stdout.split("\n")
        for line in seen:
            if line:
                counts[line.split()[0]] += 1
                if line.startswith("other"):
                    print(line)
        done = sum(1 for line in seen if line)
        if proc.returncode != 0:
            counts["crashed"] += 1
            bad = batch[done] if done < len(batch) else ""
            print(f"batch {start}: child exited {proc.returncode} at case {start + done}: "
                  f"{bad[:300]!r}")
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
