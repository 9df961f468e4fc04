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
