"""Where XLA:CPU puts reductions, against the fusion emulator, on small programs.

The emulator (`features/stablehlo/fusion.py`) keeps every `reduce` out of its fusions: the
ops before it and after it fuse apart, and a cheap chain read by several reductions is
copied into each of their operands' fusions. XLA:CPU (jax 0.10.2) fuses reductions: into
loop fusions (`*_fusion`, kind kLoop, the reduce an instruction among the others, its
producers and elementwise consumers with it) or into YNNPACK fusions (`ynn_fusion`), so a
chain shared by several reductions is computed once in one fusion. Each line prints the
fused-op counts of XLA's compiled module and of the emulator, largest first, and the names
XLA gave its fusions. It compiles each program once (no timing).

The first lines time nothing either: a chain of three arrays read by reductions, by a
reduction and an elementwise op, and centred by its own sum, at 64 to 2^20 elements.

    python bench/archive/reduction_fusion.py

The last lines build the Distrax spline flow of `bench/evaluations/outside_programs.py` at tiny sizes
with 1 to 8 coupling layers: XLA's fused ops grow about linearly with depth, the
emulator's faster (its squares the more so). Findings: `bench/archive/fusion_emulation.md`.
"""

from __future__ import annotations

import re

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import jax
import jax.numpy as jnp
from fusion_sizes_vs_xla import emulated_sizes, xla_sizes


def compare(name: str, fn, *args) -> tuple[list[int], list[int]]:
    """Print and return (XLA's fused-op counts, the emulator's) for `fn` at `args`."""
    lowered = jax.jit(fn).lower(*args)
    hlo = lowered.compile().as_text()
    xla, emulated = xla_sizes(hlo), emulated_sizes(lowered.as_text())
    entry = hlo[hlo.index("ENTRY"):]
    fusions = re.findall(r"%(\S+) = \S+ fusion\(", entry)
    print(f"{name:40} XLA {sorted(xla, reverse=True)[:6]} (squares {sum(s * s for s in xla)})"
          f" | emulated {sorted(emulated, reverse=True)[:6]} (squares "
          f"{sum(s * s for s in emulated)}) | {len(fusions)} XLA fusions: "
          f"{', '.join(fusions[:4])}{', ...' if len(fusions) > 4 else ''}")
    return xla, emulated


def chain(value):
    return jnp.clip(value * 10.0 - 5.0, -5.0, 5.0) + 0.001 * value


def shared_by_three_sums(w, x):
    """A cheap chain on a cumulative sum read by three reductions (as a spline's knots)."""
    knots = chain(jnp.cumsum(w, axis=-1))
    below = jnp.sum(jnp.where(knots[..., :-1] <= x[..., None], knots[..., :-1], 0.0), -1)
    above = jnp.sum(jnp.where(knots[..., 1:] > x[..., None], knots[..., 1:], 0.0), -1)
    return below * above + jnp.sum(knots, -1)


def three_reductions(a, b, c):
    """A cheap chain of three arrays (one the duplication rules do not exempt) read by three
    reductions."""
    t = a * b + c
    return jnp.exp(t).sum(), (t * c).sum(), (t - a).max()


def reduction_and_elementwise(a, b, c):
    t = a * b + c
    return jnp.exp(t) * 2.0, (t * c).sum(-1)


def centred_by_its_sum(a, b, c):
    """A reduction broadcast back to its operand's shape and read there."""
    t = a * b + c
    return jnp.tanh(t - t.sum(-1, keepdims=True))


def main() -> None:
    jax.config.update("jax_enable_compilation_cache", False)
    for shape in ((64,), (8, 4, 5), (4096,), (64, 128), (256, 16, 8), (1 << 20,)):
        arrays = [jnp.ones(shape)] * 3
        compare(f"3-array chain -> 3 reductions, {shape}", three_reductions, *arrays)
        compare(f"3-array chain -> exp, sum, {shape}", reduction_and_elementwise, *arrays)
        compare(f"x - sum(x) -> tanh, {shape}", centred_by_its_sum, *arrays)
    compare("chain -> 3 sums, (8, 4, 5)", shared_by_three_sums, jnp.ones((8, 4, 5)),
            jnp.ones((8, 4)))
    for shape in ((8, 4, 5), (256, 16, 8), (64, 128)):
        for axis in (-1, 0):
            compare(f"exp -> sum({axis}) -> tanh, {shape}",
                    lambda x, axis=axis: jnp.tanh(jnp.sum(jnp.exp(x) * 2, axis)) + 1.0,
                    jnp.ones(shape))
    compare("softmax, (64, 128)", lambda x: jax.nn.softmax(x * 2.0, axis=-1), jnp.ones((64, 128)))
    compare("layer norm, (64, 128)", lambda x: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(
        x.var(-1, keepdims=True) + 1e-5), jnp.ones((64, 128)))

    import outside_programs

    for layers in (1, 2, 4, 8):
        fn, args = outside_programs.distrax_spline_flow_train_step(
            dim=4, layers=layers, hidden=8, bins=4, batch=8)
        xla, emulated = compare(f"spline flow, {layers} layers", fn, *args)
        print(f"{'':40} fused ops: XLA {sum(xla)}, emulated {sum(emulated)}")


if __name__ == "__main__":
    main()
