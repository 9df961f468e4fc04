"""Does `costmodel.advise` pick the option that really compiles faster?

For pairs of programs that compute the same thing two ways (an unrolled loop vs the same
loop as lax.scan; a multi-stage loop cycling through distinct weights; a deep model with
inner per-layer jits compiled whole vs per layer; large constants captured vs passed as
arguments; and the pairs of `advice_library_pairs.py`, written with Flax, Haiku, Equinox
and Optax, each against the library's own idiom) we ask for advice with a budget of 1 ns
(below every prediction), then compile both versions and check the advice against the
measurement:

- pick: of the two options, the one the advice ranks cheaper (its alternatives are
  sorted by predicted compile time) must be the one that really compiles faster. When
  the two measured times are within TIE (10%) of each other, the machine's run-to-run
  noise, either pick counts as right; the strict figure is reported too.
- recommended: the option the advice tells the user to take (the alternative when
  `advice.split`, which demands a predicted saving of 30%, else keep) must be the one
  that really compiles faster, ties counted as above;
- split: `advice.split` must be True exactly when the alternative really saves 30% or
  more.

Compiles are timed in this process with a new function object each time, the two options
interleaved (which goes first alternates), median of --repeats (5), after a warm-up
compile, the persistent compilation cache off.

    python bench/evaluations/advice_validation.py [--quick] [--repeats 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import jax
import jax.numpy as jnp
import numpy as np
from _compile_timing import compile_seconds, interleaved, medians
from advice_library_pairs import library_pairs
from jax import lax

import costmodel
from costmodel._advise import MIN_SAVING

TIE = 0.10


def unrolled_pair(steps: int, width: int):
    def unrolled(x, w):
        for _ in range(steps):
            x = jnp.tanh(x @ w) + 0.1 * x
        return x

    def scanned(x, w):
        return lax.scan(lambda c, _: (jnp.tanh(c @ w) + 0.1 * c, None), x, None,
                        length=steps)[0]

    args = (jax.ShapeDtypeStruct((16, width), jnp.float32),
            jax.ShapeDtypeStruct((width, width), jnp.float32))
    return f"loop steps={steps} width={width}", unrolled, args, "scan", \
        lambda: (lambda x, w: scanned(x, w), args)


def multi_stage_pair(steps: int, stages: int = 4):
    """The issue's loop: `steps` rounds of `stages` distinct 16x16 weights on (8, 16)."""
    def unrolled(x, ws):
        for _ in range(steps):
            for w in ws:
                x = jnp.tanh(x @ w)
        return x

    def scanned(x, ws):
        def round_(c, _):
            for w in ws:
                c = jnp.tanh(c @ w)
            return c, None
        return lax.scan(round_, x, None, length=steps)[0]

    args = (jax.ShapeDtypeStruct((8, 16), jnp.float32),
            [jax.ShapeDtypeStruct((16, 16), jnp.float32)] * stages)
    return f"{stages} stages x {steps} unrolled", unrolled, args, "scan", \
        lambda: (lambda x, ws: scanned(x, ws), args)


def layered_pair(depth: int, width: int):
    def make_layer():
        return jax.jit(lambda x, w: jax.nn.gelu(x @ w) + x)

    def whole_builder():
        layer = make_layer()
        def model(x, ws):
            for w in ws:
                x = layer(x, w)
            return x
        return model

    ws = [jax.ShapeDtypeStruct((width, width), jnp.float32)] * depth
    x = jax.ShapeDtypeStruct((32, width), jnp.float32)

    def split_builder():
        # per layer: one compile of the layer (identical shapes share it) plus the glue
        layer = make_layer()
        return (lambda a, w: layer(a, w)), (x, ws[0])

    return f"layers depth={depth} width={width}", whole_builder(), (x, ws), \
        "split_inner_jits", split_builder


def constants_pair(megabytes: int):
    n = int(np.sqrt(megabytes * 2**20 / 4))
    table = np.random.default_rng(megabytes).standard_normal((n, n)).astype(np.float32)

    def captured(x):
        return jnp.tanh(x @ table) @ table.T

    def passed(x, t):
        return jnp.tanh(x @ t) @ t.T

    x = jax.ShapeDtypeStruct((8, n), jnp.float32)
    return f"constants {megabytes} MB", captured, (x,), "constants_as_arguments", \
        lambda: ((lambda a, t: passed(a, t)), (x, jax.ShapeDtypeStruct(table.shape, table.dtype)))


def verdicts(predicted: dict, measured: dict, split: bool, strategy: str) -> dict:
    """Each score of one pair from its predicted and measured seconds and advice.split."""
    keep, alt = measured["keep"], measured[strategy]
    pick = min(measured, key=predicted.get)  # of the two measured options, the one ranked cheaper
    faster = min(measured, key=measured.get)
    tie = abs(keep - alt) <= TIE * min(keep, alt)
    recommended = strategy if split else "keep"  # what the advice tells the user to do
    return {"pick": pick, "really_faster": faster, "tie": tie, "strict": pick == faster,
            "correct": pick == faster or tie, "recommended": recommended,
            "recommended_correct": recommended == faster or tie, "split": split,
            "split_correct": split == (alt <= (1 - MIN_SAVING) * keep)}


