"""Which category each StableHLO op and each jaxpr primitive belongs to."""

from __future__ import annotations

_ELEMENTWISE_HLO = {
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "complex", "convert",
    "cosine", "count_leading_zeros", "divide", "exponential", "exponential_minus_one",
    "floor", "imag", "is_finite", "log", "log_plus_one", "logistic", "maximum", "minimum",
    "multiply", "negate", "not", "or", "popcnt", "power", "real", "reduce_precision",
    "remainder", "round_nearest_afz", "round_nearest_even", "rsqrt", "select",
    "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign", "sine", "sqrt",
    "subtract", "tan", "tanh", "xor", "bitcast_convert", "erf_inv", "erf",
}
_DATA_MOVEMENT_HLO = {
    "broadcast_in_dim", "broadcast", "reshape", "transpose", "slice", "dynamic_slice",
    "dynamic_update_slice", "concatenate", "pad", "iota", "reverse", "get_tuple_element",
    "tuple", "optimization_barrier", "dynamic_broadcast_in_dim", "get_dimension_size",
    "real_dynamic_slice", "dynamic_reshape", "dynamic_iota", "dynamic_pad",
}
_HLO_CATEGORY: dict[str, str] = {}
for _name in _ELEMENTWISE_HLO:
    _HLO_CATEGORY[_name] = "elementwise"
for _name in _DATA_MOVEMENT_HLO:
    _HLO_CATEGORY[_name] = "data_movement"
_HLO_CATEGORY.update({
    "dot_general": "dot", "dot": "dot",
    "convolution": "conv",
    "reduce": "reduce", "reduce_window": "reduce", "select_and_scatter": "reduce",
    "reduce_scatter": "collective", "all_reduce": "collective", "all_gather": "collective",
    "all_to_all": "collective", "collective_permute": "collective",
    "collective_broadcast": "collective", "partition_id": "collective",
    "replica_id": "collective",
    "gather": "gather_scatter", "scatter": "gather_scatter", "sort": "gather_scatter",
    "dynamic_gather": "gather_scatter",
    "while": "control_flow", "case": "control_flow", "if": "control_flow",
    "call": "control_flow", "return": "control_flow",
    "custom_call": "linalg", "triangular_solve": "linalg", "cholesky": "linalg",
    "fft": "linalg",
    "rng_bit_generator": "random", "rng": "random",
    "constant": "constant",
})

# Structural ops that are not computation; counted in no category.
HLO_STRUCTURAL = {"func.func", "func.return", "stablehlo.return", "builtin.module"}

_JAXPR_CATEGORY: dict[str, str] = {}
for _prim in (
    "abs add and atan2 cbrt ceil clamp complex conj convert_element_type cos cosh "
    "div eq erf erf_inv erfc exp exp2 expm1 floor ge gt imag integer_pow is_finite le "
    "lgamma digamma log log1p logistic lt max min mul ne neg nextafter not or pow real "
    "rem round rsqrt select_n shift_left shift_right_arithmetic shift_right_logical sign "
    "sin sinh sqrt square stop_gradient sub tan tanh xor copy copy_p reduce_precision "
    "clz population_count acos asin atan acosh asinh atanh bitcast_convert_type"
).split():
    _JAXPR_CATEGORY[_prim] = "elementwise"
for _prim in (
    "broadcast_in_dim reshape transpose slice dynamic_slice dynamic_update_slice "
    "concatenate pad iota rev squeeze expand_dims split tie_in"
).split():
    _JAXPR_CATEGORY[_prim] = "data_movement"
