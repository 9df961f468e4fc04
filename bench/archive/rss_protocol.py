"""Does the host-memory label measure the compile? The harness's RSS label against a
second protocol, on 20 corpus programs of 1-400 MB label.

Arms, each a fresh process per program, run interleaved program by program:
  label     the harness as sweeps run it (`run_child`: forked from the zygote, backend
            warmed with the reference program twice, features extracted, then the peak RSS
            growth of the first compile of the program), run twice for its own noise;
  trivial   a fresh interpreter: one trivial compile (backend start-up), lower the
            program, `gc.collect()`, then the same sampled first compile;
  reference as `trivial`, but warmed with the harness's reference program (twice), so
            the two second-protocol arms differ only in the warm-up.

    python bench/archive/rss_protocol.py          # writes bench/results/rss_protocol.json

Measured 2026-12-01 (2-core Xeon, jax 0.10.2, shared machine): the label agrees with the
second protocol when both warm up alike (label/reference median 0.98, IQR 0.86-1.53; the
label against its own repeat: 0.97, IQR 0.91-1.03, range 0.25-1.44, the wide ends all on
labels under 2 MB). With a trivial warm-up the first real compile still pays a median
15 MB (3-39 MB) of one-time start-up that the reference warm-up has already paid
(label/trivial median 0.53; 0.03-0.1 on labels under 2 MB). So the label does not carry
backend start-up memory; it needs no fix and no rows need re-measuring.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROGRAMS = (  # (family, params, peak_rss MB in the shipped CPU rows)
    ("scan_seed", {"length": 10, "mode": "grad", "width": 16}, 1.0),
    ("assoc_scan", {"grad": True, "length": 4, "op": "add"}, 1.4),
    ("nested_scan", {"body": 4, "depth": 3, "grad": False, "length": 128}, 1.9),
    ("triangular_solve", {"grad": False, "n": 16, "nbatch": 4, "rhs": 1}, 2.6),
    ("eigh", {"grad": False, "n": 8, "nbatch": 2, "outputs": "values"}, 3.5),
    ("remat", {"blocks": 4, "layers": 1, "policy": "none", "width": 256}, 4.9),
    ("beam_search", {"beam": 4, "steps": 4, "style": "scan", "vocab": 512}, 6.6),
    ("random_split", {"impl": "threefry2x32", "length": 16, "mode": "fold_in"}, 9.1),
    ("lookup_table", {"count": 8, "grad": False, "mode": "interp", "size": 1024}, 12.5),
    ("bcoo_power", {"grad": False, "matvecs": 64, "n": 4096, "nnz_per_row": 4}, 17.1),
    ("dropout_mlp", {"depth": 16, "grad": False, "impl": "rbg", "width": 256}, 23.4),
    ("constants", {"count": 1, "mode": "matmul", "size": 4194304}, 32.2),
    ("cnn", {"channels": 8, "depth": 16, "grad": True, "image": 64}, 43.8),
    ("loop", {"body": 2, "steps": 500, "style": "unrolled", "unroll": 1, "width": 256}, 60.0),
    ("resnet", {"blocks": 3, "channels": 8, "grad": True, "image": 16}, 82.6),
    ("experts", {"branches": 16, "grad": True, "mode": "vmap", "width": 128}, 101.9),
    ("transformer", {"layers": 4, "mode": "train", "seq": 128, "width": 512}, 113.4),
    ("lstm", {"grad": False, "hidden": 32, "steps": 128, "style": "unrolled"}, 163.4),
    ("pytree_map", {"grad": False, "leaf_size": 1024, "leaves": 1024, "ops": 4}, 172.5),
    ("vit", {"depth": 12, "grad": True, "patch": 4, "width": 192}, 193.4),
)
ARMS = ("label", "label_again", "trivial", "reference")
OUT = Path(__file__).resolve().parents[1] / "results" / "rss_protocol.json"
MB = 2**20


def second_protocol(family: str, params: dict, warmup: str) -> dict:
    """In this fresh process: warm up, lower, collect garbage, sample the first compile."""
    from costmodel.training.measure.child import configure

    configure({"backend": "cpu"})
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_compilation_cache", False)
    from costmodel.measure.harness import CompileEvents, RssSampler, compile_once, placement
    from costmodel.measure.reference import build_reference
    from costmodel.training import corpus

    events, place = CompileEvents(), placement("cpu", "")
    start_rss = RssSampler().rss()
    with RssSampler() as startup:
        if warmup == "trivial":
            jax.jit(lambda x: x + 1.0).lower(jnp.zeros(2, jnp.float32)).compile()
        else:  # as the harness warms up
            compile_once(build_reference, place, events)
            compile_once(build_reference, place, events)
    _, lowered = corpus.lower(place, family, params)
    gc.collect()
    with RssSampler() as sampler:
        baseline = sampler.rss()
        lowered.compile()
    return {"peak_rss_bytes": max(0, sampler.peak - baseline), "baseline_rss_bytes": baseline,
            "warmup_growth_bytes": max(0, startup.peak - start_rss)}


def run_arm(arm: str, family: str, params: dict) -> dict:
    """One fresh process of `arm` for one program: its peak RSS growth (or why none)."""
    if arm.startswith("label"):
        from costmodel.training.measure.runner import run_child

        row = run_child({"family": family, "params": params, "max_repeats": 1,
                         "trace_phases": False})
        return {"status": row["status"], "peak_rss_bytes": row.get("peak_rss_bytes"),
                "message": row.get("message", "")}
    spec = json.dumps({"family": family, "params": params, "warmup": arm})
    done = subprocess.run([sys.executable, __file__, "--child", spec], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        return {"status": "error", "peak_rss_bytes": None, "message": done.stderr[-500:]}
    return {"status": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}


def ratios(programs: list, num: str, den: str) -> list[float]:
    return [p[num]["peak_rss_bytes"] / p[den]["peak_rss_bytes"] for p in programs
            if p[num]["peak_rss_bytes"] and p[den]["peak_rss_bytes"]]


def spread(values: list[float]) -> dict:
    ordered = sorted(values)
    quart = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else ordered * 3
    return {"median": statistics.median(ordered), "q1": quart[0], "q3": quart[2],
            "min": ordered[0], "max": ordered[-1], "n": len(ordered)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)  # a second-protocol process
    parser.add_argument("--limit", type=int, default=len(PROGRAMS))
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(second_protocol(spec["family"], spec["params"], spec["warmup"])))
        return
    from costmodel.measure.machine import environment

    programs = []
    started = time.perf_counter()
    for n, (family, params, shipped) in enumerate(PROGRAMS[:args.limit]):
        order = ARMS if n % 2 == 0 else ARMS[::-1]  # neither arm always runs first
        result = {"family": family, "params": params, "shipped_peak_rss_mb": shipped}
        result.update({arm: run_arm(arm, family, params) for arm in order})
        programs.append(result)
        print(f"{family:16s} " + "  ".join(
            f"{arm} {(result[arm]['peak_rss_bytes'] or 0) / MB:7.1f} MB" for arm in ARMS)
            + f"  ({time.perf_counter() - started:.0f} s)", flush=True)
    env = environment()
    summary = {
        "command": "python bench/archive/rss_protocol.py",
        "machine": {k: env[k] for k in ("cpu_model", "cpu_count", "jax_version")},
        "label_over_trivial": spread(ratios(programs, "label", "trivial")),
        "label_over_reference": spread(ratios(programs, "label", "reference")),
        "reference_over_trivial": spread(ratios(programs, "reference", "trivial")),
        "label_over_label_again": spread(ratios(programs, "label", "label_again")),
        "trivial_warmup_growth_mb": spread([p["trivial"]["warmup_growth_bytes"] / MB
                                            for p in programs if "warmup_growth_bytes" in p["trivial"]]),
        "reference_warmup_growth_mb": spread([p["reference"]["warmup_growth_bytes"] / MB
                                              for p in programs
                                              if "warmup_growth_bytes" in p["reference"]]),
        "programs": programs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    for name in ("label_over_trivial", "label_over_reference", "reference_over_trivial",
                 "label_over_label_again"):
        s = summary[name]
        print(f"{name:24s} median {s['median']:.3f}  IQR {s['q1']:.3f}-{s['q3']:.3f}  "
              f"range {s['min']:.3f}-{s['max']:.3f}  (n={s['n']})")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
