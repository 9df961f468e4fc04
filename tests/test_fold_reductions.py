"""Folded reductions: XLA's interpreter runs a reduction's body as a computation per element
unless it only adds (`bench/archive/fold_reductions.py`), and it folds reductions over
broadcast constants that elementwise ops of them have become (its simplifier sinks those
ops below the broadcast), through calls too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from costmodel import features as F
from costmodel.features.constant_folding import EVALUATOR_SHARE, KIND_COST_IN_XLA

_A = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
_READ = 64 * 64 + 1  # a table and the reduction's initial value


def _cost(kind: str) -> float:
    return KIND_COST_IN_XLA.get(kind, 1.0) * EVALUATOR_SHARE


def _max_of_abs(table):
    return jnp.max(jnp.abs(table), axis=0)


@pytest.mark.parametrize("fn, ops, elements", [
    # a sum costs what a multiply does per element it reads ...
    (lambda x: x + jnp.sum(jnp.asarray(_A), axis=0), 1, _READ * _cost("reduce")),
    # ... a maximum a hundred, twice that down to a scalar
    (lambda x: x + jnp.max(jnp.asarray(_A), axis=0), 1, _READ * 100 * EVALUATOR_SHARE),
    (lambda x: x + jnp.min(jnp.asarray(_A)), 1, _READ * 200 * EVALUATOR_SHARE),
    # an argmax reads the table and an iota of indices (never folded itself), each with
    # its initial value; its int32 result's convert folds too
    (lambda x: x + jnp.argmax(jnp.asarray(_A), axis=0), 2,
     2 * _READ * 400 * EVALUATOR_SHARE + 64 * _cost("convert")),
    # a window reduction costs a body per element whatever it does
    (lambda x: x + lax.reduce_window(jnp.asarray(_A), 0.0, lax.add, (64, 1), (64, 1),
                                     "VALID")[0], 2,
     _READ * 120 * EVALUATOR_SHARE + 64 * _cost("reshape")),
    # `abs` of zeros stays a broadcast, and the maximum over it folds ...
    (lambda x: x + _max_of_abs(jnp.zeros((64, 64))), 1, _READ * 100 * EVALUATOR_SHARE),
    # ... in a call too, the broadcast its argument
    (lambda x: x + jax.jit(_max_of_abs)(jnp.zeros((64, 64)) * 2.0), 1,
     _READ * 100 * EVALUATOR_SHARE),
    # ... but over every dimension of a broadcast scalar it is simplified away
    (lambda x: x + jnp.max(jnp.abs(jnp.zeros((64, 64)))), 0, 0.0),
    # an elementwise op of broadcasts alone is not folded
    (lambda x: x + jnp.abs(jnp.zeros((64,))) * 3.0, 0, 0.0),
])
def test_a_folded_reduction_costs_what_its_body_costs(fn, ops, elements):
    feats = F.extract(fn, jnp.ones((64,)))
    assert feats["fold_ops"] == ops
    assert feats["fold_elements"] == pytest.approx(elements)
    assert feats["fold_dot_flops"] == 0


def _max_of_outer(x):
    # a product of broadcasts of two captured arrays of zeros, then a maximum over it:
    # the product is a broadcast again only where XLA simplifies and folds to a fixpoint
    rows = jnp.broadcast_to(jnp.asarray(np.zeros((64, 1), np.float32)), (64, 64))
    cols = jnp.broadcast_to(jnp.asarray(np.zeros((1, 64), np.float32)), (64, 64))
    return x + jnp.max(rows * cols, axis=0)


@pytest.mark.parametrize("backend, ops", [("cpu", 1), ("tpu", 0)])
def test_a_product_of_broadcast_arrays_folds_where_simplification_runs_to_a_fixpoint(
        backend, ops):
    feats = F.extract(_max_of_outer, jnp.ones((64,)), backend=backend)
    assert feats["fold_ops"] == ops
    assert feats["fold_elements"] == pytest.approx(ops * _READ * 100 * EVALUATOR_SHARE)
