"""BlackJAX programs as its users write them: an inference loop of a sampling kernel in
``lax.scan`` (chains under ``vmap``), Stan-style window adaptation, and stochastic-gradient
MCMC over minibatches.

Targets are log densities written in plain JAX (a funnel, a Bayesian logistic regression),
so BlackJAX's kernels dominate. The bench's single NUTS step on a NumPyro model stays out.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .real_support import key_data, real_family, uses
from .registry import param_grid, sds


def _funnel(z):
    """Neal's funnel in ``z.size`` dimensions."""
    v, x = z[0], z[1:]
    return -0.5 * v**2 / 9.0 - 0.5 * jnp.sum(x**2) * jnp.exp(-v) - 0.5 * x.size * v


def _kernel(name: str, logdensity, dim: int):
    import blackjax

    inverse_mass = jnp.ones(dim)
    return {"hmc": lambda: blackjax.hmc(logdensity, 0.1, inverse_mass, num_integration_steps=16),
            "nuts": lambda: blackjax.nuts(logdensity, 0.1, inverse_mass),
            "mala": lambda: blackjax.mala(logdensity, 0.05),
            "rmh": lambda: blackjax.rmh(logdensity, blackjax.mcmc.random_walk.normal(0.1 * inverse_mass)),
            "barker": lambda: blackjax.barker_proposal(logdensity, 0.1)}[name]()


def build_blackjax_inference_loop(algorithm: str, steps: int, chains: int, dim: int = 16):
    """``steps`` transitions of a BlackJAX kernel on the funnel in a ``lax.scan``, for
    ``chains`` chains under ``vmap``; returns the positions."""
    def fn(positions, key_words):
        kernel = _kernel(algorithm, _funnel, dim)

        def one_chain(position, key):
            def body(state, key):
                state, _ = kernel.step(key, state)
                return state, state.position

            return jax.lax.scan(body, kernel.init(position), jax.random.split(key, steps))[1]

        keys = jax.random.split(jax.random.wrap_key_data(key_words), chains)
        return jax.vmap(one_chain)(positions, keys)

    return fn, (sds((chains, dim)), key_data())


def build_blackjax_window_adaptation(algorithm: str, steps: int, features: int, samples: int = 256):
    """``blackjax.window_adaptation`` (step size and diagonal mass matrix over ``steps``
    warm-up transitions) of NUTS or HMC on a Bayesian logistic regression."""
    import blackjax

    def fn(w0, x, y, key_words):
        def logdensity(w):
            logits = x @ w
            return jnp.sum(y * logits - jnp.logaddexp(0.0, logits)) - 0.5 * jnp.sum(w**2)

        extra = {"num_integration_steps": 8} if algorithm == "hmc" else {}
        algo = blackjax.nuts if algorithm == "nuts" else blackjax.hmc
        warmup = blackjax.window_adaptation(algo, logdensity, **extra)
        (state, parameters), _ = warmup.run(jax.random.wrap_key_data(key_words), w0, num_steps=steps)
        return state.position, parameters["step_size"]

    return fn, (sds((features,)), sds((samples, features)), sds((samples,)), key_data())


def build_blackjax_sgmcmc(algorithm: str, width: int, steps: int = 50, batch: int = 32,
                          data: int = 1024):
    """``steps`` SGLD or SGHMC updates of a one-hidden-layer Bayesian network's weights,
    each on a random minibatch, with BlackJAX's gradient estimator."""
    import blackjax

    def logprior(p):
        return -0.5 * sum(jnp.sum(leaf**2) for leaf in jax.tree.leaves(p))

    def loglik(p, example):  # BlackJAX vmaps it over the minibatch
        x, y = example
        return -0.5 * (jnp.tanh(x @ p["w1"]) @ p["w2"][:, 0] - y) ** 2

    def fn(params, x, y, key_words):
        grad_estimator = blackjax.sgmcmc.gradients.grad_estimator(logprior, loglik, data)
        sampler = (blackjax.sgld(grad_estimator) if algorithm == "sgld"
                   else blackjax.sghmc(grad_estimator, num_integration_steps=4))

        def body(position, key):
            pick, move = jax.random.split(key)
            idx = jax.random.choice(pick, data, (batch,))
            return sampler.step(move, position, (x[idx], y[idx]), 1e-4), None

        keys = jax.random.split(jax.random.wrap_key_data(key_words), steps)
        return jax.lax.scan(body, params, keys)[0]

    params = {"w1": sds((8, width)), "w2": sds((width, 1))}
    return fn, (params, sds((data, 8)), sds((data,)), key_data())


if uses("blackjax", "blackjax"):
    real_family("blackjax", "blackjax_inference_loop",
                "BlackJAX HMC/NUTS/MALA/RMH/Barker inference loop in lax.scan, chains under vmap.",
                build_blackjax_inference_loop,
                param_grid(algorithm=("hmc", "nuts", "mala", "rmh", "barker"), steps=(10, 1000),
                           chains=(1, 16)))
    real_family("blackjax", "blackjax_window_adaptation",
                "blackjax.window_adaptation of NUTS or HMC on a Bayesian logistic regression.",
                build_blackjax_window_adaptation,
                param_grid(algorithm=("nuts", "hmc"), steps=(100, 1000), features=(4, 64)))
    real_family("blackjax", "blackjax_sgmcmc",
                "BlackJAX SGLD / SGHMC over minibatches of a Bayesian MLP in a scan.",
                build_blackjax_sgmcmc,
                param_grid(algorithm=("sgld", "sghmc"), width=(16, 128, 512)))
