"""What a program's placement adds to the model's inputs: the chips it compiles for and
how its arguments are sharded over them.

These inputs lie outside the feature schema (`schema.MODEL_FEATURES`): a model reads them
when it was fitted with them (the TPU model, whose rows span one chip and multi-chip
topologies), and every other model ignores them. The chip count comes from the target
(`environment.chips`); the sharding from the entry function's argument annotations, which
a program lowered with shardings carries (`sdy.sharding`, or `mhlo.sharding` from older
lowerings).
"""

from __future__ import annotations

import re

from .environment import chips

PLACEMENT_INPUTS = ("chips", "sharded_args", "sharded_input_share")
_SHARDED_SDY = re.compile(r'\{"')  # a dim sharded over a named mesh axis
_MHLO_DEVICES = re.compile(r"devices=\[([0-9,]+)\]")


def is_sharded(annotation: str) -> bool:
    """Whether one argument's sharding annotation splits it over more than one device."""
    if "#sdy.sharding" in annotation:
        return bool(_SHARDED_SDY.search(annotation.split("[", 1)[-1]))
    found = _MHLO_DEVICES.search(annotation)
    if not found or "replicated" in annotation:
        return False
    tiles = [int(n) for n in found.group(1).split(",") if n]
    if "last_tile_dim_replicate" in annotation:
        tiles = tiles[:-1]
    return any(n > 1 for n in tiles)


def sharding_summary(funcs: dict, entry: str) -> dict[str, float]:
    """`{"sharded_args", "sharded_input_share"}` of the entry function: how many arguments
    are split over devices, and their share of the input bytes."""
    from jax._src.lib.mlir import ir

    from .stablehlo.tensors import tensor

    op = funcs[entry]
    fn_type = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    sizes = [(t.nbytes if (t := tensor(arg)) is not None else 0) for arg in fn_type.inputs]
    attrs = (list(ir.ArrayAttr(op.attributes["arg_attrs"]))
             if "arg_attrs" in op.attributes else [])
    sharded = [i for i, attr in enumerate(attrs) if any(
        is_sharded(str(ir.DictAttr(attr)[name])) for name in ("sdy.sharding", "mhlo.sharding")
        if name in ir.DictAttr(attr))]
    total = sum(sizes)
    share = sum(sizes[i] for i in sharded if i < len(sizes)) / total if total else 0.0
    return {"sharded_args": float(len(sharded)), "sharded_input_share": float(share)}


def placement_inputs(target: str, info) -> dict[str, float]:
    """The placement inputs (`PLACEMENT_INPUTS`) of a program for `target` whose features'
    `info` holds its `sharding` summary (none: no argument is sharded)."""
    summary = (info or {}).get("sharding") or {}
    return {"chips": float(chips(target)),
            "sharded_args": float(summary.get("sharded_args", 0.0)),
            "sharded_input_share": float(summary.get("sharded_input_share", 0.0))}
