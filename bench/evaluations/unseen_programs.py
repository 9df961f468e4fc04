"""How well does the shipped CPU model predict programs that are in no corpus family?

Programs written the way public JAX code writes them, with constructs no corpus family
builds: `jax.experimental.ode.odeint` (adaptive steps in a while loop), a U-Net with
transposed convolutions and skip concatenations, a GPT stack as `lax.scan` over stacked
layers with a causal mask, an MLP-Mixer, BFGS from `jax.scipy.optimize`, batched QR and
SVD, FFT convolution, Gumbel top-k sampling, a hierarchical model's log density with
special functions (lgamma, log-beta), Sinkhorn iterations in a `fori_loop`, batched `expm`
and `slogdet`, `reduce_window` max pooling (in a CNN training step with batch norm and
Adam), and bilinear resampling at computed indices (a spatial transformer) under `grad`.
Newton's method with `jacfwd` and a dense solve runs in a `while_loop` here; the
`implicit_euler` family only unrolls it. Two constructs have since entered the corpus:
the `mobilenet` family upsamples with transposed convolutions and `llama` masks
causally; neither family has skip concatenations or scans over stacked layers.

How they are scored: `bench/evaluations/_scoring.py`.

    python bench/evaluations/unseen_programs.py [--rounds 3] [--only NAME ...] [--target h100] \\
        [--json out.json]
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from _scoring import arguments, f32, i32, run, selected
from jax import lax

# image layouts of the convolution programs
CONV_DIMS = ("NHWC", "HWIO", "NHWC")




def _value_and_grad(loss):
    return lambda *args: jax.value_and_grad(loss)(*args)


def odeint_mlp(grad: bool):
    from jax.experimental.ode import odeint

    def dynamics(y, t, w1, w2):
        return jnp.tanh(y @ w1) @ w2 - 0.1 * y

    def loss(y0, w1, w2):
        ys = odeint(dynamics, y0, jnp.linspace(0.0, 1.0, 8), w1, w2)
        return jnp.sum(ys[-1] ** 2)

    return (_value_and_grad(loss) if grad else loss), (f32(16, 32), f32(32, 64), f32(64, 32))


def unet(grad: bool, channels: int = 16):
    def conv(x, w, stride=1):
        return jax.nn.relu(lax.conv_general_dilated(x, w, (stride, stride), "SAME",
                                                    dimension_numbers=CONV_DIMS))

    def up(x, w):
        return jax.nn.relu(lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=CONV_DIMS))

    def forward(p, x):
        d1 = conv(x, p["d1"])
        d2 = conv(d1, p["d2"], 2)
        mid = conv(d2, p["mid"], 2)
        u2 = jnp.concatenate([up(mid, p["u2"]), d2], axis=-1)
        u1 = jnp.concatenate([up(conv(u2, p["c2"]), p["u1"]), d1], axis=-1)
        return conv(u1, p["out"])

    c = channels
    params = {"d1": f32(3, 3, 3, c), "d2": f32(3, 3, c, 2 * c), "mid": f32(3, 3, 2 * c, 4 * c),
              "u2": f32(2, 2, 4 * c, 2 * c), "c2": f32(3, 3, 4 * c, 2 * c),
              "u1": f32(2, 2, 2 * c, c), "out": f32(3, 3, 2 * c, 1)}

    def loss(p, x):
        return jnp.mean(forward(p, x) ** 2)

    return (_value_and_grad(loss) if grad else forward), (params, f32(4, 32, 32, 3))


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

    params = {"qkv": f32(layers, 3, d, heads, d // heads), "o": f32(layers, heads, d // heads, d),
              "up": f32(layers, d, 4 * d), "down": f32(layers, 4 * d, d)}

    def forward(p, x):
        return lax.scan(block, x, p)[0]

    def loss(p, x):
        return jnp.mean(forward(p, x) ** 2)

    return (_value_and_grad(loss) if grad else forward), (params, f32(2, seq, d))


def mixer(grad: bool, blocks: int = 4, patches: int = 64, channels: int = 128):
    def mlp(x, w1, w2):
        return jax.nn.gelu(x @ w1) @ w2

    def forward(p, x):
        for b in p:
            x = x + jnp.swapaxes(mlp(jnp.swapaxes(x, 1, 2), b["t1"], b["t2"]), 1, 2)
            x = x + mlp(x, b["c1"], b["c2"])
        return jnp.mean(x, axis=1)

    params = [{"t1": f32(patches, 256), "t2": f32(256, patches), "c1": f32(channels, 512),
               "c2": f32(512, channels)} for _ in range(blocks)]

    def loss(p, x):
        return jnp.mean(forward(p, x) ** 2)

    return (_value_and_grad(loss) if grad else forward), (params, f32(8, patches, channels))


def bfgs(dim: int = 16):
    from jax.scipy.optimize import minimize

    def rosenbrock(x):
        return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    def solve(x0):
        return minimize(rosenbrock, x0, method="BFGS").x

    return solve, (f32(dim),)


def qr_svd():
    def f(a):
        q, r = jnp.linalg.qr(a)
        s = jnp.linalg.svd(a, compute_uv=False)
        return jnp.sum(q) + jnp.sum(r) + jnp.sum(s)

    return f, (f32(8, 64, 32),)


def fft_conv(grad: bool):
    def conv(x, k):
        n = x.shape[-1] + k.shape[-1] - 1
        return jnp.fft.irfft(jnp.fft.rfft(x, n) * jnp.fft.rfft(k, n), n)

    def loss(x, k):
        return jnp.sum(conv(x, k) ** 2)

    return (_value_and_grad(loss) if grad else conv), (f32(16, 1024), f32(16, 65))


def gumbel_top_k(samples: int = 32):
    def f(key_data, logits):
        keys = jax.random.split(jax.random.wrap_key_data(key_data), samples)

        def draw(key):
            g = -jnp.log(-jnp.log(jax.random.uniform(key, logits.shape)))
            return lax.top_k(logits + g, 8)[1]

        return jax.vmap(draw)(keys)

    return f, (jax.ShapeDtypeStruct((2,), jnp.uint32), f32(1000))


def hierarchical_logdensity_grad(groups: int = 64, obs: int = 512):
    """A numpyro-style hierarchical model's log density and gradient: special functions
    (lgamma, log-beta) from `jax.scipy.stats` densities."""
    from jax.scipy import stats

    def log_density(p, y, group):
        mu, tau, nu = p["mu"], jnp.exp(p["log_tau"]), 1.0 + jnp.exp(p["log_nu"])
        theta = mu + tau * p["z"]
        lp = stats.norm.logpdf(mu, 0.0, 5.0) + stats.gamma.logpdf(tau, 2.0)
        lp += stats.gamma.logpdf(nu, 2.0, scale=10.0) + jnp.sum(stats.norm.logpdf(p["z"]))
        lp += jnp.sum(stats.beta.logpdf(jax.nn.sigmoid(p["w"]), 2.0, 3.0))
        lp += jnp.sum(stats.t.logpdf(y, nu, loc=theta[group], scale=jax.nn.softplus(p["s"])))
        return lp + p["log_tau"] + p["log_nu"]

    params = {"mu": f32(), "log_tau": f32(), "log_nu": f32(), "z": f32(groups),
              "w": f32(groups), "s": f32()}
    return (_value_and_grad(log_density),
            (params, f32(obs), i32(obs)))


def sinkhorn(points: int = 256, iterations: int = 100):
    """Log-domain Sinkhorn between two point clouds, as optimal-transport libraries write
    it: a `fori_loop` of logsumexp updates."""
    def transport_cost(x, y, epsilon=0.05):
        cost = jnp.sum((x[:, None, :] - y[None, :, :]) ** 2, -1)
        log_a = log_b = -jnp.log(points) * jnp.ones(points)

        def update(_, fg):
            f, g = fg
            f = epsilon * (log_a - jax.nn.logsumexp((g[None, :] - cost) / epsilon, axis=1))
            g = epsilon * (log_b - jax.nn.logsumexp((f[:, None] - cost) / epsilon, axis=0))
            return f, g

        f, g = lax.fori_loop(0, iterations, update, (jnp.zeros(points), jnp.zeros(points)))
        plan = jnp.exp((f[:, None] + g[None, :] - cost) / epsilon)
        return jnp.sum(plan * cost)

    return transport_cost, (f32(points, 3), f32(points, 3))


def expm_slogdet(batch: int = 8, n: int = 32):
    """Batched matrix exponential (Pade with scaling and squaring) and log-determinant."""
    from jax.scipy.linalg import expm

    def f(a):
        e = jax.vmap(expm)(0.1 * a)
        sign, logdet = jnp.linalg.slogdet(e + jnp.eye(n))
        return jnp.sum(e) + jnp.sum(sign * logdet)

    return f, (f32(batch, n, n),)


def newton_solve(dim: int = 24):
    """Newton's method on a nonlinear system until the residual is small: `jacfwd` and a
    dense linear solve inside `lax.while_loop`, as root-finding libraries write it."""
    def residual(x, a, b):
        return jnp.tanh(a @ x) + x ** 3 - b

    def solve(a, b):
        def keep_going(state):
            i, x = state
            return (i < 50) & (jnp.linalg.norm(residual(x, a, b)) > 1e-5)

        def step(state):
            i, x = state
            jac = jax.jacfwd(residual)(x, a, b)
            return i + 1, x - jnp.linalg.solve(jac, residual(x, a, b))

        return lax.while_loop(keep_going, step, (jnp.int32(0), jnp.zeros(dim)))[1]

    return solve, (f32(dim, dim), f32(dim))


def batchnorm_cnn_step(channels: int = 32):
    """One training step of a Flax-style CNN: convolutions, batch norm from batch
    statistics, max pooling by `reduce_window`, cross-entropy, and an Adam update."""
    def block(x, w, scale, shift):
        x = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=CONV_DIMS)
        mean, var = jnp.mean(x, (0, 1, 2)), jnp.var(x, (0, 1, 2))
        x = jax.nn.relu((x - mean) * lax.rsqrt(var + 1e-5) * scale + shift)
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss(p, x, labels):
        for i in range(3):
            x = block(x, p[f"w{i}"], p[f"scale{i}"], p[f"shift{i}"])
        logits = jnp.mean(x, (1, 2)) @ p["head"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))

    def train_step(p, m, v, x, labels):
        g = jax.grad(loss)(p, x, labels)
        m = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree.map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        p = jax.tree.map(lambda p, m, v: p - 1e-3 * m / (jnp.sqrt(v) + 1e-8), p, m, v)
        return p, m, v

    c = channels
    params = {"head": f32(c, 10)}
    for i, cin in enumerate((3, c, c)):
        params |= {f"w{i}": f32(3, 3, cin, c), f"scale{i}": f32(c), f"shift{i}": f32(c)}
    return train_step, (params, params, params, f32(16, 32, 32, 3), i32(16))


def spatial_transformer_grad(size: int = 32, channels: int = 8):
    """Bilinear resampling of an image at affinely transformed coordinates (gathers at
    computed indices; their gradient scatters), differentiated through the transform."""
    def sample(image, theta):
        ys, xs = jnp.meshgrid(jnp.linspace(-1, 1, size), jnp.linspace(-1, 1, size),
                              indexing="ij")
        grid = jnp.stack([xs.ravel(), ys.ravel(), jnp.ones(size * size)])
        sx, sy = (theta @ grid + 1) * (size - 1) / 2
        x0, y0 = jnp.floor(sx), jnp.floor(sy)
        out = 0.0
        for dx in (0, 1):
            for dy in (0, 1):
                xi = jnp.clip(x0 + dx, 0, size - 1).astype(jnp.int32)
                yi = jnp.clip(y0 + dy, 0, size - 1).astype(jnp.int32)
                weight = (1 - jnp.abs(sx - x0 - dx)) * (1 - jnp.abs(sy - y0 - dy))
                out = out + weight[:, None] * image[yi, xi]
        return out.reshape(size, size, channels)

    def loss(images, thetas):
        return jnp.mean(jax.vmap(sample)(images, thetas) ** 2)

    return (_value_and_grad(loss),
            (f32(8, size, size, channels), f32(8, 2, 3)))


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
    "hierarchical model grad": hierarchical_logdensity_grad,
    "sinkhorn 100 iterations": sinkhorn,
    "expm + slogdet": expm_slogdet,
    "newton while_loop": newton_solve,
    "batchnorm cnn adam step": batchnorm_cnn_step,
    "spatial transformer grad": spatial_transformer_grad,
}


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    run(selected(PROGRAMS, args.only), args)


if __name__ == "__main__":
    main()
