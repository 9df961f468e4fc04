"""NumPyro programs as its users write them: ``numpyro.sample`` models trained by SVI with
an autoguide, NumPyro's own HMC/NUTS kernels, and time-series models written with
``numpyro.contrib.control_flow.scan``.

The bench's hierarchical logistic regression potential stays out; the models here are a
Bayesian neural network, a stochastic-volatility model and a Gaussian-process regression.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import real_family, uses
from .registry import param_grid, sds


def _bnn(x, y=None, hidden: int = 32, layers: int = 1):
    import numpyro
    import numpyro.distributions as dist

    h = x
    for i in range(layers):
        w = numpyro.sample(f"w{i}", dist.Normal(0.0, 1.0).expand([h.shape[-1], hidden]).to_event(2))
        h = jnp.tanh(h @ w)
    w_out = numpyro.sample("w_out", dist.Normal(0.0, 1.0).expand([hidden]).to_event(1))
    noise = numpyro.sample("noise", dist.LogNormal(0.0, 1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(h @ w_out, noise), obs=y)


def _stochastic_volatility(returns):
    import numpyro
    import numpyro.distributions as dist
    from numpyro.contrib.control_flow import scan

    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    phi = numpyro.sample("phi", dist.Uniform(-1.0, 1.0))

    def transition(h, r):
        h = numpyro.sample("h", dist.Normal(phi * h, sigma))
        numpyro.sample("r", dist.Normal(0.0, jnp.exp(h / 2)), obs=r)
        return h, None

    scan(transition, jnp.zeros(()), returns)


def _gp(x, y):
    import numpyro
    import numpyro.distributions as dist

    amplitude = numpyro.sample("amplitude", dist.LogNormal(0.0, 1.0))
    length = numpyro.sample("length", dist.LogNormal(0.0, 1.0))
    noise = numpyro.sample("noise", dist.LogNormal(-2.0, 1.0))
    d2 = jnp.sum((x[:, None] - x[None]) ** 2, axis=-1)
    k = amplitude * jnp.exp(-0.5 * d2 / length**2) + (noise + 1e-5) * jnp.eye(x.shape[0])
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(x.shape[0]), covariance_matrix=k), obs=y)


def build_numpyro_svi_step(guide: str, hidden: int, layers: int, data: int = 256):
    """One ``SVI.update`` (ELBO gradient and Adam) of a Bayesian MLP under an autoguide."""
    from functools import partial

    from numpyro import optim
    from numpyro.infer import SVI, Trace_ELBO, autoguide

    model = partial(_bnn, hidden=hidden, layers=layers)
    guides = {"normal": autoguide.AutoNormal, "diagonal": autoguide.AutoDiagonalNormal,
              "lowrank": lambda m: autoguide.AutoLowRankMultivariateNormal(m, rank=8)}
    svi = SVI(model, guides[guide](model), optim.Adam(1e-3), Trace_ELBO())
    x, y = sds((data, 8)), sds((data,))
    state = jax.eval_shape(lambda x, y: svi.init(jax.random.PRNGKey(0), x, y), x, y)

    def fn(state, x, y):
        return svi.update(state, x, y)

    return fn, (state, x, y)


def build_numpyro_kernel_sample(model: str, kernel: str, size: int):
    """One transition of NumPyro's own ``NUTS`` or ``HMC`` kernel (``kernel.sample``) on
    the stochastic-volatility model over ``size`` returns or the GP over ``size`` points."""
    from numpyro.infer import HMC, NUTS
    from numpyro.infer.util import initialize_model

    rng = np.random.default_rng(size)
    if model == "sv":
        target, data = _stochastic_volatility, (jnp.asarray(rng.normal(size=size), jnp.float32),)
    else:
        x = jnp.asarray(rng.normal(size=(size, 2)), jnp.float32)
        target, data = _gp, (x, jnp.sin(x[:, 0]))
    init = initialize_model(jax.random.PRNGKey(0), target, model_args=data)
    sampler = (NUTS(potential_fn=init.potential_fn, max_tree_depth=6) if kernel == "nuts"
               else HMC(potential_fn=init.potential_fn, num_steps=16, trajectory_length=None))
    state = jax.eval_shape(
        lambda z: sampler.init(jax.random.PRNGKey(1), 0, z, (), {}), init.param_info.z)

    def fn(state):
        return sampler.sample(state, (), {})

    return fn, (state,)


if uses("numpyro", "numpyro"):
    real_family("numpyro", "numpyro_svi_step",
                "NumPyro SVI.update of a Bayesian MLP under AutoNormal / diagonal / low-rank guides.",
                build_numpyro_svi_step,
                param_grid(guide=("normal", "diagonal", "lowrank"), hidden=(16, 128), layers=(1, 3)))
    real_family("numpyro", "numpyro_kernel_sample",
                "One NumPyro NUTS or HMC kernel transition on a scan stochastic-volatility model or a GP.",
                build_numpyro_kernel_sample,
                param_grid(model=("sv", "gp"), kernel=("nuts", "hmc"), size=(16, 128, 512)))
