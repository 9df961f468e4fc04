"""Advice pairs written with public JAX libraries, as their users write them.

Each pair is the program a user wrote first and the library's own idiom for what the
advice proposes: a Python loop of Flax Linen / Haiku / Equinox layers against `nn.scan`,
`hk.layer_stack` or stacked Equinox layers under `lax.scan`; `hk.static_unroll` against
`hk.dynamic_unroll`; K Optax steps unrolled against the same steps in `lax.scan`; a
model's parameters captured by a closure against passed as arguments; per-layer inner
jits compiled inside the model against that layer jitted alone (what calling it from
Python compiles: identical layers share one compile). `bench/evaluations/advice_validation.py`
times and judges them.

A pair is `(name, original, args, strategy, build_alt)`; `build_alt()` gives a fresh
`(fn, args)` of the alternative each time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from library_programs import flax_encoder, haiku_lstm

F32 = jnp.float32


def _sds(*shape) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, F32)


def _abstract(tree):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), tree)


def flax_encoder_pair(layers: int, grad: bool):
    """Flax Linen encoder blocks in a Python loop vs lifted `nn.scan`."""
    original, args = flax_encoder(layers, scan=False, grad=grad, d=64, seq=32)
    return (f"flax encoder {layers} layers{' grad' if grad else ''} loop vs nn.scan",
            original, args, "scan",
            lambda: flax_encoder(layers, scan=True, grad=grad, d=64, seq=32))


def _linen_mlp(width: int, depth: int):
    import flax.linen as nn

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(depth):
                x = nn.gelu(nn.Dense(width)(x))
            return x

    return Mlp()


def _captured_params_pair(library: str, model, width: int, depth: int):
    """A pair of `model.apply(params, x)`: trained params closed over vs passed in."""
    x = _sds(8, width)
    params = model.init(jax.random.key(0), jnp.zeros(x.shape))
    megabytes = depth * width * width * 4 / 2**20
    return (f"{library} mlp params captured vs passed ({megabytes:.0f} MB)",
            lambda x: model.apply(params, x), (x,), "constants_as_arguments",
            lambda: ((lambda p, x: model.apply(p, x)), (_abstract(params), x)))


def flax_captured_params_pair(width: int, depth: int):
    """`model.apply(params, x)` with trained params closed over vs passed in."""
    return _captured_params_pair("flax", _linen_mlp(width, depth), width, depth)


def flax_split_pair(depth: int, width: int = 128):
    """A Linen block applied through `jax.jit(block.apply)` per layer, whole vs split."""
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + nn.Dense(width)(nn.gelu(nn.LayerNorm()(x)))

    block = Block()
    x = _sds(32, width)
    one = jax.eval_shape(lambda: block.init(jax.random.key(0), jnp.zeros(x.shape)))

    def whole_builder():
        apply = jax.jit(block.apply)

        def model(layer_params, x):
            for p in layer_params:
                x = apply(p, x)
            return x
        return model

    def split_builder():
        apply = jax.jit(block.apply)
        return (lambda p, x: apply(p, x)), (one, x)

    return (f"flax jit(block.apply) x{depth} whole vs split", whole_builder(),
            ([one] * depth, x), "split_inner_jits", split_builder)


def haiku_unroll_pair(steps: int, hidden: int):
    """Gradient through `hk.LSTM` by `hk.static_unroll` vs `hk.dynamic_unroll`."""
    original, args = haiku_lstm(steps, static=True, hidden=hidden)
    return (f"haiku lstm {steps} steps h={hidden} static vs dynamic_unroll", original, args,
            "scan", lambda: haiku_lstm(steps, static=False, hidden=hidden))


def haiku_gru_unroll_pair(steps: int, hidden: int = 64, batch: int = 8):
    """Forward `hk.GRU` over a sequence, static vs dynamic unroll."""
    import haiku as hk

    def build(unroll):
        def forward(xs):
            core = hk.GRU(hidden)
            outputs, _ = unroll(core, xs, core.initial_state(batch))
            return jnp.sum(outputs)

        model = hk.without_apply_rng(hk.transform(forward))
        xs = _sds(steps, batch, 16)
        params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(xs.shape)))
        return model.apply, (params, xs)

    original, args = build(hk.static_unroll)
    return (f"haiku gru {steps} steps static vs dynamic_unroll", original, args, "scan",
            lambda: build(hk.dynamic_unroll))


def haiku_stack_pair(depth: int, width: int = 64):
    """Residual `hk.Linear` blocks in a Python loop vs `hk.layer_stack`."""
    import haiku as hk

    def block(x):
        return x + hk.Linear(width)(jax.nn.gelu(hk.LayerNorm(-1, True, True)(x)))

    def build(stacked: bool):
        def forward(x):
            if stacked:
                x = hk.layer_stack(depth)(block)(x)
            else:
                for _ in range(depth):
                    x = block(x)
            return jnp.sum(x)

        model = hk.without_apply_rng(hk.transform(forward))
        x = _sds(16, width)
        params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros(x.shape)))
        return jax.grad(model.apply), (params, x)

    original, args = build(False)
    return (f"haiku {depth} blocks grad loop vs hk.layer_stack", original, args, "scan",
            lambda: build(True))


def haiku_captured_params_pair(width: int, depth: int):
    """`hk.nets.MLP` with its params closed over vs passed in."""
    import haiku as hk

    model = hk.without_apply_rng(hk.transform(lambda x: hk.nets.MLP([width] * depth)(x)))
    return _captured_params_pair("haiku", model, width, depth)


def _equinox_blocks(depth: int, width: int):
    import equinox as eqx

    class Block(eqx.Module):
        linear: eqx.nn.Linear
        norm: eqx.nn.LayerNorm

        def __init__(self, key):
            self.linear = eqx.nn.Linear(width, width, key=key)
            self.norm = eqx.nn.LayerNorm(width)

        def __call__(self, x):
            return x + jax.nn.gelu(self.linear(self.norm(x)))

    keys = jax.random.split(jax.random.key(0), depth)
    return Block, keys


def equinox_stack_pair(depth: int, grad: bool, width: int = 64):
    """A list of Equinox blocks in a Python loop vs the blocks stacked (`filter_vmap` of
    the constructor) under `lax.scan`, as Equinox's docs do it."""
    import equinox as eqx

    Block, keys = _equinox_blocks(depth, width)
    x = _sds(16, width)

    def finish(forward, arrays):
        fn = jax.grad(forward) if grad else forward
        return fn, (_abstract(arrays), x)

    def looped():
        arrays, static = eqx.partition([Block(k) for k in keys], eqx.is_array)

        def forward(arrays, x):
            for block in eqx.combine(arrays, static):
                x = jax.vmap(block)(x)
            return jnp.sum(x)
        return finish(forward, arrays)

    def scanned():
        stacked = eqx.filter_vmap(Block)(keys)
        arrays, static = eqx.partition(stacked, eqx.is_array)

        def forward(arrays, x):
            def step(x, layer):
                return jax.vmap(eqx.combine(layer, static))(x), None
            return jnp.sum(lax.scan(step, x, arrays)[0])
        return finish(forward, arrays)

    original, args = looped()
    return (f"equinox {depth} blocks{' grad' if grad else ''} loop vs stacked scan",
            original, args, "scan", scanned)