_JAXPR_CATEGORY.update({
    "dot_general": "dot", "ragged_dot_general": "dot",
    "conv_general_dilated": "conv",
    "reduce_sum": "reduce", "reduce_max": "reduce", "reduce_min": "reduce",
    "reduce_prod": "reduce", "reduce_and": "reduce", "reduce_or": "reduce",
    "reduce_xor": "reduce", "argmax": "reduce", "argmin": "reduce", "reduce": "reduce",
    "reduce_window_sum": "reduce", "reduce_window_max": "reduce",
    "reduce_window_min": "reduce", "reduce_window": "reduce", "cumsum": "reduce",
    "cumprod": "reduce", "cummax": "reduce", "cummin": "reduce", "cumlogsumexp": "reduce",
    "select_and_scatter_add": "reduce", "select_and_gather_add": "reduce",
    "gather": "gather_scatter", "scatter": "gather_scatter", "scatter-add": "gather_scatter",
    "scatter_add": "gather_scatter", "scatter_mul": "gather_scatter",
    "scatter_min": "gather_scatter", "scatter_max": "gather_scatter", "sort": "gather_scatter",
    "dynamic_gather": "gather_scatter",
    "scan": "control_flow", "while": "control_flow", "cond": "control_flow",
    "jit": "control_flow", "pjit": "control_flow", "closed_call": "control_flow",
    "core_call": "control_flow", "remat": "control_flow", "remat2": "control_flow",
    "checkpoint": "control_flow", "custom_jvp_call": "control_flow",
    "custom_vjp_call": "control_flow", "custom_vjp_call_jaxpr": "control_flow",
    "custom_lin": "control_flow",
    "cholesky": "linalg", "triangular_solve": "linalg", "lu": "linalg", "qr": "linalg",
    "eigh": "linalg", "eig": "linalg", "svd": "linalg", "householder_product": "linalg",
    "lu_pivots_to_permutation": "linalg", "schur": "linalg", "hessenberg": "linalg",
    "tridiagonal": "linalg", "tridiagonal_solve": "linalg", "fft": "linalg",
    "geqrf": "linalg", "orgqr": "linalg",
    "random_bits": "random", "random_seed": "random", "random_wrap": "random",
    "random_unwrap": "random", "random_split": "random", "random_fold_in": "random",
    "threefry2x32": "random", "rng_bit_generator": "random", "rng_uniform": "random",
    "psum": "collective", "pmax": "collective", "pmin": "collective",
    "all_gather": "collective", "all_to_all": "collective", "ppermute": "collective",
    "reduce_scatter": "collective", "axis_index": "collective", "psum_scatter": "collective",
})


def hlo_category(op_name: str) -> str | None:
    """Category of a StableHLO op given its short name (`add`), or None if unknown."""
    return _HLO_CATEGORY.get(op_name)


def jaxpr_category(primitive: str) -> str | None:
    """Category of a jaxpr primitive name, or None if unknown."""
    return _JAXPR_CATEGORY.get(primitive)


# Elementwise-like ops that XLA fuses into loop fusions with their neighbours.
FUSIBLE_HLO = frozenset(_ELEMENTWISE_HLO | {"broadcast_in_dim", "reshape", "convert", "iota",
                                            "transpose", "slice", "concatenate", "pad",
                                            "reverse", "dynamic_slice"})
# Fusible ops that change how elements are indexed (strided, padded, stitched, reversed):
# XLA:GPU composes and simplifies an index map through each of them.
INDEXING_HLO = frozenset({"slice", "pad", "concatenate", "reverse", "dynamic_slice"})
# Fusible ops that read their operands at their own index (a transpose: at a permutation of
# it), so XLA's emitter computes an operand once for all of them.
SAME_INDEX_HLO = frozenset(_ELEMENTWISE_HLO | {"convert", "transpose"})
# Fusible ops XLA's elemental emitter computes in basic blocks of their own, whose values it
# cannot reuse: XLA:CPU fuses one only where it is read once, at one index, and materializes
# it when it has more users, when its user was duplicated into several fusions, or when
# its fusion reads it through several slices (seen on jax 0.10.2: a `jnp.stack` read by two
# ops; the stack of a loss's outputs, which the loss's gradient slices apart).
SINGLE_USE_HLO = frozenset({"concatenate", "pad"})
# Elementwise ops that expand to many machine instructions.
EXPENSIVE_HLO = frozenset({
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "tanh",
    "sine", "cosine", "tan", "power", "sqrt", "rsqrt", "cbrt", "divide", "remainder",
    "atan2", "erf", "erf_inv",
})
# Those XLA will not duplicate into several consumers' fusions. Seen on the CPU (jax
# 0.10.2): `(f(x) * 2, f(x) * x + 1)` keeps one exp, tanh, log, sqrt, rsqrt or divide
# and computes sine and cosine twice.
UNDUPLICATED_HLO = EXPENSIVE_HLO - {"sine", "cosine"}
