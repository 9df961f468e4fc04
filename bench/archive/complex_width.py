"""Does the state's width change how long a complex recurrence takes to compile?

The `complex_recurrence` family's forward elementwise programs compile several times
faster on a (16,) state than on a (256,) one, with identical features. This times them
again beside probes of the same recurrence (`h = a h + exp(a) x_t; h / (1 + |h|)`, one
fusion) at widths 16 to 4096, returning the state or the sum of its squared magnitudes,
as float32 and complex64: is it width, the final reduction, or the element type? Every
program compiles interleaved in one process with the reference program.

    python bench/archive/complex_width.py [--rounds 2] [--json bench/results/complex_width.json]
"""

from __future__ import annotations

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import jax.numpy as jnp
import numpy as np
from _compile_timing import medians, rounds_command, with_reference

from costmodel.training.corpus.numeric import build_complex_recurrence

WIDTHS = (16, 256, 4096)
# steps per element type: each probe compiles in 0.7-4.2 s (2026-12-05, AMD EPYC)
PROBE_STEPS = {"float32": 512, "complex64": 96}
FAMILY_STEPS = (128, 256)


def family_program(steps: int, width: int):
    """The family's forward elementwise program, its inputs concrete."""
    fn, shapes = build_complex_recurrence(steps, width, "elementwise", False)
    return fn, tuple(np.ones(s.shape, s.dtype) for s in shapes)


def probe(steps: int, width: int, dtype: str, summed: bool):
    """The family's recurrence in `dtype`, returning the state or sum(|h|^2)."""
    def forward(a, xs):
        h = jnp.zeros_like(xs[0])
        for t in range(steps):
            h = a * h + jnp.exp(a) * xs[t]
            h = h / (1.0 + jnp.abs(h))
        return jnp.sum(jnp.abs(h) ** 2) if summed else h
    return forward, (jnp.ones((width,), dtype), jnp.ones((steps, width), dtype))


def run(rounds: int) -> dict:
    builds = {f"family {steps} steps, width {width}":
              (lambda steps=steps, width=width: family_program(steps, width))
              for steps in FAMILY_STEPS for width in (16, 256)}
    for dtype, steps in PROBE_STEPS.items():
        for summed in (False, True):
            for width in WIDTHS:
                name = f"{dtype} {steps} steps, {'sum' if summed else 'state'}, width {width}"
                builds[name] = (lambda steps=steps, width=width, dtype=dtype, summed=summed:
                                probe(steps, width, dtype, summed))
    times = with_reference(builds, rounds)
    seconds = medians(times)
    for name, value in seconds.items():
        print(f"{name:44s} {value:7.3f} s", flush=True)
    return {"rounds": rounds, "times_s": times, "median_s": seconds}


def main() -> None:
    rounds_command(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
