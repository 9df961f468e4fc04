"""Feature extraction: closed-form counts on tiny programs."""

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from costmodel import features as F
from costmodel.features.constant_folding import EVALUATOR_SHARE
from costmodel.features.sharding import PLACEMENT_INPUTS
from costmodel.features.text_guard import longest_operator_run, nesting_depth

X = jax.ShapeDtypeStruct((8, 8), jnp.float32)


def unrolled(steps):
    def f(x):
        for _ in range(steps):
            x = jnp.sin(x) * 2.0 + x
        return x
    return f


def test_unrolled_loop_counts_and_repeated_block():
    feats = F.extract(unrolled(10), X)
    # each step: sin, mul, add in the jaxpr; + constant and broadcast_in_dim in StableHLO
    assert feats["jaxpr_eqns"] == 30
    assert feats["jaxpr_repeat_block_size"] == 3
    assert feats["jaxpr_repeat_count"] == 10
    assert feats["hlo_ops"] == 50
    assert feats["op_sine"] == 10
    assert feats["cat_elementwise"] == 30
    assert feats["while_count"] == 0
    assert feats.info["repeated_block"]["source"].startswith(__file__.rsplit("/", 1)[-1]) or \
        "test_features.py" in feats.info["repeated_block"]["source"]


def test_scan_weights_body_by_trip_count():
    def f(x):
        def body(c, _):
            return jnp.cos(jnp.sin(c) * 3.0), None
        return lax.scan(body, x, None, length=7)[0]
    feats = F.extract(f, X)
    # scan of length 7 over a 3-equation body
    assert feats["jaxpr_eqns"] == 4
    assert feats["jaxpr_eqns_weighted"] == 21
    assert feats["jaxpr_scan_max_length"] == 7
    assert feats["while_count"] == 1
    assert feats["while_trip_max"] == 7
    assert feats["while_trip_unknown"] == 0
    assert feats["while_total_iterations"] == 7


def test_nested_scans_depth_and_total_iterations():
    def f(x):
        def inner(c, _):
            return jnp.sin(c), None
        def outer(c, _):
            return lax.scan(inner, c, None, length=5)[0], None
        return lax.scan(outer, x, None, length=3)[0]
    feats = F.extract(f, X)
    assert feats["jaxpr_max_depth"] == 2
    assert feats["jaxpr_eqns_weighted"] == 15
    assert feats["while_max_depth"] == 2
    assert feats["while_trip_max"] == 5
    assert feats["while_total_iterations"] == 3 + 3 * 5


def test_while_loop_with_data_dependent_trip_is_unknown():
    def f(x):
        return lax.while_loop(lambda c: jnp.sum(c) < 100.0, lambda c: c * 2.0, x)
    feats = F.extract(f, X)
    assert feats["jaxpr_while_count"] == 1
    assert feats["while_count"] == 1
    assert feats["while_trip_unknown"] == 1


def test_dot_flops_closed_form():
    a = jax.ShapeDtypeStruct((10, 30), jnp.float32)
    b = jax.ShapeDtypeStruct((30, 5), jnp.float32)
    feats = F.extract(lambda x, y: x @ y, a, b)
    assert feats["dot_flops"] == 2 * 10 * 30 * 5
    assert feats["op_dot_general"] == 1
    assert feats["input_bytes"] == (10 * 30 + 30 * 5) * 4
    assert feats["output_bytes"] == 10 * 5 * 4
    assert feats["param_count"] == 2


def test_conv_flops_closed_form():
    img = jax.ShapeDtypeStruct((1, 3, 8, 8), jnp.float32)   # NCHW
    ker = jax.ShapeDtypeStruct((4, 3, 3, 3), jnp.float32)   # OIHW
    feats = F.extract(lambda x, k: lax.conv(x, k, (1, 1), "SAME"), img, ker)
    # output 1x4x8x8, each output element a 3x3x3 dot product
    assert feats["conv_flops"] == 2 * (1 * 4 * 8 * 8) * (3 * 3 * 3)


def test_captured_constants_bytes():
    table = np.arange(1000, dtype=np.float32)
    feats = F.extract(lambda x: x + table, jax.ShapeDtypeStruct((1000,), jnp.float32))
    assert feats["dense_constant_bytes"] == 4000
    assert feats["largest_constant_bytes"] == 4000
    assert feats["jaxpr_const_bytes"] == 4000


