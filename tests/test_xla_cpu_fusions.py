"""Feature extraction: what XLA:CPU evaluates while compiling (constant folding) and where
its fusion decisions differ (recomputed ops, bitcasts, concatenates, copied dot operands)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from feature_programs import VEC, X, f32
from jax import lax

from costmodel import features as F
from costmodel.features.constant_folding import EVALUATOR_SHARE

_A = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
_B = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)


def _sine_times(a, b):
    return jnp.sin(a) * b


_N = 64 * 64  # elements of one table


@pytest.mark.parametrize("fn, ops, elements, dot_flops", [
    # a product of two captured tables: XLA evaluates the dot while compiling
    (lambda x: x + jnp.asarray(_A) @ jnp.asarray(_B), 1, 0, 2 * 64**3),
    # a captured table times an argument is run-time work
    (lambda x: x @ _A, 0, 0, 0),
    # constants flow into an inner jit, which XLA inlines before folding; the StableHLO
    # folders do not look into it (sin reads one table, the product two)
    (lambda x: x + jax.jit(_sine_times)(_A, _B), 2, 3 * _N * EVALUATOR_SHARE, 0),
    # a loop's captured constant is sunk into its body and folded once, not per trip, by
    # XLA's interpreter (the loop carries it: no literal to the StableHLO folders)
    (lambda x: lax.fori_loop(0, 10, lambda i, c: c + jnp.sin(jnp.asarray(_A)), x), 1,
     _N * EVALUATOR_SHARE, 0),
    # an op on a folded product is XLA's interpreter's too (a tanh there costs 1.5
    # multiplies)
    (lambda x: x + jnp.tanh(jnp.asarray(_A) @ jnp.asarray(_B)), 2,
     1.5 * _N * EVALUATOR_SHARE, 2 * 64**3),
    # a broadcast scalar folds with a constant beside it ...
    (lambda x: x + jnp.sin(jnp.asarray(_A)) * 3.0, 2, _N + 2 * _N, 0),
    # ... but broadcasts are never folded, nor an op that reads only broadcasts
    (lambda x: x + jnp.full((64, 64), 2.0) * 3.0, 0, 0, 0),
])
def test_constant_folding_counts_what_xla_evaluates_at_compile_time(fn, ops, elements,
                                                                    dot_flops):
    feats = F.extract(fn, jnp.ones((64, 64)))
    assert feats["fold_ops"] == ops
    assert feats["fold_elements"] == pytest.approx(elements)
    assert feats["fold_dot_flops"] == dot_flops
    assert feats["fold_bytes"] == ops * _N * 4


@pytest.mark.parametrize("fn, ops, elements", [
    # converts and reshapes before XLA cost a fiftieth of a multiply, a transpose 1.4
    (lambda x: x + jnp.asarray(_A).astype(jnp.bfloat16).astype(jnp.float32), 2,
     2 * 0.02 * _N),
    (lambda x: x + jnp.asarray(_A).reshape(32, 128).reshape(64, 64), 2, 2 * 0.02 * _N),
    (lambda x: x + jnp.asarray(_A).T, 1, 1.4 * _N),
    # a pad is XLA's alone, at five multiplies there (its result: 64 x 72)
    (lambda x: x @ lax.pad(jnp.asarray(_A), 0.0, ((0, 0, 0), (0, 8, 0))), 1,
     5 * 64 * 72 * EVALUATOR_SHARE),
])
def test_a_folded_element_costs_what_its_kind_costs_in_its_stage(fn, ops, elements):
    feats = F.extract(fn, jnp.ones((64, 64)))
    assert feats["fold_ops"] == ops
    assert feats["fold_elements"] == pytest.approx(elements)


def test_an_expensive_op_whose_only_user_is_recomputed_is_computed_once_on_xla_cpu():
    def shared(x, w):
        z = jnp.log1p(x) * 2.0  # the multiply feeds three fusions, the log1p only it
        return jnp.sum(z, axis=0), jnp.max(z + 1.0, axis=1), (z - 3.0) @ w
    # XLA:CPU (jax 0.10.2) copies the multiply into each user's fusion and keeps the
    # log1p out of all of them: {sub, mul} and {add, mul} with their broadcasts, {mul,
    # broadcast}, {log1p} (weight 4) and the dot's two layout copies
    cpu = F.extract(shared, X, X)
    assert (cpu["fusion_groups"], cpu["fusion_max_size"]) == (6, 4)
    # (the reductions' scalar bodies add nothing: rank-0 ops cost nothing)
    assert cpu["fusion_cost_squares"] == 4 ** 2 + 4 ** 2 + 2 ** 2 + 4 ** 2
    # the GPU target's rule: the log1p goes wherever its user goes
    gpu = F.extract(shared, X, X, backend="gpu")
    assert (gpu["fusion_groups"], gpu["fusion_max_size"]) == (5, 5)


@pytest.mark.parametrize("shape, ops, cost_squares",
                         [((), 5, 0), ((1,), 5, 8 ** 2), ((8, 8), 6, 9 ** 2)])
def test_scalar_ops_count_in_a_fusions_size_but_not_its_cost(shape, ops, cost_squares):
    # XLA:CPU compiles a fusion of scalars as straight-line code, in time linear in its
    # ops; an array of any shape, even (1,), gets a loop body that compiles superlinearly
    def chain(x, y):
        # the sine weighs 4; the constant's broadcast is a bitcast for shape (1,), an
        # op for (8, 8)
        return jnp.sin(x * y + 1.5) * y - x
    arg = jax.ShapeDtypeStruct(shape, jnp.float32)
    feats = F.extract(chain, arg, arg)
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (1, ops)
    assert feats["fusion_cost_squares"] == cost_squares


def _layers(shapes: list, scales: list):
    """`x @ w` then tanh and sine per layer, a weight of each shape, a scale per layer."""
    def fn(x, weights):
        for w, scale in zip(weights, scales):
            y = x @ w
            x = jnp.tanh(y) * scale + jnp.sin(y) * 0.25
        return x
    weights = [jax.ShapeDtypeStruct(shape, jnp.float32) for shape in shapes]
    return fn, (jax.ShapeDtypeStruct((8, shapes[0][0]), jnp.float32), weights)


@pytest.mark.parametrize("shapes, scales, distinct", [
    # XLA:CPU compiles a repeated kernel once (`bench/archive/kernel_reuse.py`: 0.5 ms per
    # repeated fusion, 7-14 ms per new one), so alike layers are one kernel ...
    ([(16, 16)] * 6, [0.5] * 6, 1),
    # ... but not with a weight of another shape, or a constant of their own inside
    ([(16 + i, 17 + i) for i in range(6)], [0.5] * 6, 6),
    ([(16, 16)] * 6, [0.5 + i / 100 for i in range(6)], 6),
])
def test_fusions_that_are_the_same_kernel_count_once(shapes, scales, distinct):
    fn, args = _layers(shapes, scales)
    feats = F.extract(fn, *args)
    assert feats["fusion_groups"] == 6
    assert feats["fusion_distinct"] == distinct
    # each layer's fusion: tanh and sine (4 each), two multiplies, their two scalars'
    # broadcasts and the add
    assert feats["fusion_distinct_cost"] == distinct * 13


def test_reshapes_same_type_converts_and_unit_broadcasts_are_bitcasts_on_xla_cpu():
    def bitcasts(x):
        n = jnp.arange(8) * 1.0 + 2.0  # weakly typed: converted to its own type below
        y = (x * jnp.asarray(n, dtype=jnp.float32)).reshape(64)[:, None]
        return y + 1.0
    # one fusion of 14 ops in StableHLO; XLA:CPU's holds 8 (it also drops the multiply
    # by one): the convert to f32 of an f32, two broadcasts that only add a unit
    # dimension and the reshape are bitcasts, counted for nothing here
    cpu = F.extract(bitcasts, X)
    assert (cpu["fusion_groups"], cpu["fusion_max_size"]) == (1, 10)
    assert cpu["fusion_cost_squares"] == 10 ** 2
    gpu = F.extract(bitcasts, X, backend="gpu")
    assert (gpu["fusion_groups"], gpu["fusion_max_size"]) == (1, 14)


def test_a_shared_sum_is_not_recomputed_when_a_path_to_a_user_runs_through_a_dot():
    def through_dot(x, y, w):
        p = x + y  # reads two arrays: XLA recomputes it only if it fuses on all paths
        return p * 2.0, p + (p * 3.0) @ w
    blocked = F.extract(through_dot, X, X, X)
    # p materialized once: {add}, {mul, broadcast}, {mul, broadcast} before the dot, {add}
    assert (blocked["fusion_groups"], blocked["fusion_max_size"]) == (4, 2)

    def no_dot(x, y, w):
        p = x + y
        return p * 2.0, p + p * 3.0
    free = F.extract(no_dot, X, X, X)
    # every user fuses on every path: p is recomputed in both output fusions,
    # {mul, broadcast, add} and {add, mul, broadcast, add}
    assert (free["fusion_groups"], free["fusion_max_size"]) == (2, 4)
    assert free["fusion_cost_squares"] == 3 ** 2 + 4 ** 2


def test_a_slice_taken_from_a_concatenate_reads_only_its_operand():
    def first_half(x):
        z = jnp.concatenate([x + 1.0, jnp.exp(x) * 2.0])
        return z[: x.shape[0]] * 3.0
    feats = F.extract(first_half, VEC)
    # XLA:CPU (jax 0.10.2): one fusion {add, mul} and their broadcasts, no exp; here also
    # the slice, which reads the add
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (1, 5)
    assert feats["fusion_cost_squares"] == 5 ** 2


def test_a_slice_of_math_over_a_concatenate_reads_the_whole_concatenate():
    def first_half(x):
        z = jnp.concatenate([x + 1.0, jnp.exp(x) * 2.0])
        return (z * 3.0)[: x.shape[0]]
    feats = F.extract(first_half, VEC)
    # XLA:CPU (jax 0.10.2) does not push the slice through the multiply: one fusion of
    # nine with the exp in it
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (1, 9)


def _stacked(x):
    return jnp.stack([jnp.sin(x) * 3.0, jnp.cos(x) * 4.0, jnp.exp(x), x * x], axis=-1)


def _two_readers(x):
    s = _stacked(x)
    return s * 2.0, s + 1.0


# the gradient of a loss over the stack slices the stack's cotangent four ways
_stack_loss_grad = jax.grad(lambda x, t: jnp.mean((_stacked(x) - t) ** 2))


@pytest.mark.parametrize("fn, args, groups", [
    # measured on XLA:CPU (jax 0.10.2), its fusions (and unfused ops) after optimization:
    # read by two ops, the stack is one fusion and each reader another
    (_two_readers, (VEC,), 3),
    # the loss's gradient: XLA computes the stack in one fusion, the gradient in a second
    # and the exp both share on its own
    (_stack_loss_grad, (VEC, f32(16, 4)), 3),
])
def test_xla_cpu_materializes_a_concatenate_read_more_than_once(fn, args, groups):
    feats = F.extract(fn, *args)
    assert feats["fusion_groups"] == groups
    assert feats["fusion_max_size"] < 35


def test_a_slice_reaching_no_concatenate_reads_the_whole_value():
    def halves(x, w):
        s = jnp.exp(x @ w)
        return s[:, :64] * 2.0, s[:, 64:] * 3.0
    feats = F.extract(halves, f32(8, 16), f32(16, 128))
    # XLA:CPU (jax 0.10.2) keeps one exp, {exp}, and {slice, mul, broadcast} per half;
    # taking each slice's piece of the exp made two fusions of four
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (3, 3)
    assert feats["fusion_cost_squares"] == 4 ** 2 + 3 ** 2 + 3 ** 2


def _gates(width, pieces=2, axis=1):
    def f(h, w):
        c = h * 2.0 + 1.0  # reads one array: recomputed wherever a fused user needs it
        return jnp.concatenate([c * float(3 + i) for i in range(pieces)], axis=axis) @ w
    rows = pieces * 4 if axis == 0 else 8
    return f, f32(rows // pieces if axis == 0 else 8, width), f32(
        width * (pieces if axis == 1 else 1), 16)


@pytest.mark.parametrize("width, pieces, axis, sizes", [
    # measured on XLA:CPU (jax 0.10.2), its fusions' ops other than parameters
    (32, 2, 1, [9]),        # 64 wide: the concatenate fuses with both pieces and c once
    (64, 2, 1, [6, 6]),     # 128 wide on the minor dimension: materialized, c in each piece
    (16, 9, 0, [6] * 9),    # more than 8 operands: materialized
])
def test_xla_cpu_materializes_wide_minor_and_many_operand_concatenates(width, pieces, axis,
                                                                       sizes):
    fn, h, w = _gates(width, pieces, axis)
    feats = F.extract(fn, h, w)
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (len(sizes), max(sizes))


def _gates_and_args(width, pieces, axis):
    fn, *args = _gates(width, pieces, axis)
    return fn, tuple(args)


@pytest.mark.parametrize("fn, args, sizes", [
    # measured on XLA:GPU (jax 0.10.2, deviceless H100), its fusions' ops other than
    # parameters: it fuses every concatenate XLA:CPU materializes
    (*_gates_and_args(64, 2, 1), [9]),
    (*_gates_and_args(16, 9, 0), [23]),
    (_two_readers, (VEC,), [11, 11]),  # the stack computed in each reader's fusion
    (_stack_loss_grad, (VEC, f32(16, 4)), [29]),
])
def test_xla_gpu_fuses_the_concatenates_xla_cpu_materializes(fn, args, sizes):
    feats = F.extract(fn, *args, backend="gpu", target="h100")
    assert feats["fusion_groups"] == len(sizes)
    if len(sizes) == 1:  # here broadcasts XLA's CSE merges count once per use
        assert sizes[0] <= feats["fusion_max_size"] <= 1.5 * sizes[0]


def _dot(lhs_contracting, rhs_contracting, batch=((), ())):
    return lambda a, b: lax.dot_general(a, b, ((lhs_contracting, rhs_contracting), batch))


@pytest.mark.parametrize("fn, shapes, copied", [
    # measured on XLA:CPU (jax 0.10.2): which operands its optimized module transposes
    (_dot((1, 2), (0, 1)), ((64, 8, 4), (8, 4, 48)), 0),   # m k1 k2 . k1 k2 n
    (_dot((0, 1), (0, 1)), ((8, 4, 64), (8, 4, 48)), 1),   # k1 k2 m: lhs copied
    (_dot((1,), (2,)), ((64, 32), (6, 8, 32)), 1),         # n1 n2 k: rhs copied
    (_dot((1,), (0,)), ((64, 32), (32, 6, 8)), 0),         # k n1 n2
    (_dot((0,), (0,)), ((32, 8, 8), (32, 48)), 1),         # k m1 m2: lhs copied
    (_dot((0,), (0,)), ((32, 64), (32, 48)), 0),           # km,kn: a layout only
])
def test_dot_operands_are_copied_where_xla_cpu_copies_them(fn, shapes, copied):
    assert F.extract(fn, *(f32(*s) for s in shapes))["layout_transposes"] == copied


def test_a_copied_dot_operand_takes_its_producers_into_the_copy_once():
    def two_dots(x, a, b):
        y = x * 2.0 + 1.0  # both dots contract its two leading dimensions: one copy
        contract = (((0, 1), (0, 1)), ((), ()))
        return lax.dot_general(y, a, contract), lax.dot_general(y, b, contract)

    feats = F.extract(two_dots, f32(8, 4, 16), f32(8, 4, 5), f32(8, 4, 6))
    # XLA: one fusion {transpose, multiply, broadcast, add, broadcast} feeds both dots
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (1, 5)


def test_fusion_runs_through_inner_jits_as_xla_inlines_them():
    inner = jax.jit(lambda x: x * 2.0 + 1.0)
    plain = F.extract(lambda x: jnp.abs(jnp.abs(x * 2.0 + 1.0) - 3.0), X)
    called = F.extract(lambda x: jnp.abs(jnp.abs(inner(x)) - 3.0), X)
    assert called["hlo_calls"] == 1
    # one fusion of 8 ops either way: the call does not cut the chain
    assert (called["fusion_groups"], called["fusion_max_size"]) == (1, 8)
    assert (plain["fusion_groups"], plain["fusion_max_size"]) == (1, 8)


def test_equal_ops_are_merged_before_fusing():
    def twice(x):
        return jnp.sin(x * 2.0) + jnp.sin(x * 2.0)
    def once(x):
        s = jnp.sin(x * 2.0)
        return s + s
    # XLA's CSE makes the two one module: a fusion of broadcast, multiply, sin and add
    assert F.extract(twice, X)["fusion_max_size"] == F.extract(once, X)["fusion_max_size"] == 4

    def complex_twice(z):  # constants whose values the bindings cannot hand out
        return z * (2.0 + 0j) + z * (2.0 + 0j) + (3.0 + 1j)
    feats = F.extract(complex_twice, jax.ShapeDtypeStruct((8,), jnp.complex64))
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (1, 5)


def _switch_step(grid, pos, direction, action):
    """A vmapped `lax.switch` of three moves over a grid world's state (RL environments'
    step): each branch changes some leaves, and the batched switch selects every leaf."""
    def one(grid, pos, direction, action):
        state = {"grid": grid, "pos": pos, "dir": direction, "x0": direction, "x1": direction + 1}

        def branch(k):
            def move(s):
                s = dict(s)
                s["dir"] = (s["dir"] + k) % 4
                s["pos"] = jnp.clip(s["pos"] + k, 0, 8)
                s[f"x{k % 2}"] = s[f"x{k % 2}"] * 2
                s["grid"] = s["grid"].at[s["pos"][0], s["pos"][1]].set(k)
                return s
            return move
        return jax.lax.switch(action, [branch(k) for k in range(3)], state)
    return jax.vmap(one)(grid, pos, direction, action)


def _switch_rollout(grid, pos, direction, actions):
    """`_switch_step` as a jitted function called in a scan's body: the walker fuses its
    ops in place of the call (XLA inlines calls before fusing)."""
    step = jax.jit(_switch_step)

    def body(carry, action):
        out = step(*carry, action)
        return (out["grid"], out["pos"], out["dir"]), None
    return lax.scan(body, (grid, pos, direction), actions)[0]


_SWITCH_STATE = [jax.ShapeDtypeStruct((8, 9, 9), jnp.uint8),
                 jax.ShapeDtypeStruct((8, 2), jnp.int32), jax.ShapeDtypeStruct((8,), jnp.int32)]


@pytest.mark.parametrize("fn, action, selects, fused_ops, groups", [
    # XLA's fusions of the step hold 148 ops (jax 0.10.2, dumped 2026-12-07); counting
    # every select the emulator made 206 of them
    (_switch_step, (8,), 37, 142, 11),
    # in a callee the selects were kept until schema 19: 185 ops in 14 fusions; XLA's
    # fusions hold 0.93x the step's ops here, the emulator's 0.90x
    (_switch_rollout, (5, 8), 27, 128, 11),
])
def test_a_select_of_one_value_on_both_sides_is_that_value(fn, action, selects, fused_ops,
                                                           groups):
    """A batched switch writes `select(p, x, x)` for each leaf a branch leaves alone, and
    XLA's simplifier drops it before fusing; so does the emulator, in a block and in a
    callee it fuses in place, and what computed only their predicate is dead."""
    args = [*_SWITCH_STATE, jax.ShapeDtypeStruct(action, jnp.int32)]
    feats = F.extract(fn, *args)
    assert feats["op_select"] == selects  # the program's text keeps them
    assert feats["fusion_groups"] == groups
    assert feats["fusion_groups"] * feats["fusion_mean_size"] == pytest.approx(fused_ops)
