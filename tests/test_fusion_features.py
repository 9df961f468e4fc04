"""Feature extraction: fusions as XLA forms them (sizes, costs, kernel sequences), layouts,
chains and fan-out, on tiny programs with closed-form counts."""

import jax
import jax.numpy as jnp
import pytest
from feature_programs import MAT, VEC, X, f32, unrolled
from jax import lax

from costmodel import features as F

BATCH = jax.ShapeDtypeStruct((4, 16, 16), jnp.float32)




@pytest.mark.parametrize("fn, args, expected", [
    (lambda v, m: v @ m, (VEC, MAT), 1),
    (lambda m, v: m @ v, (MAT, VEC), 1),
    (lambda a, b: a @ b, (MAT, MAT), 0),
    (lambda b, v: jnp.einsum("bij,bj->bi", b, v), (BATCH, VEC.update(shape=(4, 16))), 1),
    (lambda a, b: a @ b, (BATCH, BATCH), 0),
])
def test_matrix_vector_dots_are_told_from_matrix_products(fn, args, expected):
    assert F.extract(fn, *args)["dot_matrix_vector"] == expected


def _conv(dimension_numbers):
    return lambda x, w: lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                                 dimension_numbers=dimension_numbers)


@pytest.mark.parametrize("fn, args, expected", [
    (_conv(("NHWC", "HWIO", "NHWC")), (f32(4, 16, 16, 8), f32(3, 3, 8, 8)), 0),
    (_conv(("NCHW", "OIHW", "NCHW")), (f32(4, 8, 16, 16), f32(8, 8, 3, 3)), 3),
    (_conv(("NHWC", "OIHW", "NHWC")), (f32(4, 16, 16, 8), f32(8, 8, 3, 3)), 1),
    # both gradient convolutions of a channels-last one batch over features or spatial dims
    (jax.grad(lambda x, w: _conv(("NHWC", "HWIO", "NHWC"))(x, w).sum(), argnums=(0, 1)),
     (f32(4, 16, 16, 8), f32(3, 3, 8, 8)), 4),
    (lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k), (f32(2, 8, 4, 16),) * 2, 2),
    (lambda q, k: jnp.einsum("bhqd,bhkd->bhqk", q, k), (f32(2, 4, 8, 16),) * 2, 0),
    (lambda a, b: jnp.einsum("km,kn->mn", a, b), (f32(8, 4), f32(8, 5)), 0),
    (lambda a, v: jnp.einsum("mkn,k->mn", a, v), (f32(3, 8, 5), f32(8)), 1),
])
def test_layout_transposes_count_operands_outside_the_library_layout(fn, args, expected):
    assert F.extract(fn, *args)["layout_transposes"] == expected


def test_chain_length_runs_through_inner_jits():
    def chain(x):
        for _ in range(5):
            x = jnp.sin(x)
        return x

    assert F.extract(chain, VEC)["chain_length"] == 5
    inner = jax.jit(chain)
    # each call is one op on the caller's chain plus the callee's five
    assert F.extract(lambda x: inner(inner(x)), VEC)["chain_length"] == 12


def test_fanout_counts_a_weight_reused_by_every_step():
    def reuse(m, x):
        for _ in range(6):
            x = jnp.tanh(x @ m)
        return x

    feats = F.extract(reuse, MAT, MAT)
    assert feats["fanout_max"] == 6
    # m: 6 uses (36); x and each intermediate: one use each (6 dots + 6 tanh operands)
    assert feats["fanout_squares"] == 36 + 12


def test_elementwise_chain_is_one_fusion_weighted_by_op_cost():
    feats = F.extract(unrolled(10), X)
    # sin, mul and add per step, and one broadcast of 2.0: every step broadcasts the same
    # constant, and XLA's CSE (as the emulator's) merges the ten; the constants do not fuse
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (1, 31)
    # sin weighs 4 (transcendental), the rest 1: (10 * 4 + 21) ** 2
    assert feats["fusion_cost_squares"] == 61 ** 2


def _shared_then_split(first):
    def f(x, w):
        y = first(x)
        return jnp.sin(y) @ w, y * 2  # y feeds two fusions: the dot's operand and an output
    return f


def test_cheap_shared_op_is_duplicated_into_each_fusion_but_expensive_one_is_not():
    cheap = F.extract(_shared_then_split(lambda x: x + 1), X, X)
    # {sin, add, broadcast} and {mul, broadcast, add, broadcast}: the add is recomputed
    assert (cheap["fusion_groups"], cheap["fusion_max_size"]) == (2, 4)
    assert cheap["fusion_cost_squares"] == 6 ** 2 + 4 ** 2
    costly = F.extract(_shared_then_split(jnp.exp), X, X)
    # exp is materialized once: {exp}, {sin}, {mul, broadcast}
    assert (costly["fusion_groups"], costly["fusion_max_size"]) == (3, 2)
    assert costly["fusion_cost_squares"] == 4 ** 2 + 4 ** 2 + 2 ** 2


def test_sine_is_recomputed_in_each_fusion_but_exp_is_not():
    # XLA:CPU computes a shared sine in each consumer's fusion, a shared exp once
    sine = F.extract(_shared_then_split(jnp.sin), X, X)
    # {sin, sin} before the dot and {mul, broadcast, sin} for the output
    assert (sine["fusion_groups"], sine["fusion_max_size"]) == (2, 3)
    assert sine["fusion_cost_squares"] == 8 ** 2 + 6 ** 2



def _running_sum(step, layers=4):
    def f(x, w):
        g, outs = x, []
        for _ in range(layers):
            g = step(g, x)
            outs.append(g @ w)  # each partial sum feeds a dot, which does not fuse
        return outs
    return f