def judge(name: str, advice, strategy: str, predicted: dict, measured: dict) -> dict:
    row = {"pair": name, **verdicts(predicted, measured, advice.split, strategy),
           "predicted": {k: predicted[k] for k in measured}, "measured": measured}
    keep, alt = measured["keep"], measured[strategy]
    print(f"{name:<28} pick {row['pick']:<23} faster {row['really_faster']:<23}"
          f"{' (tie)' if row['tie'] else '      '} "
          f"pred keep={predicted['keep']:.3f}s alt={predicted[strategy]:.3f}s  "
          f"meas keep={keep:.3f}s alt={alt:.3f}s  split={advice.split!s:<5} "
          f"{'OK' if row['correct'] else 'WRONG'}", flush=True)
    return row


def all_pairs(quick: bool) -> list[tuple[str, tuple]]:
    """(library, pair): "" for the synthetic pairs written in plain JAX."""
    pairs = [unrolled_pair(s, w) for s in ((10, 50, 200) if quick else (10, 30, 100, 300, 600))
             for w in (32, 128)]
    pairs += [multi_stage_pair(s) for s in ((50,) if quick else (60, 150, 500))]
    pairs += [layered_pair(d, 128) for d in ((2, 8, 32) if quick else (2, 4, 8, 16, 32, 64))]
    pairs += [constants_pair(m) for m in ((1, 8) if quick else (1, 4, 16, 64))]
    return [("", p) for p in pairs] + ([] if quick else library_pairs())


def score(judged: list[dict]) -> dict:
    out = {"pairs": len(judged)}
    for name in ("correct", "strict", "recommended_correct", "split_correct"):
        hits = sum(r[name] for r in judged)
        out[name] = hits
        out[f"{name}_fraction"] = hits / max(len(judged), 1)
    return out


def run(quick: bool, repeats: int) -> dict:
    jax.config.update("jax_enable_compilation_cache", False)
    compile_seconds(*unrolled_pair(3, 8)[1:3])  # warm-up
    results = []
    for library, (name, original, args, strategy, build_alt) in all_pairs(quick):
        advice = costmodel.lower(original, *args).advise(budget_seconds=1e-9)
        predicted = {a.strategy: a.predicted_compile_seconds for a in advice.alternatives}
        if strategy not in predicted:
            results.append({"pair": name, "library": library,
                            "skipped": f"advice offered no {strategy}"})
            print(f"{name:<28} skipped: advice offered no {strategy}", flush=True)
            continue
        measured = medians(interleaved({"keep": lambda: (original, args),
                                        strategy: build_alt}, repeats))
        results.append({**judge(name, advice, strategy, predicted, measured),
                        "library": library, "strategy": strategy})
    from costmodel.measure.machine import environment

    env = environment()
    summary = {"tie": TIE, "repeats": repeats,
               "machine": {k: env[k] for k in ("cpu_model", "cpu_count", "jax_version")},
               "load_average_after": os.getloadavg(), "results": results}
    return summarize(summary)


def summarize(summary: dict) -> dict:
    """`summary` with its scores (re)computed from its rows, printed."""
    results = summary["results"]
    judged = [r for r in results if "measured" in r]
    summary.update(score(judged), library=score([r for r in judged if r["library"]]),
                   skipped=sum("skipped" in r for r in results))
    lib = summary["library"]
    print(f"pick: the option advice ranks cheapest really compiled faster in "
          f"{summary['correct']}/{summary['pairs']} pairs ({100 * summary['correct_fraction']:.0f}%; "
          f"strict, no ties: {summary['strict']}/{summary['pairs']}); library code "
          f"{lib['correct']}/{lib['pairs']}")
    print(f"recommended: the option advice tells the user to take (split or keep) really "
          f"compiled faster in {summary['recommended_correct']}/{summary['pairs']} pairs; "
          f"library code {lib['recommended_correct']}/{lib['pairs']}")
    print(f"split: advice.split matched a real saving of {MIN_SAVING:.0%} or more in "
          f"{summary['split_correct']}/{summary['pairs']} pairs")
    return summary


def rescore(path: str) -> None:
    """Recompute a stored run's scores from its measured and predicted seconds."""
    with open(path) as handle:
        summary = json.load(handle)
    for row in summary["results"]:
        if "measured" in row:
            row.update(verdicts(row["predicted"], row["measured"], row["split"],
                                row["strategy"]))
    with open(path, "w") as handle:
        json.dump(summarize(summary), handle, indent=2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    parser.add_argument("--rescore", metavar="JSON", default=None,
                        help="recompute the scores of a stored run; compiles nothing")
    args = parser.parse_args()
    if args.rescore:
        raise SystemExit(rescore(args.rescore))
    summary = run(args.quick, args.repeats)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(summary, handle, indent=2)