def equinox_captured_model_pair(width: int, depth: int):
    """An `eqx.nn.MLP` closed over by `jax.jit` (its arrays become constants) vs passed
    through `eqx.filter_jit`'s arguments."""
    import equinox as eqx

    model = eqx.nn.MLP(width, width, width, depth, key=jax.random.key(0))
    arrays, static = eqx.partition(model, eqx.is_array)
    x = _sds(8, width)
    megabytes = (depth + 1) * width * width * 4 / 2**20
    return (f"equinox mlp captured vs passed ({megabytes:.0f} MB)",
            lambda x: jax.vmap(model)(x), (x,), "constants_as_arguments",
            lambda: ((lambda a, x: jax.vmap(eqx.combine(a, static))(x)),
                     (_abstract(arrays), x)))


def equinox_split_pair(depth: int, width: int = 128):
    """Equinox blocks each called through `eqx.filter_jit` inside the model, whole vs
    the jitted block compiled alone."""
    import equinox as eqx

    Block, keys = _equinox_blocks(depth, width)
    arrays, static = eqx.partition([Block(k) for k in keys], eqx.is_array)
    x = _sds(32, width)

    def whole_builder():
        call = eqx.filter_jit(lambda block, x: jax.vmap(block)(x))

        def model(arrays, x):
            for block in eqx.combine(arrays, static):
                x = call(block, x)
            return x
        return model

    def split_builder():
        call = eqx.filter_jit(lambda block, x: jax.vmap(block)(x))
        one, one_static = eqx.partition(Block(keys[0]), eqx.is_array)
        return ((lambda a, x: call(eqx.combine(a, one_static), x)), (_abstract(one), x))

    return (f"equinox filter_jit block x{depth} whole vs split", whole_builder(),
            (_abstract(arrays), x), "split_inner_jits", split_builder)


