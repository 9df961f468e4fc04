"""Programs carried to a TPU machine as `jax.export` artifacts, with the manifest that
`bench/evaluations/tpu_device_run.py` reads (entries: name, file, key, x64, here_s)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

MANIFEST = "manifest.json"


def serialize_for_tpu(fn, args) -> bytes:
    """`fn(*args)` lowered for platform `tpu` with `jax.export`, its arguments and results
    flattened to leaves first (custom pytree nodes do not serialize)."""
    import jax
    from jax import export

    leaves, tree = jax.tree_util.tree_flatten(args)

    def flat(*xs):
        return jax.tree_util.tree_leaves(fn(*jax.tree_util.tree_unflatten(tree, xs)))

    specs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
    return export.export(jax.jit(flat), platforms=["tpu"])(*specs).serialize()


def write_artifacts(out: Path, programs: Iterable[dict],
                    build: Callable[[dict], tuple]) -> list[dict]:
    """Serialize each program (a dict with name, key, x64, here_s and what `build` needs to
    return its `(fn, args)`) into `out`, with the manifest rewritten after each one so an
    export cut short still travels. Returns the manifest's entries."""
    import jax

    out.mkdir(parents=True, exist_ok=True)
    entries, x64 = [], jax.config.jax_enable_x64
    try:
        for program in programs:
            jax.config.update("jax_enable_x64", bool(program["x64"]))
            blob = serialize_for_tpu(*build(program))
            (out / f"{program['name']}.bin").write_bytes(blob)
            entries.append({"name": program["name"], "file": f"{program['name']}.bin",
                            "key": program["key"], "x64": bool(program["x64"]),
                            "here_s": float(program["here_s"]),
                            **{k: program[k] for k in ("family", "library") if k in program}})
            (out / MANIFEST).write_text(json.dumps({"programs": entries}, indent=1))
    finally:
        jax.config.update("jax_enable_x64", x64)
    return entries
