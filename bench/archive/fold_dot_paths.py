"""Which folded dots and convolutions XLA's interpreter hands to a matrix library, and
what a multiply-add costs when it does not: the measurement behind
`features.constant_folding.KIND_COST_IN_XLA["slow_dot"]` and `evaluator_fast_dot`.

    python bench/archive/fold_dot_paths.py [--rounds 3] [--json OUT]
    python bench/archive/fold_dot_paths.py --predict-only [--measured JSON] [--json OUT]

Each program contracts two captured constants (about 2^28 multiply-adds, less where
noted) and returns a few elements of the result; its baseline is the same program with
one operand scaled by a run-time scalar, so nothing folds. A form's folding cost is the
median of its compile seconds less its baseline's, divided by its multiply-adds. The
reference for kinds is a captured 4096x4096 table multiplied by 2.0 and then by itself
inside a nested jit (XLA's interpreter folds both, as in `fold_kinds.py`), per element
the multiplies touch. Every
compile is a new function with the compilation cache off, interleaved round by round
with the project's reference program (`bench/_compile_timing.py`). `--predict-only`
times nothing: it asks the shipped model for each program's compile seconds (and sets a
timing run's medians beside them).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import _rooms  # noqa: F401  (the other benches' folders on sys.path)
import numpy as np

SIDE = 4096  # the multiply reference's table side


def forms() -> dict:
    """Name -> (einsum spec or "conv", lhs shape, rhs shape, operand dtype, result dtype
    or None, multiply-adds)."""
    return {
        "plain (4096,256)@(256,256)": ("ij,jk->ik", (4096, 256), (256, 256), "float32", None),
        "lhs transposed ji,jk->ik": ("ji,jk->ik", (256, 4096), (256, 256), "float32", None),
        "rhs transposed ij,kj->ik": ("ij,kj->ik", (4096, 256), (256, 256), "float32", None),
        "rhs transposed, half rows": ("ij,kj->ik", (2048, 256), (256, 256), "float32", None),
        "batched bij,bjk->bik": ("bij,bjk->bik", (16, 256, 256), (16, 256, 256),
                                 "float32", None),
        "two contracting ijk,jkl->il": ("ijk,jkl->il", (4096, 16, 16), (16, 16, 256),
                                        "float32", None),
        "matrix-vector ij,j->i (2^24)": ("ij,j->i", (4096, 4096), (4096,), "float32", None),
        "plain float64": ("ij,jk->ik", (4096, 256), (256, 256), "float64", None),
        "plain bfloat16": ("ij,jk->ik", (4096, 256), (256, 256), "bfloat16", None),
        "rhs transposed bfloat16": ("ij,kj->ik", (4096, 256), (256, 256), "bfloat16", None),
        "plain bfloat16 -> float32": ("ij,jk->ik", (4096, 256), (256, 256), "bfloat16",
                                      "float32"),
        "plain int32": ("ij,jk->ik", (4096, 256), (256, 256), "int32", None),
        # XLA's DotDecomposer rewrites these into (m, k) x (k, n) products first
        "two free lhs dims abk,kn->abn": ("abk,kn->abn", (64, 64, 256), (256, 256),
                                          "float32", None),
        "two free lhs dims, rhs transposed abk,nk->abn": ("abk,nk->abn", (64, 64, 256),
                                                          (256, 256), "float32", None),
        "two contracting, rhs transposed ijk,ljk->il": ("ijk,ljk->il", (4096, 16, 16),
                                                        (256, 16, 16), "float32", None),
        "vector-matrix k,kn->n (2^24)": ("k,kn->n", (4096,), (4096, 4096), "float32", None),
        # jnp's `a @ b.T`: a transpose op, which StableHLO's folders compute, then a plain dot
        "a @ b.T": ("a@b.T", (4096, 256), (256, 256), "float32", None),
        "conv NHWC 3x3 (1,64,64,64)x(3,3,64,128)": ("conv", (1, 64, 64, 64), (3, 3, 64, 128),
                                                     "float32", None),
        "conv NHWC 1x1 (1,64,64,256)x(1,1,256,256)": ("conv", (1, 64, 64, 256),
                                                       (1, 1, 256, 256), "float32", None),
        # a batch of one, which XLA's BatchDotSimplification drops: the tables reshaped to
        # (1, m, k) and (1, k, n) (a captured (1, m, k) array is lowered as a broadcast,
        # and a dot of broadcasts does not fold; so is `[None]`)
        "one batch bij,bjk->bik": ("batch of one", (4096, 256), (256, 256), "float32", None),
    }


def multiply_adds(spec: str, lhs: tuple, rhs: tuple) -> int:
    if spec == "conv":  # SAME padding: every output pixel sees the whole window
        return int(np.prod(lhs[:3])) * int(np.prod(rhs))
    if spec == "a@b.T":
        spec = "ij,kj->ik"
    if spec == "batch of one":
        spec = "ij,jk->ik"
    ins, out = spec.split("->")
    sizes = dict(zip(ins.split(",")[0] + ins.split(",")[1], (*lhs, *rhs)))
    return int(np.prod([sizes[c] for c in set(ins.replace(",", ""))]))


def build(spec, lhs_shape, rhs_shape, dtype, result, folded: bool):
    """(fn, args) for `_compile_timing`: the contraction of two captured constants."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    kind = jnp.dtype(dtype)

    def table(shape):
        values = rng.standard_normal(shape).astype(np.float32)
        if jnp.issubdtype(kind, jnp.integer):
            values = np.round(values * 4)
        return np.asarray(values).astype(kind)

    a, b = table(lhs_shape), table(rhs_shape)

    def fn(ids, scale):
        left, right = jnp.asarray(a), jnp.asarray(b)
        if not folded:
            right = right * scale
        if spec == "a@b.T":
            out = left @ right.T
        elif spec == "batch of one":
            out = jax.lax.dot_general(left.reshape(1, *left.shape), right.reshape(1, *right.shape),
                                      (((2,), (1,)), ((0,), (0,))))
        elif spec == "conv":
            out = jax.lax.conv_general_dilated(left, right, (1, 1), "SAME",
                                               dimension_numbers=("NHWC", "HWIO", "NHWC"))
        else:
            out = jnp.einsum(spec, left, right, preferred_element_type=result)
        return out.reshape(-1)[ids].astype(jnp.float32).sum()

    return fn, (jnp.arange(16, dtype=jnp.int32), jnp.ones((), kind))


