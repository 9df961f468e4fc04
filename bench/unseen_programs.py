"""How well does the shipped CPU model predict programs that are in no corpus family?

Programs written the way public JAX code writes them, with constructs no corpus family
builds: `jax.experimental.ode.odeint` (adaptive steps in a while loop), a U-Net with
transposed convolutions and skip concatenations, a GPT stack as `lax.scan` over stacked
layers with a causal mask, an MLP-Mixer, BFGS from `jax.scipy.optimize`, batched QR and
SVD, FFT convolution, and Gumbel top-k sampling (two constructs have since entered the
corpus: the `mobilenet` family upsamples with transposed convolutions and `llama` masks
causally; neither family has skip concatenations or scans over stacked layers). Each is
predicted (`costmodel.predict`,
no calibration applied) and then compiled: new function objects each time, all programs
and the reference program interleaved per round, median of the rounds. Fold errors are
reported as measured and with the prediction scaled by this run's reference time over
the model's (what `costmodel calibrate` would apply).

    python bench/unseen_programs.py [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import costmodel
from costmodel._demo import _measure as compile_seconds  # one timed compile of build()
from costmodel.models import load_default
from costmodel.training.reference import build_reference


def _f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _value_and_grad(loss):
    return lambda *args: jax.value_and_grad(loss)(*args)


def odeint_mlp(grad: bool):
    from jax.experimental.ode import odeint

    def dynamics(y, t, w1, w2):
        return jnp.tanh(y @ w1) @ w2 - 0.1 * y

    def loss(y0, w1, w2):
        ys = odeint(dynamics, y0, jnp.linspace(0.0, 1.0, 8), w1, w2)
        return jnp.sum(ys[-1] ** 2)

    return (_value_and_grad(loss) if grad else loss), (_f32(16, 32), _f32(32, 64), _f32(64, 32))


def unet(grad: bool, channels: int = 16):
    dn = ("NHWC", "HWIO", "NHWC")

    def conv(x, w, stride=1):
        return jax.nn.relu(lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                                    dimension_numbers=dn))

    def up(x, w):
        return jax.nn.relu(lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=dn))

    def forward(p, x):
        d1 = conv(x, p["d1"])
        d2 = conv(d1, p["d2"], 2)
        mid = conv(d2, p["mid"], 2)
        u2 = jnp.concatenate([up(mid, p["u2"]), d2], axis=-1)
        u1 = jnp.concatenate([up(conv(u2, p["c2"]), p["u1"]), d1], axis=-1)
        return conv(u1, p["out"])

    c = channels
    params = {"d1": _f32(3, 3, 3, c), "d2": _f32(3, 3, c, 2 * c), "mid": _f32(3, 3, 2 * c, 4 * c),
              "u2": _f32(2, 2, 4 * c, 2 * c), "c2": _f32(3, 3, 4 * c, 2 * c),
              "u1": _f32(2, 2, 2 * c, c), "out": _f32(3, 3, 2 * c, 1)}

    def loss(p, x):
        return jnp.mean(forward(p, x) ** 2)

    return (_value_and_grad(loss) if grad else forward), (params, _f32(4, 32, 32, 3))


def gpt_scan(grad: bool, layers: int = 8, d: int = 128, seq: int = 64, heads: int = 4):
    def block(x, w):
        h = x - jnp.mean(x, -1, keepdims=True)
        q, k, v = (jnp.einsum("btd,dhk->bthk", h, w["qkv"][i]) for i in range(3))
        scores = jnp.einsum("bqhk,bshk->bhqs", q, k) / np.sqrt(d // heads)
        mask = jnp.tril(jnp.ones((seq, seq), bool))
        scores = jnp.where(mask, scores, -1e9)
        att = jnp.einsum("bhqs,bshk->bqhk", jax.nn.softmax(scores), v)
        x = x + jnp.einsum("bqhk,hkd->bqd", att, w["o"])
        return x + jax.nn.gelu(x @ w["up"]) @ w["down"], None

    params = {"qkv": _f32(layers, 3, d, heads, d // heads), "o": _f32(layers, heads, d // heads, d),
              "up": _f32(layers, d, 4 * d), "down": _f32(layers, 4 * d, d)}

    def forward(p, x):
        return lax.scan(block, x, p)[0]

    def loss(p, x):
        return jnp.mean(forward(p, x) ** 2)

    return (_value_and_grad(loss) if grad else forward), (params, _f32(2, seq, d))


def mixer(grad: bool, blocks: int = 4, patches: int = 64, channels: int = 128):
    def mlp(x, w1, w2):
        return jax.nn.gelu(x @ w1) @ w2

    def forward(p, x):
        for b in p:
            x = x + jnp.swapaxes(mlp(jnp.swapaxes(x, 1, 2), b["t1"], b["t2"]), 1, 2)
            x = x + mlp(x, b["c1"], b["c2"])
        return jnp.mean(x, axis=1)

    params = [{"t1": _f32(patches, 256), "t2": _f32(256, patches), "c1": _f32(channels, 512),
               "c2": _f32(512, channels)} for _ in range(blocks)]

    def loss(p, x):
        return jnp.mean(forward(p, x) ** 2)

    return (_value_and_grad(loss) if grad else forward), (params, _f32(8, patches, channels))


def bfgs(dim: int = 16):
    from jax.scipy.optimize import minimize

    def rosenbrock(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def solve(x0):
        return minimize(rosenbrock, x0, method="BFGS").x

    return solve, (_f32(dim),)


def qr_svd():
    def f(a):
        q, r = jnp.linalg.qr(a)
        s = jnp.linalg.svd(a, compute_uv=False)
        return jnp.sum(q) + jnp.sum(r) + jnp.sum(s)

    return f, (_f32(8, 64, 32),)


def fft_conv(grad: bool):
    def conv(x, k):
        n = x.shape[-1] + k.shape[-1] - 1
        return jnp.fft.irfft(jnp.fft.rfft(x, n) * jnp.fft.rfft(k, n), n)

    def loss(x, k):
        return jnp.sum(conv(x, k) ** 2)

    return (_value_and_grad(loss) if grad else conv), (_f32(16, 1024), _f32(16, 65))


def gumbel_top_k(samples: int = 32):
    def f(key_data, logits):
        keys = jax.random.split(jax.random.wrap_key_data(key_data), samples)

        def draw(key):
            g = -jnp.log(-jnp.log(jax.random.uniform(key, logits.shape)))
            return lax.top_k(logits + g, 8)[1]

        return jax.vmap(draw)(keys)

    return f, (jax.ShapeDtypeStruct((2,), jnp.uint32), _f32(1000))


PROGRAMS = {
    "odeint mlp": lambda: odeint_mlp(False),
    "odeint mlp grad": lambda: odeint_mlp(True),
    "unet": lambda: unet(False),
    "unet grad": lambda: unet(True),
    "gpt scan 8 layers": lambda: gpt_scan(False),
    "gpt scan 8 layers grad": lambda: gpt_scan(True),
    "mlp-mixer 4 blocks": lambda: mixer(False),
    "mlp-mixer 4 blocks grad": lambda: mixer(True),
    "bfgs rosenbrock": bfgs,
    "qr + svd batched": qr_svd,
    "fft conv": lambda: fft_conv(False),
    "fft conv grad": lambda: fft_conv(True),
    "gumbel top-k": gumbel_top_k,
}


def fold(a: float, b: float) -> float:
    return max(a / b, b / a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    model = load_default("cpu")
    predictions = {}
    for name, build in PROGRAMS.items():
        fn, fn_args = build()
        p = costmodel.predict(fn, *fn_args, backend="cpu", model=model)
        scale = p.calibration_scale  # undo a calibration file, if this machine has one
        predictions[name] = (p.compile_seconds / scale,
                             tuple(v / scale for v in p.compile_seconds_interval))
    model_reference = model.manifest["reference_seconds"]
    programs = {"(reference)": build_reference, **PROGRAMS}
    for build in programs.values():  # warm-up: first-compile costs off the clock
        compile_seconds(build)
    times = {name: [] for name in programs}
    for _ in range(args.rounds):
        for name, build in programs.items():
            times[name].append(compile_seconds(build))
    reference = statistics.median(times.pop("(reference)"))
    speed = reference / model_reference
    print(f"reference program: {reference * 1e3:.0f} ms here, {model_reference * 1e3:.0f} ms "
          f"in the model's sweep (scale {speed:.2f}); model {model.version}")
    rows = []
    for name, (point, (lo, hi)) in predictions.items():
        measured = statistics.median(times[name])
        rows.append({"program": name, "predicted_s": point, "interval_s": [lo, hi],
                     "measured_s": measured, "all_s": times[name],
                     "fold": fold(point, measured), "fold_scaled": fold(point * speed, measured),
                     "inside_interval_scaled": lo * speed <= measured <= hi * speed})
        print(f"{name:24} predicted {point:7.3f} s  measured {measured:7.3f} s  "
              f"fold {rows[-1]['fold']:5.2f}  scaled {rows[-1]['fold_scaled']:5.2f}"
              f"{'' if rows[-1]['inside_interval_scaled'] else '  outside interval'}")
    folds = [r["fold_scaled"] for r in rows]
    summary = {"median_fold_scaled": statistics.median(folds), "max_fold_scaled": max(folds),
               "within_2x_scaled": sum(f <= 2 for f in folds) / len(folds),
               "coverage_scaled": sum(r["inside_interval_scaled"] for r in rows) / len(rows)}
    print(", ".join(f"{k} {v:.2f}" for k, v in summary.items()))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rounds": args.rounds, "model": model.version, "speed_scale": speed,
                       "reference_s": reference, "summary": summary, "results": rows}, out,
                      indent=1)


if __name__ == "__main__":
    main()
