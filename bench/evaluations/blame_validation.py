"""Does `costmodel.blame` find the expensive region planted among cheap code, and is its
share what removing that region really saves?

Each program runs the same cheap lines (`cheap`: sums, softmax, a norm) beside one planted
region: an unrolled loop, a big captured constant folded or embedded, a deep stack of
layers (plain JAX, Flax Linen, Equinox, Haiku's LSTM unrolled), convolutions, a loop under
`jax.grad`. The planted region is the line marked `# planted: KIND`; for a layer library
that is the user's own line inside their module (blame charges library code to the
innermost line of the user's code), and removing the region skips the model's call.
Two scores:

- top-1: the highest-ranked source region is the planted line (reported over the source
  regions, and also over every row with the fixed cost of any compile among them);
- share: the planted line's blamed share of the prediction against the share of the
  measured compile that removing it saves, (with - without) / with, agreeing when
  within a factor of 2.

The program with and without its planted region are compiled interleaved, median of
--repeats (5), new function objects, persistent cache off (`_compile_timing.py`).
`--shares-from OLD.json` compiles nothing: it blames again against the timings an earlier
run stored (blame itself never compiles), so two versions of blame meet the same
measurements.

    python bench/evaluations/blame_validation.py [--repeats 5] [--json out.json] [--shares-from old.json]
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from pathlib import Path

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from _compile_timing import interleaved, medians
from jax import lax

import costmodel
from costmodel._blame import FIXED, SHARED

FACTOR = 2.0
F32 = jnp.float32


def _sds(*shape) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, F32)


def cheap(x):
    """The cheap lines every program has beside its planted region."""
    a = jnp.sum(jnp.sin(x)) * 2.0
    b = jnp.max(jnp.cos(x) * x)
    c = jnp.mean(jax.nn.softmax(x, axis=-1))
    d = jnp.sum(jnp.abs(x - jnp.mean(x, axis=0)))
    e = jnp.linalg.norm(x.T @ x)
    return a + b + c + d + e


def loop(steps: int, width: int = 64):
    def make(plant: bool):
        def program(x, w):
            s = cheap(x)
            if plant:
                for _ in range(steps):
                    x = jnp.tanh(x @ w) + 0.1 * x  # planted: loop
            return s + jnp.sum(x)
        return program, (_sds(16, width), _sds(width, width))
    return "loop", f"unrolled loop {steps}", make


def norm_loop(steps: int, width: int = 64):
    def make(plant: bool):
        def program(x, w):
            s = cheap(x)
            if plant:
                for _ in range(steps):
                    x = jax.nn.gelu((x - x.mean(-1, keepdims=True)) @ w)  # planted: norm_loop
            return s + jnp.sum(x)
        return program, (_sds(16, width), _sds(width, width))
    return "norm_loop", f"unrolled norm-gelu loop {steps}", make


def folded(n: int):
    table = np.random.default_rng(n).random((n, n), dtype=np.float32)

    def make(plant: bool):
        def program(x):
            s = cheap(x)
            if plant:
                s = s + jnp.sum(jnp.asarray(table) @ jnp.asarray(table))  # planted: folded
            return s
        return program, (_sds(16, 64),)
    return "folded", f"folded captured constant {n}x{n}", make


def embedded(n: int):
    table = np.random.default_rng(n).standard_normal((n, n)).astype(np.float32)

    def make(plant: bool):
        def program(x):
            s = cheap(x)
            if plant:
                s = s + jnp.sum(jnp.tanh(x @ table))  # planted: embedded
            return s
        return program, (_sds(8, n),)
    return "embedded", f"embedded captured constant {n * n * 4 >> 20} MB", make


def deep_stack(depth: int, width: int = 64):
    def make(plant: bool):
        def program(x, ws):
            s = cheap(x)
            if plant:
                for w in ws:
                    x = jax.nn.gelu(x @ w) + x  # planted: deep_stack
            return s + jnp.sum(x)
        return program, (_sds(16, width), [_sds(width, width)] * depth)
    return "deep_stack", f"deep stack {depth} distinct weights", make


def helper_loop(steps: int, width: int = 64):
    def make(plant: bool):
        def program(x, w):
            s = cheap(x)
            if plant:
                x = _helper(x, w, steps)
            return s + jnp.sum(x)
        return program, (_sds(16, width), _sds(width, width))
    return "helper", f"loop {steps} in a helper", make


def _helper(x, w, steps):
    for _ in range(steps):
        x = jnp.sin(x @ w) * 0.5 + x  # planted: helper
    return x


def conv_stack(layers: int, channels: int = 16):
    def make(plant: bool):
        def program(x, k):
            s = cheap(x.reshape(x.shape[0], -1))
            if plant:
                for _ in range(layers):
                    x = jax.nn.relu(lax.conv(x, k, (1, 1), "SAME"))  # planted: conv
            return s + jnp.sum(x)
        return program, (_sds(4, channels, 16, 16), _sds(channels, channels, 3, 3))
    return "conv", f"conv stack {layers}", make


def grad_loop(steps: int, width: int = 64):
    def make(plant: bool):
        def loss(w, x):
            s = cheap(x @ w)
            if plant:
                for _ in range(steps):
                    x = jnp.tanh(x @ w) + 0.1 * x  # planted: grad
            return s + jnp.sum(x ** 2)
        return jax.grad(loss), (_sds(width, width), _sds(16, width))
    return "grad", f"grad of unrolled loop {steps}", make


def flax_stack(depth: int, width: int = 64):
    import flax.linen as nn

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(depth):
                x = x + nn.Dense(width)(nn.gelu(nn.LayerNorm()(x)))  # planted: flax
            return x

    model = Stack()
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((16, width))))

    def make(plant: bool):
        def program(params, x):
            s = cheap(x)
            if plant:
                x = model.apply(params, x)  # blamed inside, on the layer line
            return s + jnp.sum(x)
        return program, (params, _sds(16, width))
    return "flax", f"flax linen stack {depth}", make


def equinox_mlp(depth: int, width: int = 64):
    import equinox as eqx

    arrays, static = eqx.partition(
        eqx.nn.MLP(width, width, width, depth, key=jax.random.key(0)), eqx.is_array)
    arrays = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), arrays)

    def make(plant: bool):
        def program(arrays, x):
            s = cheap(x)
            if plant:
                x = jax.vmap(eqx.combine(arrays, static))(x)  # planted: equinox
            return s + jnp.sum(x)
        return program, (arrays, _sds(16, width))
    return "equinox", f"equinox mlp depth {depth}", make


def haiku_lstm(steps: int, hidden: int = 64, batch: int = 8):
    import haiku as hk

    def forward(xs):
        core = hk.LSTM(hidden)
        return hk.static_unroll(core, xs, core.initial_state(batch))[0]  # planted: haiku

    model = hk.without_apply_rng(hk.transform(forward))
    xs = _sds(steps, batch, 16)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(xs.shape)))

    def make(plant: bool):
        def program(params, xs):
            s = cheap(xs[0])
            if plant:
                s = s + jnp.sum(model.apply(params, xs))
            return s
        return program, (params, xs)
    return "haiku", f"haiku lstm static_unroll {steps}", make


def programs() -> list:
    return [loop(40), loop(120), loop(300), norm_loop(30), norm_loop(100),
            folded(512), folded(768), folded(1024), embedded(1024), embedded(2048),
            deep_stack(16), deep_stack(48), helper_loop(80), conv_stack(8), conv_stack(24),
            grad_loop(30), grad_loop(80), flax_stack(12), flax_stack(32), equinox_mlp(24),
            haiku_lstm(16)]


def planted_line(kind: str) -> str:
    """`file.py:LINE` of the line marked `# planted: KIND` in this file."""
    lines = inspect.getsource(inspect.getmodule(planted_line)).splitlines()
    number = next(i for i, line in enumerate(lines, 1) if line.endswith(f"# planted: {kind}"))
    return f"{Path(__file__).name}:{number}"


def judge(kind: str, name: str, blame, measured: dict) -> dict:
    target = planted_line(kind)
    sources = [r for r in blame.regions if r.source not in (FIXED, SHARED)]
    share = next((r.share for r in blame.regions if r.source == target), 0.0)
    saved = (measured["with"] - measured["without"]) / measured["with"]
    ratio = share / saved if saved > 0 else float("inf")
    row = {"program": name, "kind": kind, "planted": target,
           "top": sources[0].source, "top_with_fixed": blame.regions[0].source,
           "top1": sources[0].source == target,
           "top1_with_fixed": blame.regions[0].source == target,
           "blamed_share": share, "fixed_share": next(
               (r.share for r in blame.regions if r.source == FIXED), 0.0),
           "measured_share": saved, "ratio": ratio,
           "agree": 1 / FACTOR <= ratio <= FACTOR,
           "predicted_s": blame.compile_seconds, "measured_s": measured}
    print(f"{name:<34} top {'OK ' if row['top1'] else 'NO '}({row['top'][-28:]:<28}) "
          f"blamed {share:6.1%} removal saves {saved:6.1%} ratio {ratio:5.2f} "
          f"{'agree' if row['agree'] else 'DISAGREE'}  with {measured['with']:.3f}s "
          f"without {measured['without']:.3f}s", flush=True)
    return row


def run(repeats: int, stored: dict | None = None) -> dict:
    """Time and judge every program; with `stored` (an earlier run's JSON), judge against
    its timings instead of compiling."""
    jax.config.update("jax_enable_compilation_cache", False)
    timed = {r["program"]: r["all_s"] for r in (stored or {"results": []})["results"]}
    if stored is None:
        interleaved({"warm-up": lambda: loop(3)[2](True)}, 1)
    else:
        repeats = stored["repeats"]
    rows = []
    for kind, name, make in programs():
        blame = costmodel.blame(*_flat(make(True)))
        times = timed[name] if stored is not None else interleaved(
            {"with": lambda: make(True), "without": lambda: make(False)}, repeats)
        rows.append({**judge(kind, name, blame, medians(times)), "all_s": times})
    from costmodel.measure.machine import environment

    env = environment()
    n = len(rows)
    summary = {
        "programs": n, "repeats": repeats, "factor": FACTOR,
        "top1": sum(r["top1"] for r in rows), "top1_fraction": sum(r["top1"] for r in rows) / n,
        "top1_with_fixed": sum(r["top1_with_fixed"] for r in rows),
        "agree": sum(r["agree"] for r in rows), "agree_fraction": sum(r["agree"] for r in rows) / n,
        "ratio_median": float(np.median([r["ratio"] for r in rows])),
        "machine": {k: env[k] for k in ("cpu_model", "cpu_count", "jax_version")},
        "load_average_after": os.getloadavg() if stored is None
        else stored.get("load_average_after"), "results": rows}
    print(f"top-1: the planted line ranked first among source regions in {summary['top1']}/{n} "
          f"({summary['top1_fraction']:.0%}; {summary['top1_with_fixed']}/{n} counting the "
          f"fixed-cost row); blamed share within {FACTOR:g}x of the removal's measured saving "
          f"in {summary['agree']}/{n} ({summary['agree_fraction']:.0%}), median ratio "
          f"{summary['ratio_median']:.2f}")
    return summary


def _flat(built):
    fn, args = built
    return (fn, *args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--shares-from", default=None,
                        help="an earlier run's --json: blame against its timings, compile nothing")
    args = parser.parse_args()
    summary = run(args.repeats, args.shares_from and json.loads(Path(args.shares_from).read_text()))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
