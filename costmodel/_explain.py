"""`Prediction.explain`: which of the program's measurable quantities drive the prediction,
as what halving each would do to the predicted compile time.

Only effects the model can justify are shown. Every model input counts work the compiler
does (ops, fusions, loops, bytes), so halving one alone can only make the compile faster
or leave it be: a model that predicts slower there is reading the input against the
others it moves with in real programs (fewer tanh ops but as many ops overall), and that
says nothing a user can act on. An input is halved only when it is 2 or more, so that
at least one op, byte or kernel is left (no program has half a kernel), and effects
under 1% are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from costmodel.features import MODEL_FEATURES

# A halving must save at least this share of the predicted compile time to be shown.
SMALLEST_EFFECT = 0.01

# What each model input counts, in the words of someone writing the JAX program.
# `op_*` and `cat_*` inputs are described from their names (`quantity`).
QUANTITIES = {
    "hlo_ops": "ops in the program as written (calls not inlined)",
    "hlo_ops_inlined": "ops once every call is inlined (an unrolled Python loop repeats them)",
    "hlo_ops_trip_weighted": "ops run by loops, each loop body times its trip count",
    "hlo_functions": "functions in the module (inner jits, custom derivatives)",
    "hlo_calls": "calls between functions",
    "hlo_max_call_depth": "deepest nesting of calls",
    "while_count": "loops (lax.scan, fori_loop, while_loop)",
    "while_max_depth": "deepest nesting of loops",
    "while_trip_max": "trip count of the longest loop",
    "while_trip_unknown": "loops whose trip count is not known before running",
    "while_total_iterations": "loop iterations, nested loops multiplied",
    "case_count": "branches (lax.cond, lax.switch)",
    "case_result_branch_squares": "branch results times branches squared",
    "custom_call_count": "custom calls (library kernels)",
    "custom_call_linalg": "linear-algebra library calls",
    "constant_count": "constants",
    "dense_constant_bytes": "bytes of array constants captured by the function",
    "largest_constant_bytes": "bytes of the largest captured constant",
    "fold_ops": "ops computed from constants alone while compiling",
    "fold_elements": "elements those constant ops read or write",
    "fold_dot_flops": "flops of plain matrix products computed from constants while "
                      "compiling (other dots count their multiply-adds in fold_elements)",
    "fold_bytes": "bytes produced from constants while compiling",
    "tensor_max_elements": "elements of the largest array",
    "tensor_sum_elements": "elements of every array, summed",
    "tensor_max_rank": "highest array rank (number of dimensions)",
    "distinct_shapes": "distinct array shapes",
    "dot_flops": "flops of matrix multiplies",
    "conv_flops": "flops of convolutions",
    "fusion_groups": "fused kernels",
    "fusion_max_size": "ops in the largest fused kernel",
    "fusion_mean_size": "ops per fused kernel, on average",
    "fusion_cost_squares": "fused kernels' sizes, squared",
    "fusion_cost_inputs": "fused kernels' sizes times the arrays each reads",
    "fusion_indexing_squares": "slices, pads and concatenates per fused kernel, squared",
    "fusion_distinct": "fused kernels that differ from every other",
    "fusion_distinct_cost": "size of the fused kernels that differ from every other",
    "dot_matrix_vector": "matrix-vector products",
    "layout_transposes": "operands copied into a matrix library's layout",
    "chain_length": "longest chain of ops each waiting on the one before",
    "sequence_kernels_max": "kernels run one after another in one body",
    "sequence_kernel_squares": "kernels run one after another per body, squared",
    "fanout_max": "most uses of one value (a weight reused by every unrolled step)",
    "fanout_squares": "uses of each value, squared",
    "param_count": "function arguments (array leaves)",
    "input_bytes": "bytes of the arguments",
    "output_bytes": "bytes of the results",
    "f64_ops": "ops on float64 values",
    "complex_ops": "ops on complex values",
    "unknown_ops": "ops costmodel does not recognize",
}


def quantity(feature: str) -> str:
    """What the model input `feature` counts, in a user's words."""
    if feature in QUANTITIES:
        return QUANTITIES[feature]
    if feature.startswith("op_"):
        return f"{feature[3:]} ops"
    if feature.startswith("cat_"):
        return f"{feature[4:].replace('_', ' ')} ops of every kind"
    return feature


@dataclass(frozen=True)
class Effect:
    """What the model predicts when one quantity of the program changes: the predicted
    compile time times `factor` (0.6: 40% faster).

    Example:
        >>> effect = costmodel.predict(f, x).explain()[0]
        >>> print(effect)
        compile ×0.86 from halving ops once every call is inlined (...): 3004 → 1502 [hlo_ops_inlined]
    """

    feature: str      # the model input, a name of `costmodel.features.MODEL_FEATURES`
    quantity: str     # what it counts, in a user's words
    value: float      # its value in this program
    changed_to: float  # the value the change considered gives it
    factor: float     # predicted compile time with the change / without
    change: str = "halving"

    def __str__(self) -> str:
        return (f"compile ×{self.factor:.2f} from {self.change} {self.quantity}: "
                f"{self.value:g} → {self.changed_to:g} [{self.feature}]")

    def __repr__(self) -> str:
        return (f"Effect({self.change} {self.feature} {self.value:g} → {self.changed_to:g}: "
                f"compile ×{self.factor:.2f})")

    def to_dict(self) -> dict[str, Any]:
        return {"feature": self.feature, "quantity": self.quantity, "change": self.change,
                "value": self.value, "changed_to": self.changed_to, "factor": self.factor}


def effects(inputs: dict[str, float], artifact, top: int) -> list[Effect]:
    """The `top` largest justified effects of halving each model input of 2 or more in turn
    (see the module doc), largest first: one `predict` call on all the variants."""
    names = [n for n in MODEL_FEATURES if inputs[n] >= 2]
    if not names:
        return []
    variants = [inputs] + [{**inputs, n: inputs[n] / 2.0} for n in names]
    points = artifact.predict(variants)["compile_seconds"]["point"]
    found = [Effect(n, quantity(n), inputs[n], inputs[n] / 2.0, float(points[i + 1] / points[0]))
             for i, n in enumerate(names)]
    shown = [e for e in found if justified(e.factor)]
    shown.sort(key=lambda e: (e.factor, e.feature))
    return shown[:top]


def justified(factor: float) -> bool:
    """Halving an input saves at least `SMALLEST_EFFECT`; never a slower compile."""
    return math.isfinite(factor) and factor <= 1.0 - SMALLEST_EFFECT