def multiply_build(op):
    import jax
    import jax.numpy as jnp

    table = np.random.default_rng(1).standard_normal((SIDE, SIDE)).astype(np.float32)

    def fn(ids):
        # in a call of its own: StableHLO's folders leave it to XLA's interpreter
        return jax.jit(op)(jnp.asarray(table)).reshape(-1)[ids].sum()

    return fn, (jnp.arange(16, dtype=jnp.int32),)


def selected(only: list[str] | None) -> dict:
    return {name: form for name, form in forms().items()
            if only is None or any(part in name for part in only)}


def programs(only: list[str] | None = None) -> dict:
    builds = {}
    for name, (spec, lhs, rhs, dtype, result) in selected(only).items():
        for folded in (True, False):
            key = name if folded else f"{name} (baseline)"
            builds[key] = (lambda s=spec, left=lhs, right=rhs, d=dtype, r=result, f=folded:
                           build(s, left, right, d, r, f))
    builds["multiply 4096^2 twice in XLA"] = lambda: multiply_build(lambda t: (t * 2.0) * t)
    builds["multiply (baseline)"] = lambda: multiply_build(lambda t: t)
    return builds


def predicted(only: list[str] | None = None) -> dict:
    import costmodel

    out = {}
    for name, (spec, lhs, rhs, dtype, result) in selected(only).items():
        fn, args = build(spec, lhs, rhs, dtype, result, True)
        prediction = costmodel.lower(fn, *args).predict()
        features = prediction.features
        out[name] = {"predicted_s": prediction.compile_seconds,
                     **{k: features[k] for k in ("fold_elements", "fold_dot_flops")}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--predict-only", action="store_true")
    parser.add_argument("--measured", type=Path,
                        help="with --predict-only: a timing run's JSON to set beside")
    parser.add_argument("--only", nargs="*", default=None,
                        help="time only the forms whose names contain one of these")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)  # the float64 form; every other dtype is explicit
    result = {"jax": jax.__version__, "cores": os.cpu_count()}
    if not args.predict_only:
        from _compile_timing import medians, with_reference

        times = with_reference(programs(args.only), args.rounds)
        median = medians(times)
        # two multiplies of two operands at full size each: 4 elements touched per element
        multiply_ns = ((median["multiply 4096^2 twice in XLA"] - median["multiply (baseline)"])
                       / (4 * SIDE * SIDE) * 1e9)
        rows = {}
        for name, (spec, lhs, rhs, _, _) in selected(args.only).items():
            macs = multiply_adds(spec, lhs, rhs)
            folding = median[name] - median[f"{name} (baseline)"]
            rows[name] = {"multiply_adds": macs, "measured_s": median[name],
                          "baseline_s": median[f"{name} (baseline)"], "folding_s": folding,
                          "ns_per_multiply_add": folding / macs * 1e9,
                          "against_multiply": folding / macs * 1e9 / multiply_ns}
            print(f"{name:46s} {median[name]:7.2f} s  baseline {rows[name]['baseline_s']:5.2f}"
                  f"  {rows[name]['ns_per_multiply_add']:6.2f} ns/MAC"
                  f"  {rows[name]['against_multiply']:5.2f} multiplies", flush=True)
        print(f"multiply in XLA: {multiply_ns:.1f} ns per element touched")
        result.update({"rounds": args.rounds, "seconds": times,
                       "multiply_ns_per_element": multiply_ns, "forms": rows})
    else:
        measured = json.loads(args.measured.read_text())["forms"] if args.measured else {}
        result["predicted"] = predicted(args.only)
        for name, row in result["predicted"].items():
            row["measured_s"] = measured.get(name, {}).get("measured_s")
            print(f"{name:46s} predicted {row['predicted_s']:6.2f} s"
                  f"  fold_elements {row['fold_elements']:.3g}"
                  + (f"  measured {row['measured_s']:6.2f} s" if row["measured_s"] else ""))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
