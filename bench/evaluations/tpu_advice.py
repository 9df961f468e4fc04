"""Advice on a TPU target against compiles: a 16-layer transformer training step, unrolled
(a Python loop over the layers) and as `lax.scan` over stacked layers.

`advise` on the unrolled step for `tpu/v5e` should recommend the scan, with a predicted
saving within 2x of the measured one. `measure` compiles both deviceless here (one device
of `v5e:2x2`, interleaved, a fresh function each time); `export` writes both as `jax.export`
artifacts for `tpu_device_run.py` on the chip, whose rows `score` reads.

    python bench/evaluations/tpu_advice.py advise [--layers 16]
    python bench/evaluations/tpu_advice.py measure [--repeats 3] [--json OUT]
    python bench/evaluations/tpu_advice.py export --out .tpu-advice [--repeats 3]
    python bench/evaluations/tpu_advice.py score bench/data/tpu_advice/*.jsonl [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

SEQ, D, HEADS = 128, 256, 4


def _params(layers: int, seed: int = 0):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.PRNGKey(seed), layers * 6)
    scale = D ** -0.5

    def layer(i):
        k = keys[i * 6:(i + 1) * 6]
        return {"wq": jax.random.normal(k[0], (D, D)) * scale,
                "wk": jax.random.normal(k[1], (D, D)) * scale,
                "wv": jax.random.normal(k[2], (D, D)) * scale,
                "wo": jax.random.normal(k[3], (D, D)) * scale,
                "w1": jax.random.normal(k[4], (D, 4 * D)) * scale,
                "w2": jax.random.normal(k[5], (4 * D, D)) * (4 * D) ** -0.5,
                "g": jnp.ones((D,))}
    return [layer(i) for i in range(layers)]


def _block(x, p):
    import jax
    import jax.numpy as jnp

    def norm(v):
        mu = v.mean(-1, keepdims=True)
        return (v - mu) * jax.lax.rsqrt(((v - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * p["g"]

    h = norm(x)
    q, k, v = (jnp.reshape(h @ p[w], (SEQ, HEADS, D // HEADS)) for w in ("wq", "wk", "wv"))
    att = jnp.einsum("qhd,khd->hqk", q, k) / (D // HEADS) ** 0.5
    mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    att = jax.nn.softmax(jnp.where(mask, att, -1e9), axis=-1)
    x = x + jnp.reshape(jnp.einsum("hqk,khd->qhd", att, v), (SEQ, D)) @ p["wo"]
    return x + jax.nn.gelu(norm(x) @ p["w1"]) @ p["w2"]


def unrolled_step(layers: int):
    """(step, args) with the layers as a Python loop: XLA sees every layer."""
    import jax
    import jax.numpy as jnp

    def loss(params, x):
        for p in params:
            x = _block(x, p)
        return jnp.mean(x ** 2)

    def step(params, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        return value, jax.tree_util.tree_map(lambda a, g: a - 1e-3 * g, params, grads)

    return step, (_params(layers), jnp.ones((SEQ, D)))


def scanned_step(layers: int):
    """(step, args) with the layers stacked and run by `lax.scan` over one block."""
    import jax
    import jax.numpy as jnp

    def loss(stacked, x):
        x, _ = jax.lax.scan(lambda c, p: (_block(c, p), None), x, stacked)
        return jnp.mean(x ** 2)

    def step(stacked, x):
        value, grads = jax.value_and_grad(loss)(stacked, x)
        return value, jax.tree_util.tree_map(lambda a, g: a - 1e-3 * g, stacked, grads)

    stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *_params(layers))
    return step, (stacked, jnp.ones((SEQ, D)))


def advise(layers: int) -> dict:
    import costmodel

    step, args = unrolled_step(layers)
    stage = costmodel.lower(step, *args)
    whole = stage.predict(backend="tpu", target="v5e")
    advice = stage.advise(budget_seconds=whole.compile_seconds / 4, backend="tpu", target="v5e")
    scan_step, scan_args = scanned_step(layers)
    scanned = costmodel.lower(scan_step, *scan_args).predict(backend="tpu", target="v5e")
    print(advice)
    scan = [a for a in advice.alternatives if a.strategy == "scan"]
    return {"layers": layers, "recommended": advice.alternatives[0].strategy,
            "predicted_unrolled_s": whole.compile_seconds,
            # what the advice says the scan would cost, and what predicting the scanned
            # program itself says
            "advice_scan_s": scan[0].predicted_compile_seconds if scan else None,
            "predicted_scanned_s": scanned.compile_seconds,
            "advice": str(advice).splitlines()[0]}


def measure(layers: int, repeats: int) -> dict:
    """Deviceless compile seconds of both forms here, interleaved."""
    import jax

    from costmodel.measure.tpu_target import tpu_sharding

    jax.config.update("jax_enable_compilation_cache", False)
    sharding, _ = tpu_sharding("v5e")
    seconds = {"unrolled": [], "scanned": []}
    for _ in range(repeats):
        for form, build in (("unrolled", unrolled_step), ("scanned", scanned_step)):
            fn, args = build(layers)
            specs = jax.tree_util.tree_map(
                lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), args)
            lowered = jax.jit(fn).trace(*specs).lower()
            t0 = time.perf_counter()
            lowered.compile()
            seconds[form].append(time.perf_counter() - t0)
            print(form, f"{seconds[form][-1]:.2f} s", file=sys.stderr)
    med = {form: statistics.median(v) for form, v in seconds.items()}
    return {"layers": layers, "deviceless_here_s": seconds, "median_s": med,
            "measured_saving_s": med["unrolled"] - med["scanned"]}


def export(layers: int, out: Path, repeats: int = 1) -> None:
    """Both forms as `jax.export` artifacts with a manifest `tpu_device_run.py` reads; each
    form listed `repeats` times, interleaved, so the chip compiles them in turn."""
    from tpu_device import serialize_for_tpu

    out.mkdir(parents=True, exist_ok=True)
    forms = ("unrolled", "scanned")
    for form, build in zip(forms, (unrolled_step, scanned_step)):
        (out / f"{form}.bin").write_bytes(serialize_for_tpu(*build(layers)))
    entries = [{"name": f"{form}{i}", "file": f"{form}.bin",
                "key": f"tpu_advice|{form}|{layers}", "family": "tpu_advice",
                "library": "synthetic", "x64": False, "here_s": 0.0}
               for i in range(repeats) for form in forms]
    (out / "manifest.json").write_text(json.dumps({"programs": entries}, indent=1))


def score(paths: list[Path], layers: int) -> dict:
    """The saving measured on the chip (rows of `tpu_device_run.py` over the `export`
    artifacts: median compile seconds of each form, every compile of it counted) against
    the advice's predicted saving, and the reference program's spread in the same rows."""
    seconds: dict[str, list[float]] = {"unrolled": [], "scanned": []}
    refs: list[float] = []
    for path in paths:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("status") != "ok":
                continue
            form = row["key"].split("|")[1]
            seconds[form] += row["device_s"]
            refs += row["ref_device_s"]
    med = {form: statistics.median(v) for form, v in seconds.items()}
    result = advise(layers)
    measured = med["unrolled"] - med["scanned"]
    result.update({"device_s": seconds, "device_median_s": med, "measured_saving_s": measured,
                   "reference_device_s": [min(refs), statistics.median(refs), max(refs)]})
    return saving_ratios(result)


def saving_ratios(result: dict) -> dict:
    """`result` with each predicted saving (the advice's scan, the scanned program's own
    prediction) over its measured saving added."""
    for name in ("advice_scan_s", "predicted_scanned_s"):
        if result[name] is not None:
            saving = result["predicted_unrolled_s"] - result[name]
            result[f"saving_ratio_{name}"] = saving / result["measured_saving_s"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("advise", "measure", "export", "score"))
    parser.add_argument("rows", nargs="*", type=Path, help="chip rows (score)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(".tpu-advice"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.command == "export":
        export(args.layers, args.out, args.repeats)
        return
    result = score(args.rows, args.layers) if args.command == "score" else advise(args.layers)
    if args.command == "measure":
        result = saving_ratios({**result, **measure(args.layers, args.repeats)})
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
