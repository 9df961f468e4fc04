"""What does a convolution or dot outside XLA:CPU's library layout cost to compile?

Pairs that compute the same thing in two layouts: a 2-D convolution channels-last
(NHWC/HWIO) against channels-first (NCHW/OIHW) and against only the kernel in OIHW; a 1-D
convolution NWC against NCW; the attention score einsum with batch dimensions leading
(``bhqd,bhkd->bhqk``) against Flax's order (``bqhd,bkhd->bhqk``). For each program: its
`layout_transposes` feature and its backend compile time, new function objects each
time, all programs interleaved per round, median of the rounds.

    python bench/archive/layout_cost.py [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import jax
import jax.numpy as jnp
from jax import lax

from costmodel import features
from costmodel._demo import _measure  # one timed compile of build()


def _conv(dimension_numbers, padding):
    def make():
        return lambda x, w: lax.conv_general_dilated(x, w, (1,) * len(padding), padding,
                                                     dimension_numbers=dimension_numbers)
    return make


def _einsum(spec):
    def make():
        return lambda a, b: jnp.einsum(spec, a, b)
    return make


def _f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


PAD2, PAD1 = ((1, 1), (1, 1)), ((1, 1),)
PROGRAMS = {
    "conv2d NHWC/HWIO": (_conv(("NHWC", "HWIO", "NHWC"), PAD2), (_f32(4, 16, 16, 32), _f32(3, 3, 32, 32))),
    "conv2d NCHW/OIHW": (_conv(("NCHW", "OIHW", "NCHW"), PAD2), (_f32(4, 32, 16, 16), _f32(32, 32, 3, 3))),
    "conv2d NHWC/OIHW": (_conv(("NHWC", "OIHW", "NHWC"), PAD2), (_f32(4, 16, 16, 32), _f32(32, 32, 3, 3))),
    "conv1d NWC": (_conv(("NHC", "HIO", "NHC"), PAD1), (_f32(4, 64, 32), _f32(3, 32, 32))),
    "conv1d NCW": (_conv(("NCH", "OIH", "NCH"), PAD1), (_f32(4, 32, 64), _f32(32, 32, 3))),
    "einsum bhqd,bhkd->bhqk": (_einsum("bhqd,bhkd->bhqk"), (_f32(4, 8, 32, 16),) * 2),
    "einsum bqhd,bkhd->bhqk": (_einsum("bqhd,bkhd->bhqk"), (_f32(4, 32, 8, 16),) * 2),
}


def compile_seconds(make, args) -> float:
    return _measure(lambda: (make(), args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    for make, shapes in PROGRAMS.values():  # warm-up: first-compile costs off the clock
        compile_seconds(make, shapes)
    times = {name: [] for name in PROGRAMS}
    for _ in range(args.rounds):
        for name, (make, shapes) in PROGRAMS.items():
            times[name].append(compile_seconds(make, shapes))
    results = []
    for name, (make, shapes) in PROGRAMS.items():
        moves = features.extract(make(), *shapes)["layout_transposes"]
        median = statistics.median(times[name])
        results.append({"program": name, "layout_transposes": moves, "compile_ms": median * 1e3,
                        "all_ms": [t * 1e3 for t in times[name]]})
        print(f"{name:26} layout_transposes={moves:3.0f}  compile {median * 1e3:6.1f} ms  "
              f"(rounds {min(times[name]) * 1e3:.1f}-{max(times[name]) * 1e3:.1f})")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rounds": args.rounds, "jax": jax.__version__, "results": results}, out,
                      indent=1)


if __name__ == "__main__":
    main()
