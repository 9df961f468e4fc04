"""Writes `data/walk_golden.json.gz`: two programs of every built-in corpus family that
needs no extra library (of about six grid points spread over its grid, those of shortest
and longest StableHLO text under `MAX_TEXT`), lowered once, with every feature and the
`info` the StableHLO extractor gives them for XLA:CPU and XLA:GPU. `test_walk_golden.py`
checks the extractor still gives exactly these; rerun only when a change of the features
is meant:

    python tests/walk_golden.py
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import jax

from costmodel.features import from_stablehlo
from costmodel.training import corpus

OUT = Path(__file__).parent / "data" / "walk_golden.json.gz"
CANDIDATES = 6  # grid points tried per family
MAX_TEXT = 40_000  # characters of StableHLO kept per program (else the shortest only)
# Programs off their family's grid, whose grid points all capture large constants
SMALLER = [("constant_fold", {"side": 32, "ops": 3, "mode": "elementwise"}),
           ("constant_fold", {"side": 32, "ops": 2, "mode": "matmul"}),
           ("cholesky_seed", {"nbatch": 4, "nobs": 8, "ngp": 4, "grad": True})]


def programs() -> dict:
    found = {}
    for name, family in corpus.FAMILIES.items():
        if family.library:  # built from a library that may not be installed
            continue
        lowered = []
        for params in family.grid[::max(1, len(family.grid) // CANDIDATES)]:
            jax.config.update("jax_enable_x64", bool(family.x64))
            fn, args = family.build(**params)
            text = jax.jit(fn).trace(*args).lower().as_text()
            lowered.append((len(text), params, text))
        jax.config.update("jax_enable_x64", False)
        lowered.sort(key=lambda item: item[0])
        kept = [item for item in lowered if item[0] <= MAX_TEXT] or lowered[:1]
        for _, params, text in {id(x): x for x in kept[:1] + kept[-1:]}.values():
            found.update(_entry(name, params, text))
    for name, params in SMALLER:
        fn, args = corpus.build(name, params)
        found.update(_entry(name, params, jax.jit(fn).trace(*args).lower().as_text()))
    found.update(_entry("fanout", {"depth": 16}, fanout(16)))
    return found


def fanout(depth: int) -> str:
    """Functions that each call the next one twice: past the walker's inlining budget, so
    each function's fusions are found once and counted at its calls."""
    lines = ["module @m {", "  func.func private @f0(%arg0: tensor<4xf32>) -> tensor<4xf32> {",
             "    %0 = stablehlo.tanh %arg0 : tensor<4xf32>",
             "    %1 = stablehlo.add %0, %arg0 : tensor<4xf32>",
             "    return %1 : tensor<4xf32>", "  }"]
    for k in range(1, depth + 1):
        lines += [f"  func.func private @f{k}(%arg0: tensor<4xf32>) -> tensor<4xf32> {{",
                  f"    %0 = call @f{k - 1}(%arg0) : (tensor<4xf32>) -> tensor<4xf32>",
                  f"    %1 = call @f{k - 1}(%0) : (tensor<4xf32>) -> tensor<4xf32>",
                  "    return %1 : tensor<4xf32>", "  }"]
    lines += ["  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {",
              f"    %0 = call @f{depth}(%arg0) : (tensor<4xf32>) -> tensor<4xf32>",
              "    return %0 : tensor<4xf32>", "  }", "}"]
    return "\n".join(lines)


def _entry(name: str, params: dict, text: str) -> dict:
    entry = {"family": name, "params": params, "stablehlo": text}
    for backend in ("cpu", "gpu"):
        feats = from_stablehlo(text, backend=backend)
        entry[backend] = {"values": feats.values, "info": feats.info}
    print(name, params, len(text), file=sys.stderr)
    return {f"{name} {json.dumps(params, sort_keys=True)}": entry}


if __name__ == "__main__":
    data = programs()
    with gzip.open(OUT, "wt", compresslevel=9) as handle:
        json.dump(data, handle, sort_keys=True)
    print(f"{len(data)} programs -> {OUT} ({OUT.stat().st_size} bytes)")
