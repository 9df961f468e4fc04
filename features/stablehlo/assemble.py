"""Every `STABLEHLO_FEATURES` value of a parsed module, from its walked and combined tallies."""

from __future__ import annotations

from collections import Counter

from ..constant_folding import ConstantFolding, folds_to_fixpoint
from ..schema import CATEGORIES, HISTOGRAM_OPS, STABLEHLO_FEATURES
from ..sharding import sharding_summary
from .combine import combine, kernel_sequences
from .contractions import dot_flops
from .inlining import InliningBudgetExceeded
from .parse import entry_function, functions
from .tally import FIELDS, appended, module_totals
from .tensors import tensor
from .walk import Walker


def stablehlo_features(module, backend: str = "cpu") -> tuple[dict[str, float], dict]:
    """Compute every `STABLEHLO_FEATURES` value of a parsed module compiled for `backend`,
    plus details for `info`."""
    from jax._src.lib.mlir import ir

    funcs = functions(module)
    entry = entry_function(funcs)
    try:
        walker = Walker(funcs, xla_cpu=backend == "cpu", entry=entry)
        tallies = {name: walker.function(name) for name in funcs}
    except InliningBudgetExceeded:
        walker = Walker(funcs, xla_cpu=backend == "cpu", inline=False)
        tallies = {name: walker.function(name) for name in funcs}
    combined = combine(entry, tallies, {})
    folds = ConstantFolding(funcs, walker.tensor, dot_flops(walker.tensor),
                            ops=walker.ops, key=walker._key,
                            fixpoint=folds_to_fixpoint(backend)).function(entry)[0]
    totals = module_totals(tallies)

    values: dict[str, float] = dict.fromkeys(STABLEHLO_FEATURES, 0.0)
    for f in FIELDS:
        if f.inlined is not None:
            values[f.inlined] = combined[f.name]
        if f.total is not None:
            values[f.total] = totals[f.name]
    values["hlo_functions"] = len(funcs)
    odd, two = totals["fft_odd"]
    values["fft_odd_part_max"] = odd
    values["fft_odd_length_twos"] = -two if odd > 1 else 0
    values.update(folds.features())
    values.update(_fusion_features(appended(Counter(combined["fusions"]),
                                            tallies[entry].body_fusions)))
    values["chain_length"] = tallies[entry].chain
    body, nested = kernel_sequences(entry, tallies, {}, inlined=walker.inline)
    values["sequence_kernels_max"] = max([body, *(n for n, times in nested.items() if times)])
    values["sequence_kernel_squares"] = body * body + sum(
        _float(times) * (n * n) for n, times in nested.items())
    for category in CATEGORIES:
        values[f"cat_{category}"] = combined["categories"].get(category, 0)
    for op_name in HISTOGRAM_OPS:
        values[f"op_{op_name}"] = combined["histogram"].get(op_name, 0)

    fn_type = ir.FunctionType(ir.TypeAttr(funcs[entry].attributes["function_type"]).value)
    inputs = [tensor(t) for t in fn_type.inputs]
    outputs = [tensor(t) for t in fn_type.results]
    values["param_count"] = len(fn_type.inputs)
    values["input_bytes"] = sum(t.nbytes for t in inputs if t is not None)
    values["output_bytes"] = sum(t.nbytes for t in outputs if t is not None)

    info = {
        "op_histogram": dict(sorted(combined["histogram"].items())),
        "custom_call_targets": dict(sorted(totals["targets"].items())),
        "entry_function": entry,
        "calls_fused_in_place": walker.inline,
        "sharding": sharding_summary(funcs, entry),
    }
    return {k: _float(v) for k, v in values.items()}, info


# The largest value a feature takes: counts multiplied along calls (functions calling the
# next one twice, 60 deep: 2**61 ops) or through loops grow past any float. No program
# that compiles comes near it.
MAX_VALUE = 1e30


def _float(value) -> float:
    """`value` as a float no larger than `MAX_VALUE` (an int of any size, or inf)."""
    return float(value) if -MAX_VALUE <= value <= MAX_VALUE else MAX_VALUE


def _fusion_features(fusions: Counter) -> dict[str, float]:
    """The fusion_* features of the fusions `(ops, cost, indexing ops, signature,
    inputs)` -> how many such."""
    times = {group: _float(n) for group, n in fusions.items() if n}
    groups = sum(times.values())
    distinct = {signature: cost for _, cost, _, signature, _ in times}
    return {
        "fusion_groups": groups,
        "fusion_max_size": max((size for size, *_ in times), default=0),
        "fusion_mean_size": sum(size * n for (size, *_), n in times.items()) / groups
        if groups else 0.0,
        "fusion_cost_squares": sum(cost * cost * n for (_, cost, *_), n in times.items()),
        "fusion_cost_inputs": sum(cost * inputs * n
                                  for (_, cost, _, _, inputs), n in times.items()),
        "fusion_indexing_squares": sum(k * k * n for (_, _, k, *_), n in times.items()),
        "fusion_distinct": len(distinct),
        "fusion_distinct_cost": sum(distinct.values()),
    }