def _optax_problem():
    params = {"w1": _sds(16, 64), "b1": _sds(64), "w2": _sds(64, 1), "b2": _sds(1)}

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)

    return params, loss, (_sds(32, 16), _sds(32, 1))


def optax_inner_loop_pair(steps: int, chain: bool):
    """K optimizer steps unrolled in Python (an inner loop, as in meta-learning) vs the
    same steps in `lax.scan`; Adam, or clip-by-norm chained with AdamW."""
    import optax

    params, loss, data = _optax_problem()
    opt = (optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3)) if chain
           else optax.adam(1e-3))

    def step(carry, x, y):
        p, state = carry
        updates, state = opt.update(jax.grad(loss)(p, x, y), state, p)
        return optax.apply_updates(p, updates), state

    def unrolled(p, x, y):
        carry = (p, opt.init(p))
        for _ in range(steps):
            carry = step(carry, x, y)
        return loss(carry[0], x, y)

    def scanned(p, x, y):
        carry = lax.scan(lambda c, _: (step(c, x, y), None), (p, opt.init(p)), None,
                         length=steps)[0]
        return loss(carry[0], x, y)

    name = "clip+adamw" if chain else "adam"
    return (f"optax {name} {steps} steps unrolled vs scan", unrolled, (params, *data),
            "scan", lambda: (scanned, (params, *data)))


def library_pairs() -> list[tuple[str, tuple]]:
    """(library, pair) for every pair written with a library."""
    return [
        ("flax", flax_encoder_pair(4, grad=False)),
        ("flax", flax_encoder_pair(8, grad=False)),
        ("flax", flax_encoder_pair(4, grad=True)),
        ("flax", flax_captured_params_pair(512, 4)),
        ("flax", flax_split_pair(16)),
        ("haiku", haiku_unroll_pair(8, 64)),
        ("haiku", haiku_unroll_pair(16, 128)),
        ("haiku", haiku_gru_unroll_pair(32)),
        ("haiku", haiku_stack_pair(12)),
        ("haiku", haiku_captured_params_pair(512, 8)),
        ("equinox", equinox_stack_pair(8, grad=False)),
        ("equinox", equinox_stack_pair(24, grad=False)),
        ("equinox", equinox_stack_pair(12, grad=True)),
        ("equinox", equinox_captured_model_pair(512, 3)),
        ("equinox", equinox_split_pair(16)),
        ("optax", optax_inner_loop_pair(8, chain=False)),
        ("optax", optax_inner_loop_pair(32, chain=False)),
        ("optax", optax_inner_loop_pair(16, chain=True)),
    ]