def test_inner_jit_and_inlining():
    inner = jax.jit(lambda a: jnp.tanh(a) * 2.0)
    def f(x):
        return inner(inner(x))
    feats = F.extract(f, X)
    assert feats["jaxpr_inner_jit_count"] == 2
    assert feats["hlo_calls"] == 2
    # one private function, called twice: the inlined count holds its body twice
    body = feats["hlo_ops_inlined"] - (feats["hlo_ops"] - feats["hlo_calls"])
    assert feats["hlo_ops_inlined"] > feats["hlo_ops"]
    assert body >= 0


def test_remat_custom_jvp_and_dtypes():
    @jax.custom_jvp
    def g(x):
        return jnp.sin(x)
    g.defjvp(lambda p, t: (g(p[0]), jnp.cos(p[0]) * t[0]))
    def f(x):
        return jax.checkpoint(lambda y: g(y) * 2.0)(x).sum()
    feats = F.extract(f, X)
    assert feats["jaxpr_remat_count"] == 1
    assert feats["jaxpr_custom_jvp_count"] == 1
    c = jax.ShapeDtypeStruct((4,), jnp.complex64)
    assert F.extract(lambda z: z * z, c)["complex_ops"] == 1


def test_extract_and_from_stablehlo_give_identical_model_inputs():
    def f(x, w):
        def body(c, _):
            return jnp.tanh(c @ w), None
        return lax.scan(body, x, None, length=4)[0].sum()
    w = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    via_jax = F.extract(jax.grad(f), X, w)
    text = jax.jit(jax.grad(f)).lower(X, w).as_text()
    via_text = F.from_stablehlo(text)
    assert via_jax.model_inputs() == via_text.model_inputs()
    # the schema's features, then the placement's (which only the TPU model reads)
    assert list(via_jax.model_inputs()) == [*F.MODEL_FEATURES, *PLACEMENT_INPUTS]
    assert via_text.model_inputs()["chips"] == 1.0
    assert all(math.isnan(via_text[name]) for name in F.JAXPR_FEATURES)


def test_accepts_jitted_function_with_static_args_and_concrete_arrays():
    f = jax.jit(lambda x, n: x * n, static_argnums=1)
    feats = F.extract(f, jnp.ones((3,)), 4)
    assert feats["op_multiply"] == 1


@pytest.mark.parametrize("bad", [
    "", "module {", "not mlir at all", "func.func @main() { %0 = stablehlo.add }",
    "module { func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> { return %b : tensor<2xf32> } }",
])
def test_malformed_stablehlo_raises_named_error(bad):
    with pytest.raises(F.StableHLOParseError):
        F.from_stablehlo(bad)


def test_unknown_backend_and_target_are_rejected_with_known_ones_listed():
    text = jax.jit(jnp.sin).lower(X).as_text()
    with pytest.raises(F.UnknownTargetError, match="cpu, gpu, tpu"):
        F.from_stablehlo(text, backend="ipu")
    with pytest.raises(F.UnknownTargetError, match="h100"):
        F.from_stablehlo(text, backend="gpu", target="v100")
    assert F.from_stablehlo(text, backend="gpu").target == "h100"


def test_features_to_dict_is_versioned_and_complete():
    d = F.extract(jnp.sin, X).to_dict()
    assert d["schema_version"] == F.SCHEMA_VERSION
    assert set(F.ALL_FEATURES) <= set(d)
    assert d["backend"] == "cpu"


