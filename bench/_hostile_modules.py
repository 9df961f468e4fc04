"""StableHLO text and request bodies built to hurt the service (issue "one request must
not crash, pin or poison the service"): shared by `api_faults.py`, `api_fuzz.py` and
`api_pressure.py`. Built in memory, nothing sent from here."""

from __future__ import annotations

import json

MAIN = ("  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
        "    %0 = stablehlo.sine %arg0 : tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n")


def module(body: str = MAIN, attributes: str = "") -> str:
    head = f"module @m attributes {{{attributes}}} {{\n" if attributes else "module @m {\n"
    return head + body + "}\n"


def affine_bomb(terms: int = 20_000, sign: str = "- ") -> str:
    """An affine map whose parser recurses once per sign: a 40 KB stack overflow."""
    return module(attributes=f"x.m = affine_map<(d0) -> ({sign * terms}d0)>")


def fanout(depth: int) -> str:
    """Functions that each call the previous one twice: 2**depth inlined copies."""
    lines = ["module @m {",
             "  func.func private @f0(%arg0: tensor<4xf32>) -> tensor<4xf32> {",
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


def flat(ops: int) -> str:
    """One function of `ops` scalar abs ops in a chain, as compact as the syntax allows
    (200k ops in 7.6 MiB, under the 8 MiB body limit)."""
    lines = ["module{func.func @main(%a:tensor<f32>)->tensor<f32>{"]
    previous = "%a"
    for i in range(ops):
        lines.append(f"%{i}=stablehlo.abs {previous}:tensor<f32>")
        previous = f"%{i}"
    lines.append(f"return {previous}:tensor<f32>}}}}")
    return " ".join(lines)


def overflow_dims(dims: int = 40) -> str:
    big = "tensor<" + "x".join(["9223372036854775807"] * dims) + "xf32>"
    return module(f"  func.func public @main(%arg0: {big}) -> {big} {{\n"
                  f"    %0 = stablehlo.add %arg0, %arg0 : {big}\n    return %0 : {big}\n  }}\n")


def with_string_attribute(value: str) -> str:
    return module(attributes=f'x.s = "{value}"')


def predict_body(text: str, **extra) -> bytes:
    return json.dumps({"stablehlo": text, **extra}).encode()
