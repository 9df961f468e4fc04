"""NetKet programs as its users write a custom variational Monte Carlo step: a NetKet
sampler draws spin configurations from a NetKet model, the transverse-field Ising
Hamiltonian's connected elements (``get_conn_padded`` of its JAX operator) give local
energies, and the energy gradient (a covariance of log-derivatives) feeds an optax update.

Metropolis sampling of RBM and Jastrow states on a square lattice, and exact
autoregressive sampling (``ARDirectSampler``, one network pass per site) of a dense ARNN.
NetKet turns on float64 at import unless told otherwise; these programs are float32.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import real_family, uses
from .registry import param_grid


def _netket():
    os.environ.setdefault("NETKET_ENABLE_X64", "0")  # before the first import only
    import netket

    return netket


def _vmc_step(nk, hilbert, graph, model, sampler, chain_length: int):
    """``(fn, args)``: sample, local energies, gradient of the energy, one SGD step."""
    import optax

    hamiltonian = nk.operator.Ising(hilbert, graph, h=1.0, dtype=np.float32).to_jax_operator()
    n = hilbert.size
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, n), jnp.float32)))
    state = jax.eval_shape(lambda v: sampler.init_state(model, v, seed=jax.random.key(1)), variables)
    optimizer = optax.sgd(0.01)

    def fn(variables, sampler_state, opt_state):
        samples, sampler_state = sampler.sample(model, variables, state=sampler_state,
                                                chain_length=chain_length)
        sigma = samples.reshape(-1, n).astype(jnp.float32)
        eta, mels = hamiltonian.get_conn_padded(sigma)

        def log_psi(params, x):
            return model.apply({"params": params}, x)

        params = variables["params"]
        log_sigma = log_psi(params, sigma)
        log_eta = log_psi(params, eta.reshape(-1, n).astype(jnp.float32)).reshape(eta.shape[:-1])
        local = jnp.sum(mels * jnp.exp(log_eta - log_sigma[:, None]), axis=-1)
        energy = jnp.mean(local)
        _, vjp = jax.vjp(lambda p: log_psi(p, sigma), params)
        (force,) = vjp((local - energy) / sigma.shape[0])
        updates, opt_state = optimizer.update(force, opt_state, params)
        return energy, {"params": optax.apply_updates(params, updates)}, sampler_state, opt_state

    return fn, (variables, state, jax.eval_shape(optimizer.init, variables["params"]))


def build_netket_metropolis_vmc(side: int, ansatz: str, chain_length: int, chains: int = 16):
    """VMC step on a ``side`` x ``side`` lattice: ``MetropolisLocal`` chains of an RBM
    (``alpha=2``) or a Jastrow state."""
    nk = _netket()
    graph = nk.graph.Square(side)
    hilbert = nk.hilbert.Spin(0.5, graph.n_nodes)
    model = (nk.models.RBM(alpha=2, param_dtype=np.float32) if ansatz == "rbm"
             else nk.models.Jastrow(param_dtype=np.float32))
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=chains, dtype=np.int8)
    return _vmc_step(nk, hilbert, graph, model, sampler, chain_length)


def build_netket_autoregressive_vmc(sites: int, layers: int, samples: int = 64):
    """VMC step on a ``sites``-spin chain with exact autoregressive sampling of a dense
    ARNN (``layers`` masked layers), one conditional pass per site."""
    nk = _netket()
    graph = nk.graph.Chain(sites)
    hilbert = nk.hilbert.Spin(0.5, sites)
    model = nk.models.ARNNDense(hilbert=hilbert, layers=layers, features=32, param_dtype=np.float32)
    sampler = nk.sampler.ARDirectSampler(hilbert, dtype=np.int8)
    return _vmc_step(nk, hilbert, graph, model, sampler, samples)


if uses("netket", "netket", "optax"):
    real_family("netket", "netket_metropolis_vmc",
                "NetKet MetropolisLocal VMC step of an RBM or Jastrow on the 2-D Ising model.",
                build_netket_metropolis_vmc,
                param_grid(side=(4, 8, 12), ansatz=("rbm", "jastrow"), chain_length=(1, 16, 128)))
    real_family("netket", "netket_autoregressive_vmc",
                "NetKet ARDirectSampler VMC step of a dense ARNN on the 1-D Ising chain.",
                build_netket_autoregressive_vmc,
                param_grid(sites=(8, 16, 32, 64), layers=(1, 2, 4)))
