"""Scan advice on a library's layer stack names that library's idiom and the user's line."""

import jax
import jax.numpy as jnp
from conftest import import_corpus_library

import costmodel

X = jax.ShapeDtypeStruct((8, 32), jnp.float32)


def _scan_advice(fn, *args):
    advice = costmodel.lower(fn, *args).advise(budget_seconds=1e-4)
    return next(a for a in advice.alternatives if a.strategy == "scan")


def test_a_flax_linen_layer_stack_gets_nn_scan_at_the_users_line():
    nn = import_corpus_library("flax.linen")

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            return x + nn.Dense(32)(nn.LayerNorm()(x))

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(12):
                x = Block()(x)
            return x

    model = Stack()
    params = jax.eval_shape(model.init, jax.random.key(0), X)
    alt = _scan_advice(lambda p, x: model.apply(p, x).sum(), params, X)
    assert "nn.scan" in alt.description and "test_advice_idioms.py" in alt.description


def test_a_haiku_stack_gets_layer_stack():
    hk = import_corpus_library("haiku")

    def forward(x):
        for _ in range(12):
            x = x + hk.Linear(32)(jax.nn.gelu(x))
        return x.sum()

    model = hk.without_apply_rng(hk.transform(forward))
    params = jax.eval_shape(model.init, jax.random.key(0), X)
    assert "hk.layer_stack" in _scan_advice(model.apply, params, X).description


def test_plain_jax_keeps_the_plain_scan_sentence():
    def f(x, w):
        for _ in range(30):
            x = jnp.tanh(x @ w)
        return x.sum()

    alt = _scan_advice(f, X, jax.ShapeDtypeStruct((32, 32), jnp.float32))
    assert alt.description.endswith("instead of unrolling them.")
