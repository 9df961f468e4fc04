"""Sharded variants of corpus programs: one program compiled SPMD over a topology's devices.

A program's params may name a strategy under `SHARDING_PARAM` (so the strategy is part of
the row's key); its arguments then get `NamedSharding`s over a mesh of all devices of the
target (`v5e:2x2`, `v5e:4x4`). Programs are `f(params, *inputs)` in the corpus's builders,
so the first argument counts as the parameters and the others as inputs; a program of one
argument has inputs only. The strategies:

- `dp`, data parallel: inputs' leading dims sharded over a `data` axis, params replicated.
- `fsdp`: as `dp`, and each parameter's largest dim that the device count divides sharded
  over `data` too (the compiler then gathers them where they are used).
- `tp`, tensor parallel: a 2-D (`data`, `model`) mesh; parameters' last dims sharded over
  `model`, inputs' leading dims over `data`.

A strategy that would shard no argument of a program is refused (`NotSharded`): the row
would be a replicated program, not the variant it is named for.
"""

from __future__ import annotations

import math
import re

STRATEGIES = ("dp", "fsdp", "tp")
SHARDING_PARAM = "sharding"
# collectives in optimized HLO text: what SPMD partitioning adds to a sharded program
_COLLECTIVE = re.compile(r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|"
                         r"collective-permute)(-start)?\(")


class NotSharded(ValueError):
    """The strategy shards none of this program's arguments."""


def split_params(params: dict) -> tuple[dict, str | None]:
    """(the family's own params, the sharding strategy or None)."""
    params = dict(params)
    strategy = params.pop(SHARDING_PARAM, None)
    if strategy is not None and strategy not in STRATEGIES:
        raise ValueError(f"unknown sharding strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    return params, strategy


def mesh_axes(strategy: str, devices: int) -> dict[str, int]:
    """Axis sizes of the strategy's mesh over `devices` devices."""
    if strategy != "tp":
        return {"data": devices}
    model = 2 if devices <= 4 else 4
    return {"data": devices // model, "model": model}


def make_mesh(strategy: str, devices):
    import numpy as np
    from jax.sharding import Mesh

    axes = mesh_axes(strategy, len(devices))
    grid = np.array(list(devices), dtype=object).reshape(tuple(axes.values()))
    return Mesh(grid, tuple(axes))


def leaf_spec(shape: tuple[int, ...], role: str, strategy: str, axes: dict[str, int]):
    """The PartitionSpec entries of one argument leaf (`role`: params or inputs)."""
    spec: list = [None] * len(shape)
    data = axes["data"]
    if role == "inputs":
        if shape and data > 1 and shape[0] % data == 0:
            spec[0] = "data"
    elif strategy == "fsdp":
        divisible = [i for i, n in enumerate(shape) if n % data == 0 and n >= data]
        if divisible:
            spec[max(divisible, key=lambda i: shape[i])] = "data"
    elif strategy == "tp" and len(shape) >= 2 and shape[-1] % axes["model"] == 0:
        spec[-1] = "model"
    return spec


def shard_args(args: tuple, strategy: str, devices) -> tuple[tuple, dict]:
    """`args` (pytrees of ShapeDtypeStruct) with shardings over a mesh of `devices`, and
    what was sharded: `{"sharded_leaves", "leaves", "sharded_bytes", "bytes"}`.

    Raises:
        NotSharded: no leaf of `args` gets a sharded dim.
    """
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = make_mesh(strategy, devices)
    axes = mesh_axes(strategy, len(devices))
    stats = {"sharded_leaves": 0, "leaves": 0, "sharded_bytes": 0, "bytes": 0}

    def place(leaf, role):
        if not hasattr(leaf, "shape") or not hasattr(leaf, "dtype"):
            return leaf
        shape = tuple(leaf.shape)
        spec = leaf_spec(shape, role, strategy, axes)
        size = math.prod(shape) * jax.numpy.dtype(leaf.dtype).itemsize
        stats["leaves"] += 1
        stats["bytes"] += size
        if any(spec):
            stats["sharded_leaves"] += 1
            stats["sharded_bytes"] += size
        return jax.ShapeDtypeStruct(shape, leaf.dtype,
                                    sharding=NamedSharding(mesh, PartitionSpec(*spec)))

    roles = ["inputs"] if len(args) == 1 else ["params"] + ["inputs"] * (len(args) - 1)
    placed = tuple(jax.tree_util.tree_map(lambda leaf, r=role: place(leaf, r), arg)
                   for arg, role in zip(args, roles))
    if not stats["sharded_leaves"]:
        raise NotSharded(f"strategy {strategy!r} shards none of the {stats['leaves']} "
                         f"argument leaves over {dict(axes)}")
    return placed, stats


def collective_count(hlo_text: str) -> int:
    """Collective ops (all-reduce, all-gather, ...) in optimized HLO text."""
    return len(_COLLECTIVE.findall(hlo_text))


def sharded_placement(place, strategy: str):
    """A copy of `place` (a deviceless TPU topology's `harness.Placement`) whose programs'
    arguments are sharded by `strategy` over all the topology's devices; the compiler picks
    the outputs' shardings. Its `stats` say what the last `args` call sharded."""
    from dataclasses import dataclass, field

    from .tpu_target import deviceless_devices

    if place.backend != "tpu" or ":" not in place.target:
        raise ValueError(f"sharding {strategy!r} needs a TPU topology target (v5e:2x2, "
                         f"v5e:4x4), not {place.backend}/{place.target}")
    devices = deviceless_devices(place.target)

    @dataclass
    class Sharded(type(place)):
        stats: dict = field(default_factory=dict)

        def jit(self, fn):
            import jax

            return jax.jit(fn)

        def args(self, args):
            placed, self.stats = shard_args(args, strategy, devices)
            return placed

    return Sharded(place.backend, place.target, place.sharding, True)


def row_fields(place, strategy: str | None, features, hlo_text: str) -> dict:
    """What a TPU row says of its placement beyond the features: chips, the strategy and
    its mesh, the sharded arguments, the collectives the compiler added, libtpu's version."""
    from importlib import metadata

    from costmodel.features.sharding import placement_inputs

    try:
        libtpu = metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        libtpu = ""
    chips = placement_inputs(place.target, features.info)
    return {**chips, "sharding": strategy or "",
            "mesh": "" if strategy is None else "x".join(
                f"{k}{v}" for k, v in mesh_axes(strategy, int(chips["chips"])).items()),
            "sharded_leaves": getattr(place, "stats", {}).get("sharded_leaves", 0),
            "hlo_collectives": collective_count(hlo_text), "libtpu_version": libtpu}
