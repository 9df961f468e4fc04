"""Scan rewrites of loops that the first rewrite left half done: a first repeat that
reads a literal, and the backward pass of an unrolled loop's gradient."""

import jax
import jax.numpy as jnp
import numpy as np

from costmodel import _rewrite
from costmodel.features import extract

X = jnp.linspace(0.1, 1, 32).reshape(4, 8)
W = jnp.eye(8) * 0.5 + 0.01


def _scanned(f, *args):
    traced = jax.jit(f).trace(*args)
    block = extract(f, *args).info["repeated_block"]
    return _rewrite.as_scan(traced.jaxpr, block["start"], block["size"], block["repeats"])


def _scans(fn, shapes) -> int:
    return sum(e.primitive.name == "scan" for e in jax.jit(fn).trace(*shapes).jaxpr.eqns)


def test_a_loop_whose_first_step_reads_a_literal_is_scanned_after_that_step():
    def f(x):
        count = jnp.zeros((), jnp.float32)  # a literal in the first step, a var after
        for _ in range(6):
            count = count + 1.0
            x = jnp.tanh(x) * count
        return x.sum()

    fn, shapes = _scanned(f, X)
    assert _scans(fn, shapes) == 1
    np.testing.assert_allclose(jax.jit(fn)(X)[0], f(X), rtol=1e-6)


def _loss(w, x):
    for _ in range(12):
        x = jnp.tanh(x @ w) + 0.1 * x
    return jnp.sum(x**2)


def test_the_gradient_of_an_unrolled_loop_gets_both_passes_scanned():
    grad = jax.grad(_loss)
    once = _scanned(grad, W, X)
    both = _rewrite.scan_remaining(*once, min_repeats=3)
    assert (_scans(*once), _scans(*both)) == (1, 2)
    np.testing.assert_allclose(jax.jit(both[0])(W, X)[0], grad(W, X), rtol=1e-5)
    assert extract(both[0], *both[1])["hlo_ops"] < extract(once[0], *once[1])["hlo_ops"]


def test_a_scan_returns_only_the_steps_values_read_after_it():
    def f(x, w):
        for _ in range(10):
            x = jnp.tanh(x @ w) + 0.1 * x  # four ops a step, one value carried
        return x.sum()

    fn, shapes = _scanned(f, X, W)
    scan = next(e for e in jax.jit(fn).trace(*shapes).jaxpr.eqns if e.primitive.name == "scan")
    assert len(scan.outvars) == scan.params["num_carry"] == 1


def _glue(fn, shapes) -> int:
    """Equations of the rewritten program that only slice, squeeze or stack rows."""
    eqns = jax.jit(fn).trace(*shapes).jaxpr.eqns
    return sum(e.primitive.name in ("slice", "squeeze", "stack") for e in eqns)


def test_the_backward_scan_reads_the_forward_scans_rows_as_they_are():
    grad = jax.grad(_loss)
    both = _rewrite.scan_remaining(*_scanned(grad, W, X), min_repeats=3)
    assert _scans(*both) == 2
    # the residuals of the ten steps both scans run are not sliced out one by one and
    # stacked again in reverse (75 such equations, 3 stacks): the second scan reads a
    # slice of the first's stacked output, reversed; only the rows the steps left out of
    # it read are sliced out
    eqns = jax.jit(both[0]).trace(*both[1]).jaxpr.eqns
    assert sum(e.primitive.name == "stack" for e in eqns) == 0
    assert _glue(*both) <= 15
    np.testing.assert_allclose(jax.jit(both[0])(W, X)[0], grad(W, X), rtol=1e-5)


def _primitives(fn, shapes) -> dict:
    eqns = jax.jit(fn).trace(*shapes).jaxpr.eqns
    return {name: sum(e.primitive.name == name for e in eqns)
            for name in ("scan", "stack", "slice", "squeeze", "rev")}


def _layers(ws, x):
    for w in ws:
        x = jnp.tanh(x @ w) + 0.1 * x
    return jnp.sum(x**2)


WS = [jnp.eye(8) * (0.5 + 0.05 * i) + 0.01 for i in range(8)]


def _stacked_scan(f, *args):
    traced = jax.jit(f).trace(*args)
    block = extract(f, *args).info["repeated_block"]
    once = _rewrite.as_scan(traced.jaxpr, block["start"], block["size"], block["repeats"],
                            stacked_arguments=True)
    return _rewrite.scan_remaining(*once, min_repeats=3, stacked_arguments=True)


def test_a_layer_stacks_weights_come_in_stacked_as_a_scanned_layer_idiom_takes_them():
    fn, shapes = _stacked_scan(_layers, WS, X)
    # x, then the eight (8, 8) weights as one argument; nothing stacks them inside
    assert [s.shape for s in shapes] == [(4, 8), (8, 8, 8)]
    assert _primitives(fn, shapes) == {"scan": 1, "stack": 0, "slice": 0, "squeeze": 0,
                                       "rev": 0}
    np.testing.assert_allclose(jax.jit(fn)(X, jnp.stack(WS))[0], _layers(WS, X), rtol=1e-6)
    plain = _rewrite.as_scan(jax.jit(_layers).trace(WS, X).jaxpr,
                             *(extract(_layers, WS, X).info["repeated_block"][k]
                               for k in ("start", "size", "repeats")))
    assert _primitives(*plain)["stack"] == 1  # the original signature stacks them inside


def test_a_layer_stacks_gradients_go_out_stacked():
    grad = jax.grad(_layers)
    fn, shapes = _stacked_scan(grad, WS, X)
    # the first layer's backward step differs (no gradient for x): it stays unrolled and
    # keeps its weight; the seven after it come in as one argument, in the order the
    # first loop scanned (the backward pass: last layer first), and so do their gradients
    assert [s.shape for s in shapes] == [(8, 8), (4, 8), (7, 8, 8)]
    first, stacked = jax.jit(fn)(WS[0], X, jnp.stack(WS[:0:-1]))
    expected = grad(WS, X)
    np.testing.assert_allclose(first, expected[0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stacked, jnp.stack(expected[:0:-1]), rtol=1e-5, atol=1e-7)
    counts = _primitives(fn, shapes)
    assert counts["scan"] == 2
    # against the original signature: the weights stacked inside, each gradient sliced out
    plain = _rewrite.scan_remaining(*_scanned(grad, WS, X), min_repeats=3)
    before = _primitives(*plain)
    assert before["scan"] == 2
    glue = ("stack", "slice", "squeeze")
    assert sum(counts[k] for k in glue) < sum(before[k] for k in glue)
