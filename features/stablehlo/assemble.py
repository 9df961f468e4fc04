"""Every `STABLEHLO_FEATURES` value of a parsed module, from its walked and combined tallies."""

from __future__ import annotations

from ..constant_folding import ConstantFolding
from ..schema import CATEGORIES, HISTOGRAM_OPS, STABLEHLO_FEATURES
from .combine import combine, kernel_sequences
from .contractions import dot_flops
from .parse import entry_function, functions
from .tally import FIELDS, module_totals
from .tensors import tensor
from .walk import Walker


def stablehlo_features(module, backend: str = "cpu") -> tuple[dict[str, float], dict]:
    """Compute every `STABLEHLO_FEATURES` value of a parsed module compiled for `backend`,
    plus details for `info`."""
    from jax._src.lib.mlir import ir

    funcs = functions(module)
    entry = entry_function(funcs)
    walker = Walker(funcs, xla_cpu=backend == "cpu")
    tallies = {name: walker.function(name) for name in funcs}
    combined = combine(entry, tallies, {})
    folds = ConstantFolding(funcs, walker.tensor, dot_flops(walker.tensor)).function(entry)[0]
    totals = module_totals(tallies)

    values: dict[str, float] = dict.fromkeys(STABLEHLO_FEATURES, 0.0)
    for f in FIELDS:
        if f.inlined is not None:
            values[f.inlined] = combined[f.name]
        if f.total is not None:
            values[f.total] = totals[f.name]
    values["hlo_functions"] = len(funcs)
    values.update(folds.features())
    values.update(_fusion_features(combined["fusions"] + tallies[entry].body_fusions))
    values["chain_length"] = tallies[entry].chain
    body, nested = kernel_sequences(entry, tallies, {})
    values["sequence_kernels_max"] = max([body, *nested])
    values["sequence_kernel_squares"] = sum(n * n for n in [body, *nested])
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
    }
    return {k: float(v) for k, v in values.items()}, info


def _fusion_features(fusions: list) -> dict[str, float]:
    """The fusion_* features of `[ops, cost, indexing ops, signature, inputs]` per fusion."""
    sizes = [size for size, *_ in fusions]
    distinct = {signature: cost for _, cost, _, signature, _ in fusions}
    return {
        "fusion_groups": len(sizes),
        "fusion_max_size": max(sizes) if sizes else 0,
        "fusion_mean_size": sum(sizes) / len(sizes) if sizes else 0.0,
        "fusion_cost_squares": sum(cost * cost for _, cost, *_ in fusions),
        "fusion_cost_inputs": sum(cost * inputs for _, cost, _, _, inputs in fusions),
        "fusion_indexing_squares": sum(n * n for _, _, n, *_ in fusions),
        "fusion_distinct": len(distinct),
        "fusion_distinct_cost": sum(distinct.values()),
    }
