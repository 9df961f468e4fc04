"""`costmodel demo`: predict and advise on a few example programs, then compile them and
show predicted against measured."""

from __future__ import annotations

import time


def examples():
    """(name, build) pairs; build returns a fresh (fn, args) each call."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    def mlp():
        def f(params, x):
            for w in params:
                x = jax.nn.relu(x @ w)
            return jnp.mean(x ** 2)
        params = [jax.ShapeDtypeStruct((256, 256), jnp.float32)] * 4
        return jax.grad(f), (params, jax.ShapeDtypeStruct((64, 256), jnp.float32))

    def unrolled(steps=300):
        def f(x, w):
            for _ in range(steps):
                x = jnp.tanh(x @ w) + 0.1 * x
            return x
        return f, (jax.ShapeDtypeStruct((32, 64), jnp.float32),
                   jax.ShapeDtypeStruct((64, 64), jnp.float32))

    def scanned(steps=300):
        def f(x, w):
            def body(c, _):
                return jnp.tanh(c @ w) + 0.1 * c, None
            return lax.scan(body, x, None, length=steps)[0]
        return f, (jax.ShapeDtypeStruct((32, 64), jnp.float32),
                   jax.ShapeDtypeStruct((64, 64), jnp.float32))

    def stages(steps=500):
        def f(x, ws):
            for _ in range(steps):  # four distinct weights per step, unrolled
                for w in ws:
                    x = jnp.tanh(x @ w)
            return x
        return f, (jax.ShapeDtypeStruct((8, 16), jnp.float32),
                   [jax.ShapeDtypeStruct((16, 16), jnp.float32)] * 4)

    def transformer(layers=4, d=128, seq=64):
        def block(x, w):
            q, k, v = x @ w[0], x @ w[1], x @ w[2]
            att = jax.nn.softmax(q @ k.T / np.sqrt(d), axis=-1)
            x = x + att @ v
            return x + jax.nn.gelu(x @ w[3]) @ w[4]
        def f(ws, x):
            for w in ws:
                x = block(x, w)
            return jnp.sum(x ** 2)
        ws = [[jax.ShapeDtypeStruct((d, d), jnp.float32)] * 5] * layers
        return jax.value_and_grad(f), (ws, jax.ShapeDtypeStruct((seq, d), jnp.float32))

    def constants():
        table = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)
        def f(x):
            return jnp.tanh(x @ table) @ table.T
        return f, (jax.ShapeDtypeStruct((16, 1024), jnp.float32),)

    return [("mlp (grad, 4 layers)", mlp), ("loop unrolled 300", unrolled),
            ("loop as lax.scan 300", scanned), ("4 stages x 500 unrolled", stages),
            ("transformer 4 layers", transformer),
            ("4 MB captured constant", constants)]


def _measure(build) -> float:
    import jax

    fn, args = build()
    lowered = jax.jit(fn).trace(*args).lower()
    start = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - start


def run(compile_programs: bool = True, budget_seconds: float = 1.0, as_json: bool = False):
    """Print the demo table (or return rows as JSON-ready dicts)."""
    import jax

    from ._predict import _fmt_seconds
    from ._stage import lower

    jax.config.update("jax_enable_compilation_cache", False)
    if compile_programs:  # the first compile in a process pays one-off start-up costs
        _measure(examples()[0][1])
    if not as_json:
        print(f"advice judged against a compile budget of {_fmt_seconds(budget_seconds)} "
              "(--budget)")
    rows = []
    for name, build in examples():
        fn, args = build()
        advice = lower(fn, *args).advise(budget_seconds=budget_seconds)
        pred = advice.prediction
        best = advice.alternatives[0]
        row = {"program": name, "predicted_seconds": pred.compile_seconds,
               "interval": list(pred.compile_seconds_interval),
               "predicted_host_memory_bytes": pred.peak_memory_bytes,
               "advice": best.strategy if advice.split else "keep",
               "reason": advice.reason,
               "measured_seconds": _measure(build) if compile_programs else None}
        rows.append(row)
        if not as_json:
            _print_row(row, first=len(rows) == 1)
    return rows


def _print_row(row: dict, first: bool) -> None:
    from ._predict import _fmt_bytes, _fmt_seconds

    if first:
        print(f"{'program':<26}{'predicted':>11}  {'90% interval':<19}{'host mem':>10}"
              f"{'measured':>11}  advice")
    lo, hi = row["interval"]
    measured = row["measured_seconds"]
    print(f"{row['program']:<26}{_fmt_seconds(row['predicted_seconds']):>11}  "
          f"{_fmt_seconds(lo) + '-' + _fmt_seconds(hi):<19}"
          f"{_fmt_bytes(row['predicted_host_memory_bytes']):>10}"
          f"{_fmt_seconds(measured) if measured is not None else '-':>11}  {row['advice']}")