def test_running_sum_over_a_broadcast_is_recomputed_in_every_later_fusion():
    # g + 1.0 reads one array (the 1.0 is a broadcast): like XLA, each partial sum is
    # materialized for its dot and also recomputed in the fusion of every later sum, so
    # fusion k holds k adds and the one broadcast (CSE merges the steps' broadcasts of 1.0)
    feats = F.extract(_running_sum(lambda g, x: g + 1.0), X, X)
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (4, 5)
    assert feats["fusion_cost_squares"] == 2 ** 2 + 3 ** 2 + 4 ** 2 + 5 ** 2
    # g + x reads two arrays: materialized once, never recomputed
    binary = F.extract(_running_sum(lambda g, x: g + x), X, X)
    assert (binary["fusion_groups"], binary["fusion_max_size"]) == (4, 1)
    assert binary["fusion_cost_squares"] == 4


def _sine_chain(addend):
    def f(x, *rest):
        for i in range(10):
            x = jnp.sin(x) + addend(i, *rest)
        return x
    return f


def test_a_fusion_weighs_its_cost_by_the_arrays_it_reads_from_outside():
    # XLA:CPU compiles one fusion in time growing with its size times its inputs
    # (`bench/archive/fusion_shapes.py`): each chain below is one fusion of cost 10 * (4 + 1)
    one = F.extract(_sine_chain(lambda i: 1.0), X)
    assert one["fusion_groups"] == 1 and one["fusion_cost_inputs"] == one["fusion_cost_squares"] ** 0.5
    separate = F.extract(_sine_chain(lambda i, *ws: ws[i]), X, *[X] * 10)
    assert separate["fusion_groups"] == 1
    assert separate["fusion_cost_inputs"] == 50 * 11  # x and the ten addends
    # the addends as rows of one array: ten fused slices (cost 1 each) of one input
    rows = F.extract(_sine_chain(lambda i, w: w[i]), X, jnp.ones((10, *X.shape)))
    assert rows["fusion_cost_inputs"] == 60 * 2


def test_index_changing_ops_are_counted_per_fusion():
    # two strided slices and a concatenate, fused with the add and its broadcast
    feats = F.extract(lambda x: jnp.concatenate([x[::2], x[1::2]]) + 1.0, VEC)
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (1, 5)
    assert feats["fusion_indexing_squares"] == 3 ** 2


def _tanh_layers(m, x, steps):
    for _ in range(steps):
        x = jnp.tanh(x @ m)
    return x


def test_kernel_sequences_count_unrolled_steps_in_one_sequence_and_a_scan_body_once():
    # each step is one dot (a library call) and one tanh fusion, all in the entry
    feats = F.extract(lambda m, x: _tanh_layers(m, x, 6), MAT, MAT)
    assert feats["sequence_kernels_max"] == 12
    assert feats["sequence_kernel_squares"] == 144

    def scanned(m, x):
        return lax.scan(lambda c, _: (_tanh_layers(m, c, 1), None), x, None, length=50)[0]

    feats = F.extract(scanned, MAT, MAT)
    # the entry runs the while op; its body (dot, tanh, the counter's add) and its
    # condition (compare) run as sequences of their own, whatever the trip count
    assert feats["sequence_kernels_max"] == 3
    assert feats["sequence_kernel_squares"] == 1 + 9 + 1


def test_kernel_sequences_inline_calls_and_keep_branches_apart():
    inner = jax.jit(lambda m, x: _tanh_layers(m, x, 2))
    # two calls of a 4-kernel function join the caller's sequence
    assert F.extract(lambda m, x: inner(m, inner(m, x)), MAT, MAT)["sequence_kernels_max"] == 8

    def switch(i, m, x):
        return lax.switch(i, [lambda x: _tanh_layers(m, x, 1), lambda x: _tanh_layers(m, x, 3)],
                          x)

    feats = F.extract(switch, jax.ShapeDtypeStruct((), jnp.int32), MAT, MAT)
    # branches of 2 and 6 kernels; the entry: the index clamp's fusion and the case op
    assert feats["sequence_kernels_max"] == 6
    assert feats["sequence_kernel_squares"] == 2 * 2 + 2 * 2 + 6 * 6


def test_case_results_times_branches_squared():
    def switch_then_cond(i, x):
        a, b = lax.switch(i, [lambda x: (x, -x), lambda x: (x * 2, x), lambda x: (x, x + 1)], x)
        return lax.cond(i > 0, lambda y: y + 1, lambda y: y - 1, a + b)

    feats = F.extract(switch_then_cond, jax.ShapeDtypeStruct((), jnp.int32), VEC)
    # the switch: 2 results x 3 branches squared; the cond: 1 result x 2 branches squared
    assert feats["case_count"] == 2
    assert feats["case_result_branch_squares"] == 2 * 3 ** 2 + 1 * 2 ** 2


def test_repeated_block_is_named_by_the_users_frame_not_an_installed_library(tmp_path,
                                                                            monkeypatch):
    # A layer from an installed package (flax's LayerNorm, say) starts each block: the
    # advice should point at the user's line that calls it.
    package = tmp_path / "site-packages"
    package.mkdir()
    (package / "fake_layers.py").write_text(
        "import jax.numpy as jnp\n\ndef norm(x):\n    return x / jnp.sqrt(jnp.mean(x * x))\n")
    monkeypatch.syspath_prepend(str(package))
    import fake_layers

    def f(x, w):
        for _ in range(6):
            x = jnp.tanh(fake_layers.norm(x) @ w)
        return x

    source = F.extract(f, X, X).info["repeated_block"]["source"]
    assert "fake_layers.py" not in source
    assert source.startswith(__file__) and source.endswith("(test_repeated_block_is_named_by_"
                                                           "the_users_frame_not_an_installed_"
                                                           "library.<locals>.f)")