def test_every_tally_field_combines_by_its_one_declared_rule():
    from collections import Counter

    from costmodel.features.stablehlo import tally as T
    from costmodel.features.stablehlo.combine import combine

    names = [f.name for f in T.FIELDS]
    assert len(names) == len(set(names)) and set(T.Tally.__slots__) == set(names)
    fed = [f.inlined for f in T.FIELDS if f.inlined] + [f.total for f in T.FIELDS if f.total]
    assert len(fed) == len(set(fed)) and set(fed) <= set(F.STABLEHLO_FEATURES)
    # caller and callee values of each empty type; the callee runs 3 times inside 2 loops
    mine = {int: 2, float: 1.5, Counter: Counter(a=1), list: [[1, 1.0, 0]], set: {1}}
    theirs = {int: 5, float: 2.0, Counter: Counter(a=2, b=1), list: [[2, 2.0, 1]], set: {2}}
    expected = {
        T.added: lambda a, b: a + b, T.trip_weighted: lambda a, b: a + 3.0 * b,
        T.larger: max, T.deeper_by_loops: lambda a, b: max(a, 2 + b),
        T.deeper_by_one: lambda a, b: max(a, 1 + b),
        T.merged: lambda a, b: a + b, T.appended: lambda a, b: a + b,
    }
    caller, callee = T.Tally(), T.Tally()
    for f in T.FIELDS:
        assert getattr(caller, f.name) == f.empty()
        setattr(caller, f.name, mine.get(f.empty, f.empty()))
        setattr(callee, f.name, theirs.get(f.empty, f.empty()))
    caller.calls, callee.calls = [T.Call("callee", 3.0, 2)], []
    combined = combine("main", {"main": caller, "callee": callee}, {})
    assert list(combined) == [f.name for f in T.ALONG_CALLS]
    for f in T.ALONG_CALLS:
        assert combined[f.name] == expected[f.along](mine[f.empty], theirs[f.empty]), f.name
    assert caller.histogram == Counter(a=1)  # the caller's own tally is kept
    totals = T.module_totals({"main": caller, "callee": callee})
    module_rules = {sum: lambda a, b: a + b, max: max, T.distinct: lambda a, b: len(a | b),
                    T.count_items: lambda a, b: len(a) + len(b),
                    T.merged_counts: lambda a, b: a + b}
    for f in T.OVER_MODULE:
        own = [getattr(caller, f.name), getattr(callee, f.name)]
        assert totals[f.name] == module_rules[f.over_module](*own), f.name


def test_unknown_ops_are_counted_not_dropped():
    text = """module {
      func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
        %0 = stablehlo.cbrt %a : tensor<4xf32>
        %1 = "mystery.op"(%0) : (tensor<4xf32>) -> tensor<4xf32>
        %2 = call @f(%1) : (tensor<4xf32>) -> tensor<4xf32>
        return %2 : tensor<4xf32>
      }
      func.func private @f(%a: tensor<4xf32>) -> tensor<4xf32> {
        %0 = "mystery.op"(%a) : (tensor<4xf32>) -> tensor<4xf32>
        return %0 : tensor<4xf32>
      }
    }"""
    from costmodel.features.stablehlo import _context
    from costmodel.features.stablehlo.ops import HANDLERS

    assert "mystery.op" not in HANDLERS
    _context().allow_unregistered_dialects = True
    try:
        feats = F.from_stablehlo(text)
    finally:
        _context().allow_unregistered_dialects = False
    # counted by its full name, as an op of no category, and as a kernel of its own
    assert feats.info["op_histogram"] == {"call": 1, "cbrt": 1, "mystery.op": 2}
    assert {name: feats[name] for name in ("hlo_ops", "unknown_ops", "cat_elementwise",
                                           "cat_control_flow", "sequence_kernels_max",
                                           "fusion_groups", "chain_length")} == {
        "hlo_ops": 4, "unknown_ops": 2, "cat_elementwise": 1, "cat_control_flow": 1,
        "sequence_kernels_max": 3, "fusion_groups": 1, "chain_length": 4}


def test_a_chain_of_400_calls_is_walked_within_the_recursion_limit():
    # flat text the nesting guard passes; each call costs the walk two Python frames
    # (~490 calls fit), a handler that recursed itself would cost three (~320)
    depth = 400
    funcs = [f"""func.func private @f{i}(%a: tensor<4xf32>) -> tensor<4xf32> {{
        %0 = call @f{i + 1}(%a) : (tensor<4xf32>) -> tensor<4xf32>
        return %0 : tensor<4xf32>
      }}""" for i in range(depth)]
    funcs[-1] = funcs[-1].replace(f"call @f{depth}(%a) : (tensor<4xf32>) -> tensor<4xf32>",
                                  "stablehlo.sine %a : tensor<4xf32>")
    text = "module {\n" + "\n".join(funcs).replace("private @f0", "@main") + "\n}"
    feats = F.from_stablehlo(text)
    assert feats["hlo_max_call_depth"] == depth - 1
    assert feats["hlo_ops_inlined"] == depth


def test_prng_key_dtypes_do_not_break_extraction():
    def f(seed):
        key = jax.random.key(seed)
        for _ in range(3):
            key, _ = jax.random.split(key)
        return jax.random.key_data(key)
    feats = F.extract(f, jax.ShapeDtypeStruct((), jnp.uint32))
    assert feats["jaxpr_cat_random"] >= 3


