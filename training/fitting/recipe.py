"""The recipe `CompileCostModel` fits with: which size counts carry each target's growth,
which counts add a cost of their own, where a backend differs, and how host memory is
capped by compile time. The measurements behind each choice: `bench/FINDINGS.md`, "The
estimator's terms, term by term"."""

from __future__ import annotations

import numpy as np

# How each target's baseline is fitted (see `CompileCostModel`).
BASELINE_FORMS = {"compile_seconds": "overhead", "peak_rss_bytes": "overhead",
                  "executable_memory_bytes": "within"}
# Size terms of the regression that estimates how much load drift shows in compile seconds.
DRIFT_TERMS = ("hlo_ops_inlined", "hlo_ops_trip_weighted")
# Size counts of the baseline, per target (each enters as log(1 + count)). Compile time and
# host memory follow the emulated fusions' ops (`fused_ops`), which track XLA's optimized
# instruction count where op counts do not; the GPU keeps its own (`BACKEND_TERMS`).
BASELINE_TERMS = {
    "compile_seconds": ("hlo_ops_inlined", "fused_ops"),
    "peak_rss_bytes": ("hlo_ops_inlined", "fused_ops"),
    "executable_memory_bytes": ("hlo_ops_inlined", "tensor_sum_elements",
                                "tensor_max_elements", "io_bytes"),
}
# Counts whose cost adds to the rest of the compile instead of scaling it (see
# `overhead_power_law`), per target with an "overhead" baseline: each is a pass of XLA:CPU
# that grows on its own (embedded constants, matrix-vector dots as LLVM loops, fusions by
# cost times inputs, kernel sequencing, case ordering, constant folding, distinct kernels).
ADDED_TERMS = {"compile_seconds": ("dense_constant_bytes", "dot_matrix_vector",
                                   "fusion_cost_inputs", "sequence_kernel_squares",
                                   "case_result_branch_squares", "fold_elements",
                                   "fold_dot_flops", "fusion_distinct")}
# The transform inputs (feature schema 18) are read for the TPU, whose compiler they were
# added for; XLA:CPU compiles FFTs in what their op counts say (1.0-1.7x on the outside
# suites' FFT programs), and a fit that may read them moves the retrain's promotions.
FFT_INPUTS = ("fft_points_max", "fft_odd_part_max", "fft_odd_length_twos")
# Where a backend's compiler differs (`fit.model_params` applies these): XLA:GPU's cost
# follows fan-out and index changes inside fusions, not XLA:CPU's kernel sequencing.
BACKEND_TERMS = {"gpu": {
    "baseline_terms": {"compile_seconds": ("hlo_ops_inlined", "fanout_squares")},
    "added_terms": {"compile_seconds": ("dense_constant_bytes", "dot_matrix_vector",
                                        "fusion_indexing_squares",
                                        "case_result_branch_squares", "fold_elements",
                                        "fold_dot_flops", "fusion_distinct")},
    "tree_exclude": ("sequence_kernels_max", "sequence_kernel_squares", "fusion_cost_inputs",
                     *FFT_INPUTS),
}, "cpu": {"tree_exclude": ("fusion_cost_inputs", *FFT_INPUTS),
          # Other people's programs hold more memory per compile second than the corpus's:
          # the margin that served eight outside suites best, not the corpus's own (0).
          "anchor_margins": (0.3,)}}
# XLA:TPU fuses as XLA:GPU does (one kernel per fusion, no LLVM loop per op), so the TPU
# model starts from the GPU recipe; its sharded rows' level is set from their out-of-fold
# residuals (`CompileCostModel._sharded_offset`).
BACKEND_TERMS["tpu"] = {**BACKEND_TERMS["gpu"], "sharded_offset": True, "tree_exclude": tuple(
    name for name in BACKEND_TERMS["gpu"]["tree_exclude"] if name not in FFT_INPUTS)}
# Targets whose prediction has a ceiling drawn from another target's (`Anchor`), moved
# down toward it by the weight that best predicts the out-of-fold rows (0 leaves the target
# as it was): a compile's host memory follows its compile time, which the memory model
# alone over-predicted for large programs.
ANCHORS = {"peak_rss_bytes": "compile_seconds"}
ANCHOR_WEIGHTS = np.round(np.linspace(0.0, 1.0, 21), 2)
# How far above the line the ceiling may sit (log scale), chosen with the weight.
ANCHOR_MARGINS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)
# Bytes a compile holds whatever its time, which raise the ceiling (`Anchor.held`) by as
# many bytes per held byte as the rows holding at least `ANCHOR_HELD_MIN` use at the low
# end (`ANCHOR_HELD_QUANTILE`), so the ceiling does not cut below what they hold.
ANCHOR_HELD = ("dense_constant_bytes", "fold_bytes")
ANCHOR_HELD_MIN = 4 * 2**20
ANCHOR_HELD_QUANTILE = 0.1
ANCHOR_HELD_ROWS = 10  # fewer such rows: no bytes held


def held_per_byte(used: np.ndarray, held: np.ndarray) -> float:
    """Bytes a ceiling allows per held byte: the `ANCHOR_HELD_QUANTILE` of `used` over
    `held` bytes among rows holding at least `ANCHOR_HELD_MIN` (0 with fewer than
    `ANCHOR_HELD_ROWS` of them), rounded to 0.05."""
    holding = np.isfinite(used) & (held >= ANCHOR_HELD_MIN)
    if holding.sum() < ANCHOR_HELD_ROWS:
        return 0.0
    return float(np.round(np.quantile(used[holding] / held[holding], ANCHOR_HELD_QUANTILE) * 20) / 20)
