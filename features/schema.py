"""The feature schema: stable, ordered feature names and the `Features` record.

A model records `SCHEMA_VERSION` and refuses features of another version, so any
change to the names below, their order or their meaning must bump it; a version that
only appended features (`ADDED`) leaves the models of the one before readable.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# What each version changed: CHANGELOG.md.
SCHEMA_VERSION = 19

# Coarse op categories shared by the jaxpr and StableHLO extractors.
CATEGORIES = (
    "elementwise",
    "data_movement",
    "dot",
    "conv",
    "reduce",
    "gather_scatter",
    "control_flow",
    "linalg",
    "random",
    "collective",
    "constant",
)

# StableHLO ops whose individual counts are model inputs (the rest are counted by category).
HISTOGRAM_OPS = (
    "add", "multiply", "subtract", "divide", "maximum", "minimum", "exponential", "log",
    "tanh", "logistic", "sqrt", "rsqrt", "power", "sine", "cosine", "select", "compare",
    "convert", "negate", "abs", "and", "or", "broadcast_in_dim", "reshape", "transpose",
    "slice", "dynamic_slice", "dynamic_update_slice", "concatenate", "pad", "iota",
    "dot_general", "convolution", "reduce", "reduce_window", "select_and_scatter", "gather",
    "scatter", "sort", "while", "case", "if", "custom_call", "rng_bit_generator", "fft",
    "triangular_solve", "cholesky", "constant", "call",
)

# Numeric features computed from StableHLO alone. These are the model's inputs, so the
# library (from a jaxpr) and the HTTP API (from text) can never disagree.
STABLEHLO_FEATURES = (
    "hlo_ops",                # ops in the module text (all functions, all regions)
    "hlo_ops_inlined",        # ops after inlining every func.call, as XLA does
    "hlo_ops_trip_weighted",  # inlined ops, loop bodies multiplied by recovered trip counts
    "hlo_functions",
    "hlo_calls",
    "hlo_max_call_depth",
    "while_count",
    "while_max_depth",
    "while_trip_max",
    "while_trip_unknown",     # loops whose trip count could not be recovered
    "while_total_iterations", # sum over loops of the product of trip counts down the nest
    "case_count",
    "case_result_branch_squares",  # per case op, results x branches^2 (HLO ordering's checks)
    "custom_call_count",
    "custom_call_linalg",
    "constant_count",
    "dense_constant_bytes",   # non-splat constants: what constant folding has to chew on
    "largest_constant_bytes",
    "fold_ops",               # ops computed from constants alone, while compiling
    "fold_elements",          # elements they read or write (XLA's interpreter's: x0.135);
                              # multiply-adds of contractions it evaluates itself
    "fold_dot_flops",         # flops of the dots it hands to a matrix library
    "fold_bytes",             # bytes of the constants they produce
    "tensor_max_elements",
    "tensor_sum_elements",
    "tensor_max_rank",
    "distinct_shapes",
    "dot_flops",
    "conv_flops",
    "fusion_groups",          # loop fusions, grouped consumers first as XLA does
    "fusion_max_size",
    "fusion_mean_size",
    "fusion_cost_squares",    # sum over fusions of (array ops weighted by their cost) squared
    "fusion_cost_inputs",     # sum over fusions of that cost times the arrays it reads in
    "fusion_indexing_squares",  # sum over fusions of (slices, pads, concats...) squared
    "fusion_distinct",        # fusions that are not the same kernel as another
    "fusion_distinct_cost",   # their cost weights, each kernel once (XLA compiles it once)
    "dot_matrix_vector",      # dots with a vector side: XLA:CPU emits them as its own loops
    "layout_transposes",      # conv/dot operands and results copied into the library's layout
    "chain_length",           # longest dependency chain of ops, through regions and calls
    "sequence_kernels_max",   # kernels run as one sequence (a function body, a loop body)
    "sequence_kernel_squares",  # sum over such sequences of kernels squared
    "fanout_max",             # most uses of one value (a weight reused by every unrolled step)
    "fanout_squares",         # sum over values of uses squared (inlined)
    "param_count",
    "input_bytes",
    "output_bytes",
    "f64_ops",
    "complex_ops",
    "unknown_ops",
) + tuple(f"cat_{c}" for c in CATEGORIES) + tuple(f"op_{o}" for o in HISTOGRAM_OPS) + (
    "fft_points_max",         # the largest transform's points (product of its lengths)
    "fft_odd_part_max",       # the largest odd part m of a transform length 2^k * m
    "fft_odd_length_twos",    # that length's 2^k (0 when every length is a power of two)
)

# Numeric features from the jaxpr: advice and extra signal, never a model input.
JAXPR_FEATURES = (
    "jaxpr_eqns",
    "jaxpr_eqns_weighted",
    "jaxpr_max_depth",
    "jaxpr_scan_count",
    "jaxpr_scan_max_length",
    "jaxpr_scan_max_unroll",
    "jaxpr_while_count",
    "jaxpr_cond_count",
    "jaxpr_cond_branches_max",
    "jaxpr_inner_jit_count",
    "jaxpr_inner_jit_max_eqns",
    "jaxpr_remat_count",
    "jaxpr_custom_jvp_count",
    "jaxpr_custom_vjp_count",
    "jaxpr_const_count",
    "jaxpr_const_bytes",
    "jaxpr_largest_tensor_elements",
    "jaxpr_input_bytes",
    "jaxpr_output_bytes",
    "jaxpr_f64_vars",
    "jaxpr_complex_vars",
    "jaxpr_repeat_block_size",
    "jaxpr_repeat_count",
    "jaxpr_unknown_primitives",
) + tuple(f"jaxpr_cat_{c}" for c in CATEGORIES)

MODEL_FEATURES = STABLEHLO_FEATURES
ALL_FEATURES = STABLEHLO_FEATURES + JAXPR_FEATURES
ENVIRONMENT_FIELDS = ("backend", "target", "jaxlib_version", "host_cpu_count")

# Features each version added at the end of the list, and nothing else, with the op count
# that is zero exactly when they all are: a model of an earlier version (down to
# `OLDEST_READ`) reads the features it was trained on by name, and features recorded by an
# earlier version gain the added ones where that count is zero (no FFT).
ADDED = {18: (("fft_points_max", "fft_odd_part_max", "fft_odd_length_twos"), "op_fft")}
# Versions that changed what some inputs measure in programs holding one op, with that op:
# what an earlier version recorded reads the same where the op is absent, and must be
# lowered again where it is present (19: a select of one value on both sides is dropped).
CHANGED = {19: "op_select"}
OLDEST_READ = 17


def features_of(version: int) -> tuple[str, ...]:
    """The model inputs of feature schema `version` (`OLDEST_READ` up to this one)."""
    if not OLDEST_READ <= version <= SCHEMA_VERSION:
        raise ValueError(f"feature schema {version} is not read here (reads {OLDEST_READ} "
                         f"to {SCHEMA_VERSION})")
    later = {name for v, (names, _) in ADDED.items() if v > version for name in names}
    return tuple(name for name in STABLEHLO_FEATURES if name not in later)


def stale(version: float, values: Mapping[str, float]) -> bool:
    """Whether inputs recorded by schema `version` no longer read as this schema's: a
    later version changed what they measure for an op they hold (`CHANGED`)."""
    return any(version < changed and values.get(op, 0) for changed, op in CHANGED.items())


def with_added(values: Mapping[str, float]) -> dict[str, float]:
    """Model inputs recorded by an earlier schema, with what later ones added: zero where
    the op those measure is absent; left out where it is present (a model that reads them
    then names them missing: lower the program again)."""
    out = dict(values)
    for names, op in ADDED.values():
        if any(name not in out for name in names) and not out.get(op, 0):
            out.update(dict.fromkeys(names, 0.0))
    return out


@dataclass(frozen=True)
class Features:
    """One program's features: numbers by name, the environment, and free-form details.

    `values` holds every name of `ALL_FEATURES`; jaxpr features are NaN when the
    features came from StableHLO text alone. `info` carries what is not a number
    (op histogram, custom-call targets, the source line of a repeated block).

    Example:
        >>> feats = costmodel.features.extract(f, x)
        >>> feats["hlo_ops"], feats.backend
        (412.0, 'cpu')
    """

    values: Mapping[str, float]
    backend: str
    target: str = ""
    jaxlib_version: str = ""
    host_cpu_count: int = 0
    schema_version: int = SCHEMA_VERSION
    info: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __getitem__(self, name: str) -> float:
        return self.values[name]

    def model_inputs(self) -> dict[str, float]:
        """The model's inputs: the StableHLO features in schema order, then the placement's
        (`sharding.PLACEMENT_INPUTS`: chips, sharded arguments), which only a model fitted
        with them reads."""
        from .sharding import placement_inputs

        inputs = {name: float(self.values[name]) for name in MODEL_FEATURES}
        return {**inputs, **placement_inputs(self.target, self.info)}

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-friendly mapping: schema version, environment, then every feature."""
        out: dict[str, Any] = {
            "schema_version": self.schema_version,
            "backend": self.backend,
            "target": self.target,
            "jaxlib_version": self.jaxlib_version,
            "host_cpu_count": self.host_cpu_count,
        }
        for name in ALL_FEATURES:
            value = float(self.values[name])
            out[name] = None if math.isnan(value) else value
        return out