def test_deeply_nested_text_is_refused_before_the_parser_sees_it():
    text = "module {" + "(" * 5000 + ")" * 5000 + "}"
    with pytest.raises(F.RefusedText, match="nests 5001 levels deep; at most 256"):
        F.from_stablehlo(text)
    real = jax.jit(lambda x: lax.scan(lambda c, _: (jnp.sin(c), None), x, None, length=3)[0])
    assert nesting_depth(real.lower(X).as_text()) < F.MAX_NESTING // 4


@pytest.mark.parametrize("text, depth", [
    ("{ ( [ < > ] ) }", 4),
    ("func(%a) -> tensor<4xf32> {}", 1),          # `->` closes nothing
    ('{ "{{{((" }', 1),                           # brackets inside a string do not count
    (r'{ "a \" {{{" }', 1),                      # an escaped quote does not end the string
    (r'{ "a \\" { }', 2),                       # an escaped backslash does: the { counts
    ('{ "unterminated {{{{', 1),                  # an open string runs to the end
    ("", 0),
])
def test_nesting_depth_counts_brackets_outside_strings(text, depth):
    assert nesting_depth(text) == depth


def test_nesting_guard_is_linear_on_escaped_quotes():
    # A run of \" kept a regex restarting at every quote: 20 KB took 2 s, 360 KB a minute.
    hostile = '"' + '\\"' * 500_000            # 1 MB
    start = time.perf_counter()
    assert nesting_depth(hostile) == 0
    assert time.perf_counter() - start < 0.1


@pytest.mark.parametrize("text, message", [
    ("module {\ud800}", "not valid Unicode: a lone surrogate at character 8"),
    ("module {\x00}", "contains a NUL character at position 8"),
])
def test_text_the_parser_cannot_take_is_refused(text, message):
    with pytest.raises(F.RefusedText, match=message):
        F.from_stablehlo(text)


AFFINE_UNARY = ("module attributes {x.m = affine_map<(d0) -> (" + "- " * 20000 + "d0)>} {\n"
                "func.func @main(%a: tensor<f32>) -> tensor<f32> {\n  return %a : tensor<f32>\n}\n}")
AFFINE_TERMS = AFFINE_UNARY.replace("- " * 20000, "d0" + " + d0" * 200_000 + " + ")


@pytest.mark.parametrize("text, message", [
    # each crashed the MLIR parser (C stack overflow, SIGSEGV) before the guard refused it
    (AFFINE_UNARY, "holds an affine_map at byte 25; affine maps and sets are not StableHLO"),
    (AFFINE_TERMS, "holds an affine_map at byte 25"),
    (AFFINE_UNARY.replace("affine_map<", "affine_set <"), "holds an affine_set at byte 25"),
    (AFFINE_UNARY.replace("affine_map<(d0) -> (", "dense<"), "holds a run of 20000 \\+/- signs; "
     "at most 64 in a row are accepted"),
], ids=["unary minuses", "200k terms", "affine_set", "sign run"])
def test_affine_maps_and_operator_runs_are_refused_before_the_parser_sees_them(text, message):
    start = time.perf_counter()
    with pytest.raises(F.RefusedText, match=message):
        F.from_stablehlo(text)
    assert time.perf_counter() - start < 0.5


def test_the_affine_guard_spares_names_strings_and_signs():
    text = jax.jit(lambda x: -jnp.negative(x) + 1.0).lower(X).as_text()
    # a string attribute and an SSA name may spell the keyword; a few signs are fine
    text = text.replace("attributes {", 'attributes {x.s = "affine_map<(d0) -> (' + "- " * 100
                        + 'd0)>", ', 1)
    text = text.replace("%arg0", "%affine_map")
    assert "affine_map" in text
    feats = F.from_stablehlo(text)
    assert feats["hlo_ops"] == F.from_stablehlo(jax.jit(lambda x: -jnp.negative(x) + 1.0).lower(X)
                                                .as_text())["hlo_ops"]
    assert longest_operator_run(np.frombuffer(b"x = - - -1 -> +\n+ - y", np.uint8)) == 3


@pytest.mark.parametrize("element, width", [("f64", 8), ("f32", 4), ("bf16", 2), ("f8E4M3FN", 1),
                                            ("i64", 8), ("complex<f64>", 16)])
