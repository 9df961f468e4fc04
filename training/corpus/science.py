"""Families in the style of scientific JAX code: particle simulation, clustering, hidden
Markov models, normalizing flows, ragged segment reductions and sorting, tensor-network
contraction and implicit time stepping.

Each brings ops the older families use little or not at all: pairwise broadcasts with
``rsqrt`` (n-body), ``argmin`` and one-hot averages (k-means), ``logsumexp`` recursions
(HMM), ``exp``/``log`` Jacobian terms (flows), ``segment_sum``/``segment_max`` scatters,
``sort``/``searchsorted`` with their comparator computations, many-index ``einsum``s
that transpose at every step, and LU solves (``jnp.linalg.solve``) of ``jacfwd``
Jacobians.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .library import _forward_or_grad
from .registry import Family, check_style, param_grid, register, sds


def _repeat(step: Callable, state, steps: int, style: str):
    """``steps`` applications of ``step`` to ``state``: a Python loop ("unrolled") or a
    ``lax.scan`` ("scan")."""
    if style == "unrolled":
        for _ in range(steps):
            state = step(state)
        return state
    return lax.scan(lambda s, _: (step(s), None), state, None, length=steps)[0]


def build_nbody(particles: int, steps: int, style: str, grad: bool,
                dim: int = 3) -> tuple[Callable, tuple]:
    """Leapfrog integration of ``particles`` bodies under softened gravity: every step
    forms all pairwise differences, inverse cube distances and the summed forces; the
    final kinetic energy, or ``value_and_grad`` of it in the initial positions."""
    check_style(style)
    dt, soft = np.float32(0.01), np.float32(1e-2)

    def accel(x, mass):
        diff = x[None, :, :] - x[:, None, :]
        inv = lax.rsqrt(jnp.sum(diff * diff, axis=-1) + soft) ** 3
        return jnp.sum(diff * (inv * mass[None, :])[..., None], axis=1)

    def energy(x, v, mass):
        def step(state):
            x, v = state
            v = v + 0.5 * dt * accel(x, mass)
            x = x + dt * v
            return x, v + 0.5 * dt * accel(x, mass)

        x, v = _repeat(step, (x, v), steps, style)
        return 0.5 * jnp.sum(mass[:, None] * v * v)

    args = (sds((particles, dim)), sds((particles, dim)), sds((particles,)))
    return _forward_or_grad(energy, grad), args


def build_kmeans(points: int, clusters: int, iterations: int, style: str,
                 dim: int = 8) -> tuple[Callable, tuple]:
    """Lloyd's k-means: distances to every centroid, ``argmin`` assignment, one-hot
    weighted means, repeated ``iterations`` times; returns centroids and inertia."""
    check_style(style)
    def fit(x, centroids):
        def assign(c):
            d = (jnp.sum(x * x, 1)[:, None] - 2 * x @ c.T + jnp.sum(c * c, 1)[None, :])
            return d, jnp.argmin(d, axis=1)

        def step(c):
            _, labels = assign(c)
            onehot = jax.nn.one_hot(labels, clusters, dtype=x.dtype)
            counts = jnp.sum(onehot, axis=0)
            means = (onehot.T @ x) / jnp.maximum(counts, 1.0)[:, None]
            return jnp.where(counts[:, None] > 0, means, c)

        c = _repeat(step, centroids, iterations, style)
        d, labels = assign(c)
        return c, jnp.sum(jnp.take_along_axis(d, labels[:, None], axis=1))

    return fit, (sds((points, dim)), sds((clusters, dim)))


def build_hmm(states: int, length: int, style: str, grad: bool,
              batch: int = 4) -> tuple[Callable, tuple]:
    """The forward algorithm of a hidden Markov model in log space (a ``logsumexp`` over
    previous states per time step) with log-softmax-normalized parameters; the batch
    log-likelihood, or ``value_and_grad`` of it in the transition and emission logits."""
    check_style(style)
    def loglik(params, emissions):
        log_trans = jax.nn.log_softmax(params["trans"], axis=-1)
        log_init = jax.nn.log_softmax(params["init"])

        def step(alpha, obs):
            alpha = jax.nn.logsumexp(alpha[:, :, None] + log_trans[None], axis=1)
            return alpha + obs, None

        obs = jnp.einsum("btd,sd->tbs", emissions, params["emit"])
        alpha = log_init[None] + obs[0]
        if style == "scan":
            alpha, _ = lax.scan(step, alpha, obs[1:])
        else:
            for t in range(1, length):
                alpha, _ = step(alpha, obs[t])
        return jnp.sum(jax.nn.logsumexp(alpha, axis=-1))

    params = {"trans": sds((states, states)), "init": sds((states,)),
              "emit": sds((states, 16))}
    return _forward_or_grad(loglik, grad), (params, sds((batch, length, 16)))


def build_flow(layers: int, width: int, grad: bool, dim: int = 16,
               batch: int = 32) -> tuple[Callable, tuple]:
    """A RealNVP normalizing flow: ``layers`` affine coupling layers with alternating
    masks, each a two-layer MLP giving a ``tanh``-bounded log-scale and a shift; the
    mean log-likelihood under a standard normal base (with the log-determinant), or
    ``value_and_grad`` of it in the parameters."""
    masks = [np.arange(dim) % 2 == i % 2 for i in range(layers)]

    def layer():
        return {"w1": sds((dim, width)), "b1": sds((width,)), "w2": sds((width, 2 * dim)),
                "b2": sds((2 * dim,))}

    def loglik(params, x):
        logdet = jnp.zeros(x.shape[0])
        for mask, p in zip(masks, params, strict=True):
            keep = jnp.where(mask, x, 0.0)
            h = jax.nn.relu(keep @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
            log_scale, shift = jnp.split(h, 2, axis=-1)
            log_scale = jnp.where(mask, 0.0, jnp.tanh(log_scale))
            x = jnp.where(mask, x, x * jnp.exp(log_scale) + shift)
            logdet = logdet + jnp.sum(log_scale, axis=-1)
        base = -0.5 * jnp.sum(x * x, axis=-1) - 0.5 * dim * np.log(2 * np.pi)
        return jnp.mean(base + logdet)

    params = [layer() for _ in range(layers)]
    return _forward_or_grad(loglik, grad), (params, sds((batch, dim)))


def build_segments(rounds: int, segments: int, items: int,
                   sort: bool) -> tuple[Callable, tuple]:
    """Ragged reductions as in graph and point-cloud code: per round, ``segment_sum``,
    ``segment_max`` and a segment softmax over ``items`` rows grouped by segment id;
    with ``sort``, the ids are argsorted first and ``searchsorted`` finds segment
    starts. Returns the final features."""
    def fn(features, ids, w):
        if sort:
            order = jnp.argsort(ids)
            ids, features = ids[order], features[order]
            starts = jnp.searchsorted(ids, jnp.arange(segments))
            features = features + starts[ids][:, None].astype(features.dtype)
        for _ in range(rounds):
            score = features @ w
            peak = jax.ops.segment_max(score, ids, num_segments=segments)
            weight = jnp.exp(score - peak[ids])
            total = jax.ops.segment_sum(weight, ids, num_segments=segments)
            pooled = jax.ops.segment_sum(features * (weight / total[ids])[:, None], ids,
                                         num_segments=segments)
            features = jnp.tanh(features + pooled[ids])
        return features

    return fn, (sds((items, 32)), sds((items,), np.int32), sds((32,)))


register(Family(
    name="nbody",
    description="Leapfrog n-body gravity with all pairwise forces, unrolled or lax.scan, "
                "forward or value_and_grad.",
    build=build_nbody,
    grid=param_grid(particles=(16, 64, 256), steps=(1, 2, 4, 8, 16, 32, 64),
                    style=("unrolled", "scan"), grad=(False, True),
                    where=lambda p: p["style"] == "unrolled" or p["steps"] in (1, 8, 64)),
))

register(Family(
    name="kmeans",
    description="Lloyd's k-means (argmin assignments, one-hot means), unrolled or lax.scan.",
    build=build_kmeans,
    grid=param_grid(points=(256, 4096), clusters=(4, 16, 64), iterations=(1, 2, 4, 8, 16, 32, 64),
                    style=("unrolled", "scan"),
                    where=lambda p: p["style"] == "unrolled" or p["iterations"] in (1, 8, 64)),
))

register(Family(
    name="hmm",
    description="HMM forward algorithm (logsumexp recursion), unrolled or lax.scan, "
                "forward or value_and_grad.",
    build=build_hmm,
    grid=param_grid(states=(8, 32, 64), length=(2, 4, 8, 16, 32, 64, 128),
                    style=("unrolled", "scan"), grad=(False, True),
                    where=lambda p: p["style"] == "unrolled" or p["length"] in (2, 16, 128)),
))

register(Family(
    name="flow",
    description="RealNVP affine coupling layers, log-likelihood or its value_and_grad.",
    build=build_flow,
    grid=param_grid(layers=(1, 2, 4, 8, 16, 32, 64), width=(32, 256), dim=(16, 64),
                    grad=(False, True)),
))

register(Family(
    name="segments",
    description="Segment sums, maxima and softmax over ragged groups, optionally sorted "
                "with argsort and searchsorted.",
    build=build_segments,
    grid=param_grid(rounds=(1, 2, 4, 8, 16, 32, 64), segments=(16, 1024), items=(4096, 65536),
                    sort=(False, True)),
))


def build_tensor_network(sites: int, bond: int, grad: bool,
                         physical: int = 4) -> tuple[Callable, tuple]:
    """The norm of a matrix product state of ``sites`` tensors (bond dimension
    ``bond``), contracted site by site with ``einsum``s that reorder axes at every step;
    or ``value_and_grad`` of its log in the tensors."""
    def norm(tensors):
        env = jnp.ones((1, 1))
        for a in tensors:
            env = jnp.einsum("ij,ipk,jpl->kl", env, a, a)
            env = env / jnp.linalg.norm(env)
        return jnp.log(jnp.trace(env) + 1.0)

    tensors = [sds((1 if i == 0 else bond, physical, 1 if i == sites - 1 else bond))
               for i in range(sites)]
    return _forward_or_grad(norm, grad), (tensors,)


def build_implicit_euler(steps: int, dim: int, newton: int,
                         grad: bool) -> tuple[Callable, tuple]:
    """Backward-Euler steps of a stiff nonlinear system ``x' = -A x - x^3``, each solved
    by ``newton`` Newton iterations with the Jacobian from ``jax.jacfwd`` and an LU solve
    (``jnp.linalg.solve``), unrolled; the final state's squared norm, or
    ``value_and_grad`` of it in the initial state."""
    dt = np.float32(0.1)

    def final_energy(x, a):
        def residual(y, x):
            return y - x + dt * (a @ y + y ** 3)

        for _ in range(steps):
            y = x
            for _ in range(newton):
                y = y - jnp.linalg.solve(jax.jacfwd(residual)(y, x), residual(y, x))
            x = y
        return jnp.sum(x * x)

    return _forward_or_grad(final_energy, grad), (sds((dim,)), sds((dim, dim)))


register(Family(
    name="tensor_network",
    description="Matrix-product-state norm by site-by-site einsum contractions, forward or "
                "value_and_grad.",
    build=build_tensor_network,
    grid=param_grid(sites=(2, 4, 8, 16, 32, 64, 128), bond=(4, 32), physical=(2, 8),
                    grad=(False, True)),
))

register(Family(
    name="implicit_euler",
    description="Backward-Euler steps solved by Newton iterations (jacfwd Jacobian, LU "
                "solve), unrolled; forward or value_and_grad.",
    build=build_implicit_euler,
    grid=param_grid(steps=(1, 2, 4, 8, 16, 32, 64), dim=(8, 64), newton=(1, 3),
                    grad=(False, True)),
))
