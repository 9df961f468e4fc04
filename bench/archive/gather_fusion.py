"""Does XLA:CPU fuse gathers? Small programs around table lookups, each compiled once (no
timing): XLA's fusions in the optimized module against the fusion emulator's groups.

    python bench/archive/gather_fusion.py

Seen on jax 0.10.2 (2026-12-04): XLA makes one fusion of each program below, the gathers
inside it; the schema-16 emulator, which does not fuse gathers, makes 2, 3, 3 and 5.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from costmodel.features import from_lowered
from costmodel.measure.harness import optimized_hlo_stats

S = jax.ShapeDtypeStruct
TABLE, INDICES, ROWS = S((1024, 16), jnp.float32), S((256,), jnp.int32), S((256, 16), jnp.float32)


def bilinear(grid, points):
    """Bilinear interpolation of a (64, 64) grid at 512 points: four lookups and weights."""
    corner = jnp.floor(points).astype(jnp.int32)
    w = points - corner
    i, j = jnp.clip(corner[:, 0], 0, 62), jnp.clip(corner[:, 1], 0, 62)
    return (grid[i, j] * (1 - w[:, 0]) * (1 - w[:, 1]) + grid[i + 1, j] * w[:, 0] * (1 - w[:, 1])
            + grid[i, j + 1] * (1 - w[:, 0]) * w[:, 1] + grid[i + 1, j + 1] * w[:, 0] * w[:, 1])


PROGRAMS = {
    "gather, then elementwise": (lambda t, i, x: jnp.tanh(t[i] * x + 1.0) * 2.0,
                                 (TABLE, INDICES, ROWS)),
    "elementwise, then gather": (lambda t, i, x: (jnp.tanh(t * 2.0) + 1.0)[i] * x,
                                 (TABLE, INDICES, ROWS)),
    "two gathers in one chain": (lambda t, i, x: jnp.tanh(t[i] + t[i + 1] * x),
                                 (TABLE, INDICES, ROWS)),
    "bilinear lookup": (bilinear, (S((64, 64), jnp.float32), S((512, 2), jnp.float32))),
}


def compare(fn, args) -> dict:
    """XLA's fusion count and the emulator's fusion groups of `fn(*args)` on the CPU."""
    traced = jax.jit(fn).trace(*args)
    lowered = traced.lower()
    xla = optimized_hlo_stats(lowered.compile().as_text())
    emulated = from_lowered(traced, lowered, backend="cpu").model_inputs()
    return {"xla_fusions": xla["hlo_fusions"], "emulated_groups": int(emulated["fusion_groups"])}


def main() -> None:
    for name, (fn, args) in PROGRAMS.items():
        found = compare(fn, args)
        print(f"{name:28} XLA fusions {found['xla_fusions']}  emulated {found['emulated_groups']}")


if __name__ == "__main__":
    main()