def test_tensor_bytes_per_element_type(element, width):
    # f64 once matched the f6* prefix of the 6-bit float types and counted 1 byte
    text = jax.jit(lambda x: x).lower(jax.ShapeDtypeStruct((5, 3), jnp.float32)).as_text()
    feats = F.from_stablehlo(text.replace("f32", element))
    assert feats["input_bytes"] == feats["output_bytes"] == 15 * width


VEC = jax.ShapeDtypeStruct((16,), jnp.float32)
MAT = jax.ShapeDtypeStruct((16, 16), jnp.float32)
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


def _f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


@pytest.mark.parametrize("fn, args, expected", [
    (_conv(("NHWC", "HWIO", "NHWC")), (_f32(4, 16, 16, 8), _f32(3, 3, 8, 8)), 0),
    (_conv(("NCHW", "OIHW", "NCHW")), (_f32(4, 8, 16, 16), _f32(8, 8, 3, 3)), 3),
    (_conv(("NHWC", "OIHW", "NHWC")), (_f32(4, 16, 16, 8), _f32(8, 8, 3, 3)), 1),
    # both gradient convolutions of a channels-last one batch over features or spatial dims
    (jax.grad(lambda x, w: _conv(("NHWC", "HWIO", "NHWC"))(x, w).sum(), argnums=(0, 1)),
     (_f32(4, 16, 16, 8), _f32(3, 3, 8, 8)), 4),
    (lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k), (_f32(2, 8, 4, 16),) * 2, 2),
    (lambda q, k: jnp.einsum("bhqd,bhkd->bhqk", q, k), (_f32(2, 4, 8, 16),) * 2, 0),
    (lambda a, b: jnp.einsum("km,kn->mn", a, b), (_f32(8, 4), _f32(8, 5)), 0),
    (lambda a, v: jnp.einsum("mkn,k->mn", a, v), (_f32(3, 8, 5), _f32(8)), 1),
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


def test_sine_is_recomputed_in_each_fusion_but_exp_is_not():
    # XLA:CPU computes a shared sine in each consumer's fusion, a shared exp once
    sine = F.extract(_shared_then_split(jnp.sin), X, X)
    # {sin, sin} before the dot and {mul, broadcast, sin} for the output
    assert (sine["fusion_groups"], sine["fusion_max_size"]) == (2, 3)
    assert sine["fusion_cost_squares"] == 8 ** 2 + 6 ** 2


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
    (_stack_loss_grad, (VEC, _f32(16, 4)), 3),
])
def test_xla_cpu_materializes_a_concatenate_read_more_than_once(fn, args, groups):
    feats = F.extract(fn, *args)
    assert feats["fusion_groups"] == groups
    assert feats["fusion_max_size"] < 35


def test_a_slice_reaching_no_concatenate_reads_the_whole_value():
    def halves(x, w):
        s = jnp.exp(x @ w)
        return s[:, :64] * 2.0, s[:, 64:] * 3.0
    feats = F.extract(halves, _f32(8, 16), _f32(16, 128))
    # XLA:CPU (jax 0.10.2) keeps one exp, {exp}, and {slice, mul, broadcast} per half;
    # taking each slice's piece of the exp made two fusions of four
    assert (feats["fusion_groups"], feats["fusion_max_size"]) == (3, 3)
    assert feats["fusion_cost_squares"] == 4 ** 2 + 3 ** 2 + 3 ** 2


def _gates(width, pieces=2, axis=1):
    def f(h, w):
        c = h * 2.0 + 1.0  # reads one array: recomputed wherever a fused user needs it
        return jnp.concatenate([c * float(3 + i) for i in range(pieces)], axis=axis) @ w
    rows = pieces * 4 if axis == 0 else 8
    return f, _f32(rows // pieces if axis == 0 else 8, width), _f32(
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
    (_stack_loss_grad, (VEC, _f32(16, 4)), [29]),
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
    assert F.extract(fn, *(_f32(*s) for s in shapes))["layout_transposes"] == copied


def test_a_copied_dot_operand_takes_its_producers_into_the_copy_once():
    def two_dots(x, a, b):
        y = x * 2.0 + 1.0  # both dots contract its two leading dimensions: one copy
        contract = (((0, 1), (0, 1)), ((), ()))
        return lax.dot_general(y, a, contract), lax.dot_general(y, b, contract)

    feats = F.extract(two_dots, _f32(8, 4, 16), _f32(8, 4, 5), _f32(8, 4, 6))
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
