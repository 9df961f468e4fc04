"""Programs of the kinds issue #19's independent suites found mispredicted, for
`bench/evaluations/outside_libraries.py --programs
bench/evaluations/failure_class_programs.py`: no training row holds them, and each family is
one failure class the issue names.

- A long associative-scan model (over-predicted 15-25x there): a stack of LRU-style layers,
  a diagonal complex recurrence run by `lax.associative_scan` over the sequence, its
  train step (plain jax.numpy; 2-6 layers, 1024-4096 steps).
- A deep transformer train step (a 64-layer one, 76k StableHLO ops, over-predicted about
  11x after calibrating there): a Flax Linen causal LM with Optax Adam, 8-64 layers.
- Special-function gradients (host memory 7x low there): first and second derivatives of
  `jax.scipy.special` functions over a vector.
- Captured constants multiplied (14.5 s predicted at 0.8 s there): two captured tables
  multiplied and mapped elementwise, which XLA folds while compiling.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy import special

from costmodel.training.corpus.registry import register_builders, sds


def lru_stack_step(layers: int, length: int, width: int = 64, state: int = 128,
                   batch: int = 8):
    """LRU-style layers (associative scan over the sequence), an SGD train step."""
    def combine(left, right):
        return left[0] * right[0], right[0] * left[1] + right[1]

    def layer(p, x):
        decay = jnp.exp(-jnp.exp(p["nu"]) + 1j * p["theta"])
        drive = (x @ p["b_re"]) + 1j * (x @ p["b_im"])
        _, hidden = lax.associative_scan(combine, (jnp.broadcast_to(decay, drive.shape), drive),
                                         axis=1)
        return x + jax.nn.gelu((hidden @ p["c"]).real + x @ p["d"])

    def loss(params, x):
        for p in params:
            x = layer(p, x)
        return jnp.mean(x ** 2)

    def step(params, x):
        grads = jax.grad(loss)(params, x)
        return jax.tree.map(lambda a, g: a - 1e-3 * g, params, grads)

    one = {"nu": sds((state,)), "theta": sds((state,)), "b_re": sds((width, state)),
           "b_im": sds((width, state)), "c": sds((state, width), jnp.complex64),
           "d": sds((width, width))}
    return step, ([dict(one) for _ in range(layers)], sds((batch, length, width)))


def flax_transformer_step(layers: int, width: int = 128, heads: int = 4, vocab: int = 512,
                          seq: int = 64, batch: int = 8):
    """A Flax Linen causal transformer LM, an Optax Adam train step."""
    import flax.linen as nn
    import optax

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
            x = x + nn.SelfAttention(num_heads=heads, qkv_features=width)(nn.LayerNorm()(x),
                                                                         mask=mask)
            h = nn.Dense(width)(nn.gelu(nn.Dense(4 * width)(nn.LayerNorm()(x))))
            return x + h

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            x = nn.Embed(vocab, width)(tokens)
            for _ in range(layers):
                x = Block()(x)
            return nn.Dense(vocab)(nn.LayerNorm()(x))

    model, optimizer = LM(), optax.adam(1e-3)
    tokens = sds((batch, seq), jnp.int32)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), tokens)
    opt_state = jax.eval_shape(optimizer.init, params)

    def step(params, opt_state, tokens):
        def loss(p):
            logits = model.apply(p, tokens)[:, :-1]
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step, (params, opt_state, tokens)


SPECIAL = {"zeta": lambda x: special.zeta(x + 2.5, 1.0),
           "bessel_jn": lambda x: special.bessel_jn(x + 1.0, v=3)[-1],
           "i0e": special.i0e,
           "gammaln": lambda x: special.gammaln(x + 1.5),
           "erfinv": lambda x: special.erfinv(jnp.tanh(x) * 0.9)}


def special_function_grad(function: str, size: int, order: int):
    """The gradient (order 0) or the gradient of a derivative's sum (order 1) of a
    `jax.scipy.special` function summed over a vector."""
    total = lambda x: jnp.sum(SPECIAL[function](x))  # noqa: E731
    for _ in range(order):
        total = (lambda inner: lambda x: jnp.sum(jax.grad(inner)(x)))(total)
    return jax.grad(total), (sds((size,)),)


def captured_tables_product(side: int, steps: int):
    """Two captured tables multiplied and mapped elementwise `steps` times, added to the
    argument: XLA folds the product while compiling."""
    rng = np.random.default_rng(0)
    left, right = (rng.standard_normal((side, side)).astype(np.float32) for _ in range(2))

    def fn(x):
        table = jnp.asarray(left) @ jnp.asarray(right)
        for _ in range(steps):
            table = jnp.tanh(table) * 0.5 + 0.1
        return x + table

    return fn, (sds((side, side)),)


PROGRAMS = (
    (lru_stack_step, dict(layers=2, length=1024)),
    (lru_stack_step, dict(layers=2, length=4096)),
    (lru_stack_step, dict(layers=6, length=4096)),
    (flax_transformer_step, dict(layers=8)),
    (flax_transformer_step, dict(layers=32)),
    (flax_transformer_step, dict(layers=64)),
    (special_function_grad, dict(function="zeta", size=65536, order=1)),
    (special_function_grad, dict(function="bessel_jn", size=65536, order=1)),
    (special_function_grad, dict(function="i0e", size=1024, order=1)),
    (special_function_grad, dict(function="gammaln", size=65536, order=1)),
    (special_function_grad, dict(function="erfinv", size=1024, order=1)),
    (captured_tables_product, dict(side=1024, steps=4)),
    (captured_tables_product, dict(side=2048, steps=4)),
)
LIBRARIES = {"lru_stack_step": "jax", "flax_transformer_step": "flax",
             "special_function_grad": "jax.scipy", "captured_tables_product": "jax"}


# named as `bench/evaluations/outside_programs.py` names its families, so that bench measures these
OUTSIDE_FAMILIES = register_builders(PROGRAMS, "probe", LIBRARIES)
