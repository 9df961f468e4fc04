"""FlowJAX programs as its users write them: normalizing flows from ``flowjax.flows``
trained with its own losses (``MaximumLikelihoodLoss`` on data, ``ElboLoss`` for
variational inference) and an optax update.

Masked autoregressive, coupling, block neural autoregressive and triangular spline flows,
affine or rational-quadratic-spline transformers, ``flow_layers`` deep (stacked and scanned,
as ``flowjax.flows`` builds them), and coupling chains with one ``Coupling`` per layer in a
``Chain`` (unrolled: each layer is its own code in the program). The flows are
small, so they are built concretely; non-trainable parts (``paramax.NonTrainable``) stay
captured constants, the trainable arrays are the arguments.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .real_support import key_data, real_family, uses
from .registry import param_grid, sds

_KINDS = ("maf_affine", "maf_spline", "coupling_affine", "coupling_spline", "bnaf", "triangular")


def _flow(kind: str, layers: int, dim: int):
    import flowjax.bijections as bij
    import flowjax.flows as flows
    from flowjax.distributions import Normal

    key, base = jax.random.key(0), Normal(jnp.zeros(dim))
    spline = bij.RationalQuadraticSpline(knots=8, interval=4.0)
    if kind.startswith(("maf", "coupling")):
        make = flows.masked_autoregressive_flow if kind.startswith("maf") else flows.coupling_flow
        transformer = spline if kind.endswith("spline") else None
        return make(key, base_dist=base, transformer=transformer, flow_layers=layers, nn_width=64)
    if kind == "bnaf":
        return flows.block_neural_autoregressive_flow(key, base_dist=base, flow_layers=layers)
    return flows.triangular_spline_flow(key, base_dist=base, flow_layers=layers)


def _chain_flow(layers: int, dim: int, width: int, transformer: str):
    """A coupling flow as a ``Chain`` of ``layers`` coupling layers, each followed by a
    permutation: FlowJAX's ``Chain`` applies them in a Python loop, so the traced program
    grows with depth, as hand-built flows (a list of layers) do."""
    import flowjax.bijections as bij
    from flowjax.distributions import Normal, Transformed

    spline = bij.RationalQuadraticSpline(knots=8, interval=4.0)
    parts = []
    for key in jax.random.split(jax.random.key(1), layers):
        coupling_key, perm_key = jax.random.split(key)
        parts.append(bij.Coupling(coupling_key, transformer=spline if transformer == "spline" else
                                  bij.Affine(), untransformed_dim=dim // 2, dim=dim,
                                  nn_width=width, nn_depth=1))
        parts.append(bij.Permute(jax.random.permutation(perm_key, jnp.arange(dim))))
    return Transformed(Normal(jnp.zeros(dim)), bij.Invert(bij.Chain(parts)))


def _trainable(flow):
    """``(param_shapes, static)`` split the way FlowJAX's own ``fit_to_data`` splits."""
    import equinox as eqx
    import paramax

    params, static = eqx.partition(flow, eqx.is_inexact_array,
                                   is_leaf=lambda leaf: isinstance(leaf, paramax.NonTrainable))
    return jax.tree.map(lambda a: sds(a.shape, a.dtype), params), static


def _fit_step(loss, flow, batch_args):
    import optax

    params, static = _trainable(flow)
    optimizer = optax.adam(1e-3)

    def fn(params, opt_state, *batch):
        value, grads = jax.value_and_grad(loss)(params, static, *batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return fn, (params, jax.eval_shape(optimizer.init, params), *batch_args)


def build_flowjax_mle_step(kind: str, layers: int, dim: int = 8, batch: int = 256):
    """Adam step of maximum-likelihood training of a flow on a data batch."""
    from flowjax.train.losses import MaximumLikelihoodLoss

    return _fit_step(MaximumLikelihoodLoss(), _flow(kind, layers, dim), (sds((batch, dim)),))


def build_flowjax_chain_step(layers: int, size: str, transformer: str = "spline",
                             batch: int = 256):
    """Adam step of maximum-likelihood training of an unrolled coupling chain; ``size``
    small: 8 dimensions, conditioners 64 wide; large: 16 and 128."""
    from flowjax.train.losses import MaximumLikelihoodLoss

    dim, width = {"small": (8, 64), "large": (16, 128)}[size]
    return _fit_step(MaximumLikelihoodLoss(), _chain_flow(layers, dim, width, transformer),
                     (sds((batch, dim)),))


def build_flowjax_vi_step(kind: str, layers: int, samples: int, dim: int = 8):
    """Adam step of variational inference: the flow's ELBO against a banana-shaped target
    from ``samples`` reparameterised draws."""
    from flowjax.train.losses import ElboLoss

    def target(x):
        bent = x[1] - 0.5 * x[0] ** 2
        return -0.5 * (x[0] ** 2 + 4.0 * bent**2 + jnp.sum(x[2:] ** 2))

    loss = ElboLoss(target, num_samples=samples)

    def keyed_loss(params, static, words):
        return loss(params, static, jax.random.wrap_key_data(words))

    return _fit_step(keyed_loss, _flow(kind, layers, dim), (key_data(),))


if uses("flowjax", "flowjax", "paramax", "optax"):
    real_family("flowjax", "flowjax_mle_step",
                "FlowJAX flow (MAF, coupling, BNAF, triangular spline) maximum-likelihood Adam step.",
                build_flowjax_mle_step,
                param_grid(kind=_KINDS, layers=(1, 4, 8, 16)))
    real_family("flowjax", "flowjax_chain_step",
                "FlowJAX coupling chain (one Coupling per layer, unrolled) maximum-likelihood "
                "Adam step.",
                build_flowjax_chain_step,
                param_grid(layers=(4, 8, 16, 24, 32, 48), size=("small", "large"))
                + param_grid(layers=(8, 24), size=("large",), transformer=("affine",)))
    real_family("flowjax", "flowjax_vi_step",
                "FlowJAX flow variational-inference step (ElboLoss) on a banana target.",
                build_flowjax_vi_step,
                param_grid(kind=("maf_affine", "maf_spline", "coupling_spline"), layers=(2, 8),
                           samples=(16, 512)))
