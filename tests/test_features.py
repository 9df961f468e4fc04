"""Feature extraction: closed-form counts on tiny programs; the text guard. (Fusions:
`test_fusion_features.py`, `test_xla_cpu_fusions.py`.)"""

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from feature_programs import X, unrolled
from jax import lax

from costmodel import features as F
from costmodel.features.sharding import PLACEMENT_INPUTS
from costmodel.features.text_guard import longest_operator_run, nesting_depth


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
    source = feats.info["repeated_block"]["source"]  # the user's frame: where the loop is
    assert source.startswith(unrolled.__code__.co_filename + ":")
    assert source.endswith("(unrolled.<locals>.f)")


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
