"""Folded dots and convolutions: XLA's interpreter hands only a plain float32-computed
matrix product to its matrix library (`fold_dot_flops`); every other contraction of
constants it evaluates one multiply-add at a time (interpreter work in `fold_elements`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from costmodel import features as F
from costmodel.features.constant_folding import EVALUATOR_SHARE, KIND_COST_IN_XLA

_RNG = np.random.default_rng(0)
_A, _B = (_RNG.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
_A3, _B3 = (_RNG.standard_normal((4, 64, 64)).astype(np.float32) for _ in range(2))
_T = _RNG.standard_normal((8, 8, 64)).astype(np.float32)  # 64 rows of 64 as (8, 8, 64)
_V = _RNG.standard_normal((64,)).astype(np.float32)
_IMAGE = _RNG.standard_normal((1, 16, 16, 8)).astype(np.float32)
_KERNEL = _RNG.standard_normal((3, 3, 8, 4)).astype(np.float32)
# interpreter work of one multiply-add, in the units of `fold_elements`
_MAC = KIND_COST_IN_XLA["dot_multiply_add"] * EVALUATOR_SHARE
_CONV_MAC = KIND_COST_IN_XLA["convolution_multiply_add"] * EVALUATOR_SHARE
_CUBE = 64 ** 3


def _einsum(spec, a, b, dtype=jnp.float32, result=None):
    # scaled by the argument (of the result's type): nothing after the contraction folds
    return lambda x: jnp.einsum(spec, jnp.asarray(a, dtype), jnp.asarray(b, dtype),
                                preferred_element_type=result) * x


def _batch_of_one(lhs_contracting, rhs_contracting):
    dims = (((lhs_contracting,), (rhs_contracting,)), ((0,), (0,)))
    return lambda x: lax.dot_general(jnp.asarray(_A).reshape(1, 64, 64),
                                     jnp.asarray(_B).reshape(1, 64, 64), dims) * x


def _conv(x):
    return x * lax.conv_general_dilated(jnp.asarray(_IMAGE), jnp.asarray(_KERNEL), (1, 1),
                                        "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _extract(fn, dtype=jnp.float32):
    return F.extract(fn, jax.ShapeDtypeStruct((), dtype))


@pytest.mark.parametrize("fn, dtype, elements, dot_flops", [
    # a plain (m, k) @ (k, n) product: the library's, as before
    (_einsum("ij,jk->ik", _A, _B), jnp.float32, 0.0, 2 * _CUBE),
    (lambda x: (jnp.asarray(_A) @ jnp.asarray(_B)) * x, jnp.float32, 0.0, 2 * _CUBE),
    # bfloat16 is multiplied as float32, in the library too, as are bfloat16 operands
    # of a float32 result (converted first)
    (_einsum("ij,jk->ik", _A, _B, jnp.bfloat16), jnp.bfloat16, 0.0, 2 * _CUBE),
    (_einsum("ij,jk->ik", _A, _B, jnp.bfloat16, jnp.float32), jnp.float32, 0.0, 2 * _CUBE),
    # more than one free or contracting dimension on a side: XLA rewrites the dot into a
    # plain product first, whatever the order of its dimensions
    (_einsum("abk,kn->abn", _T, _B), jnp.float32, 0.0, 2 * _CUBE),
    (_einsum("abk,nk->abn", _T, _B), jnp.float32, 0.0, 2 * _CUBE),
    (_einsum("kab,kn->abn", _T.reshape(64, 8, 8), _B), jnp.float32, 0.0, 2 * _CUBE),
    (_einsum("nab,kab->nk", _T.reshape(64, 8, 8), _T.reshape(64, 8, 8)), jnp.float32, 0.0,
     2 * _CUBE),
    # a contraction over another dimension of either side: one multiply-add at a time
    (_einsum("ij,kj->ik", _A, _B), jnp.float32, _CUBE * _MAC, 0.0),
    (_einsum("ji,jk->ik", _A, _B), jnp.float32, _CUBE * _MAC, 0.0),
    # batch dimensions, a vector operand (either side), an integer type
    (_einsum("bij,bjk->bik", _A3, _B3), jnp.float32, 4 * _CUBE * _MAC, 0.0),
    (_einsum("ij,j->i", _A, _V), jnp.float32, 64 * 64 * _MAC, 0.0),
    (_einsum("k,kn->n", _V, _B), jnp.float32, 64 * 64 * _MAC, 0.0),
    (_einsum("kab,k->ab", _T.reshape(64, 8, 8), _V), jnp.float32, 64 * 64 * _MAC, 0.0),
    (_einsum("ij,jk->ik", _A, _B, jnp.int32), jnp.int32, _CUBE * _MAC, 0.0),
    # a convolution never goes to the library: 16x16 pixels x 4 outputs x 3x3x8 window
    (_conv, jnp.float32, 16 * 16 * 4 * 72 * _CONV_MAC, 0.0),
])
def test_a_folded_dot_is_library_flops_only_in_the_plain_form(fn, dtype, elements,
                                                               dot_flops):
    feats = _extract(fn, dtype)
    assert feats["fold_ops"] == 1
    assert feats["fold_elements"] == pytest.approx(elements, rel=1e-6)
    assert feats["fold_dot_flops"] == dot_flops


@pytest.mark.parametrize("rhs_contracting, elements, dot_flops", [
    (1, 0.0, 2 * _CUBE), (2, _CUBE * _MAC, 0.0)])
def test_a_batch_of_one_is_dropped_before_the_form_is_judged(rhs_contracting, elements,
                                                            dot_flops):
    # the tables reshaped to (1, 64, 64), which StableHLO's folders compute (a fiftieth of
    # a multiply an element): a captured (1, m, k) array, or `[None]`, is lowered as a
    # broadcast, and a dot of broadcasts does not fold
    feats = _extract(_batch_of_one(2, rhs_contracting))
    assert feats["fold_ops"] == 3
    assert feats["fold_elements"] == pytest.approx(2 * 0.02 * 64 * 64 + elements)
    assert feats["fold_dot_flops"] == dot_flops


def test_jnp_matmul_of_a_transposed_table_is_a_folded_transpose_and_a_plain_product():
    # the transpose is StableHLO's to compute (1.4 multiplies an element), the dot the
    # library's
    feats = _extract(lambda x: (jnp.asarray(_A) @ jnp.asarray(_B).T) * x)
    assert feats["fold_ops"] == 2
    assert feats["fold_elements"] == pytest.approx(1.4 * 64 * 64)
    assert feats["fold_dot_flops"] == 2 * _CUBE


def test_a_float64_product_is_evaluated_one_multiply_add_at_a_time():
    with jax.enable_x64(True):
        feats = _extract(_einsum("ij,jk->ik", _A, _B, jnp.float64), jnp.float64)
    assert feats["fold_elements"] == pytest.approx(_CUBE * _MAC, rel=1e-6)
    assert feats["fold_dot_flops"] == 0.0


def test_a_slow_folded_dot_outweighs_an_elementwise_op_on_the_same_tables():
    # 64 multiply-adds per output element against one multiply: the measured cost per
    # multiply-add (against a multiply's per element) carries it
    slow = _extract(_einsum("ij,kj->ik", _A, _B))
    product = _extract(lambda x: jax.jit(jnp.multiply)(_A, _B) * x)
    assert product["fold_elements"] == pytest.approx(2 * 64 * 64 * EVALUATOR_SHARE)
    assert slow["fold_elements"] / product["fold_elements"] == pytest.approx(
        32 * KIND_COST_IN_XLA["dot_multiply_add"])


def test_a_dot_of_a_constant_and_an_argument_is_not_folded_in_any_form():
    feats = F.extract(lambda x: jnp.einsum("ij,kj->ik", x, jnp.asarray(_A)),
                      jax.ShapeDtypeStruct((64, 64), jnp.float32))
    assert (feats["fold_ops"], feats["fold_elements"], feats["fold_dot_flops"]) == (0, 0, 0)


def test_the_corpus_contractions_of_captured_tables_fold_one_multiply_add_at_a_time():
    from costmodel.training.corpus.misc import build_constant_fold

    fn, args = build_constant_fold(side=32, ops=2, mode="transposed")
    feats = F.extract(fn, *args)
    assert (feats["fold_ops"], feats["fold_dot_flops"]) == (2, 0)
    assert feats["fold_elements"] == pytest.approx(2 * 32 ** 3 * _MAC)
    # 4 blocks of 16: half the transposed mode's multiply-adds, and the interpreter
    # reshapes the blocks besides
    fn, args = build_constant_fold(side=32, ops=2, mode="batched")
    feats = F.extract(fn, *args)
    assert feats["fold_dot_flops"] == 0
    assert 2 * 4 * 16 ** 3 * _MAC < feats["fold_elements"] < 1.1 * 2 * 4 * 16 ** 3 * _MAC
