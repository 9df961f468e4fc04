"""Does one elementwise fusion's compile grow with its size squared, whatever its shape?
The model's `fusion_cost_squares` term says so for every fusion. Six fusions of the same
op mix (a sine and an add or multiply per term) over operands of shape (64,), each one
loop fusion in XLA's module, built at 128 to 1024 terms:

- chain: `a = sin(a) + 1` repeated: one input, each op reads the one before;
- chain of inputs: `a = sin(a) + w_i`: the same chain reading a new input per term;
- chain of rows: the same, `w_i` the rows of one input array;
- chain of constants: the same, `w_i` a distinct literal;
- sum on one input: `sum_i sin(c_i x + d_i)` (literal c_i, d_i): a tree on one input;
- wide sum: `bench/archive/scalar_fusions.py`'s sum of terms over as many inputs as terms.

They compile interleaved in one process with the reference program (`_compile_timing`).
Each line prints the median seconds per size, the growth exponent between the two largest
sizes, XLA's fusion count, and the shipped CPU model's prediction with the emulated
`fusion_cost_squares` (the stored run's predictions are the schema-16 model's, whose
baseline rested on that term; since schema 17 it reads `fusion_cost_inputs`).

    python bench/archive/fusion_shapes.py [--rounds 3] [--json bench/results/fusion_shapes.json]
"""

from __future__ import annotations

import math

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import jax
import jax.numpy as jnp
from _compile_timing import medians, rounds_command, with_reference
from scalar_fusions import wide_sum

import costmodel
from costmodel.models import load_default

SIZES = (128, 256, 512, 1024)
SHAPE = (64,)


def chain(terms: int):
    def fn(a):
        for _ in range(terms):
            a = jnp.sin(a) + 1.0
        return a
    return fn, (jnp.ones(SHAPE),)


def chain_of_inputs(terms: int):
    def fn(a, weights):
        for w in weights:
            a = jnp.sin(a) + w
        return a
    return fn, (jnp.ones(SHAPE), [jnp.ones(SHAPE) for _ in range(terms)])


def chain_of_rows(terms: int):
    """The chain of inputs, its inputs the rows of one array (one parameter; XLA fuses the
    row slices)."""
    def fn(a, weights):
        for i in range(terms):
            a = jnp.sin(a) + weights[i]
        return a
    return fn, (jnp.ones(SHAPE), jnp.ones((terms, *SHAPE)))


def chain_of_constants(terms: int):
    def fn(a):
        for i in range(terms):
            a = jnp.sin(a) + (1.0 + 0.001 * i)
        return a
    return fn, (jnp.ones(SHAPE),)


def sum_on_one_input(terms: int):
    def fn(x):
        total = 0.0
        for i in range(terms):
            total = total + jnp.sin((i + 1.0) * x + 0.5 * i)
        return total
    return fn, (jnp.ones(SHAPE),)


FUSIONS = {"chain": chain, "chain of inputs": chain_of_inputs,
           "chain of rows": chain_of_rows, "chain of constants": chain_of_constants,
           "sum on one input": sum_on_one_input,
           "wide sum": lambda terms: wide_sum(terms, SHAPE)}


def label(kind: str, terms: int) -> str:
    return f"{kind}, {terms} terms"


def xla_fusions(fn, args) -> int:
    text = jax.jit(fn).lower(*args).compile().as_text()
    return sum(1 for line in text.splitlines() if " fusion(" in line and "calls=" in line)


def run(rounds: int) -> dict:
    builds = {label(kind, terms): (lambda build=build, terms=terms: build(terms))
              for kind, build in FUSIONS.items() for terms in SIZES}
    times = with_reference(builds, rounds)
    seconds = medians(times)
    report = {"rounds": rounds, "sizes": SIZES, "shape": SHAPE, "times_s": times,
              "median_s": seconds, "model": load_default("cpu").version, "fusions": {}}
    for kind, build in FUSIONS.items():
        entry = {"xla_fusions": [], "predicted_s": [], "fusion_cost_squares": []}
        for terms in SIZES:
            fn, args = build(terms)
            entry["xla_fusions"].append(xla_fusions(fn, args))
            prediction = costmodel.predict(fn, *args)
            entry["predicted_s"].append(prediction.compile_seconds)
            entry["fusion_cost_squares"].append(
                prediction.features.model_inputs()["fusion_cost_squares"])
        small, large = (seconds[label(kind, terms)] for terms in SIZES[-2:])
        entry["growth_exponent"] = math.log(large / small) / math.log(SIZES[-1] / SIZES[-2])
        report["fusions"][kind] = entry
        row = "  ".join(f"{seconds[label(kind, t)]:.3f}" for t in SIZES)
        predicted = "  ".join(f"{p:.3g}" for p in entry["predicted_s"])
        print(f"{kind:17} seconds at {SIZES} terms: {row}; growth {entry['growth_exponent']:.2f}; "
              f"XLA fusions {entry['xla_fusions']}; predicted {predicted}", flush=True)
    print(f"reference {seconds['(reference)']:.3f} s")
    return report


def main() -> None:
    rounds_command(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
