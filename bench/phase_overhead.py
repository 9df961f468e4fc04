"""What tracing a compile's phases costs, and how much of the compile the phases explain.

Compiles each of 8 corpus programs (0.05-5 s compiles on the sweep machine) with and
without the `PhaseTrace` the harness uses for its phase columns, interleaved in one
process (plain and traced alternate which goes first, program order reverses on every
repeat), each compile from a fresh function object. Reports per program the median
traced/plain ratio of the timed compile, the profiler's start/stop/read time outside it,
and the share of the traced compile's wall time that the sequential phases (HLO passes
through and after layout assignment, RunBackend) leave unexplained.

    python bench/phase_overhead.py --repeats 9   # writes bench/results/phase_overhead.json

Measured 2026-12-01 (2-core Xeon, jax 0.10.2, shared machine; compiles 0.09-5.2 s here):
traced/plain median 1.009 over programs (0.925-1.089; all 72 pairs 1.010), so the trace
costs no more than the noise of one pair (0.56-1.45) lets us see. Starting, stopping and
reading the trace adds 7-189 ms outside the compile. The three sequential phases leave a
median 6.3% (2.7-11%) of the traced wall unexplained, 1.8-8.9% of it outside XLA's client
compile altogether (JAX's Python side): the smaller the program, the larger the share.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from costmodel.training.measure.child import configure

PROGRAMS = (  # (family, params, compile seconds in the shipped CPU rows)
    ("cnn", {"channels": 32, "depth": 2, "grad": False, "image": 16}, 0.05),
    ("lstm", {"grad": False, "hidden": 32, "steps": 2, "style": "scan"}, 0.10),
    ("resnet", {"blocks": 2, "channels": 32, "grad": False, "image": 32}, 0.20),
    ("gnn", {"aggregate": "max", "grad": True, "layers": 4, "nodes": 64}, 0.40),
    ("ode_rk4", {"dim": 8, "grad": True, "steps": 4, "style": "unrolled"}, 0.80),
    ("vit", {"depth": 8, "grad": True, "patch": 8, "width": 64}, 1.48),
    ("beam_search", {"beam": 4, "steps": 64, "style": "unrolled", "vocab": 8192}, 2.86),
    ("transformer", {"layers": 8, "mode": "train", "seq": 16, "width": 64}, 4.62),
)
OUT = Path(__file__).with_name("results") / "phase_overhead.json"


def builder(family: str, params: dict):
    """A `build()` for compile_once: a fresh program each call, in its family's x64 mode."""
    import jax

    from costmodel.training import corpus

    spec = corpus.get_family(family)

    def build():
        jax.config.update("jax_enable_x64", bool(spec.x64))
        return spec.build(**params)

    return build


def timed(build, place, events, traced: bool) -> dict:
    """One compile, plain or under a PhaseTrace: its seconds and (traced) its phases."""
    from costmodel.measure.harness import compile_once
    from costmodel.measure.phases import PhaseTrace

    trace = PhaseTrace() if traced else None
    start = time.perf_counter()
    lower_s, compile_s, *_ = compile_once(build, place, events, trace=trace)
    outside = time.perf_counter() - start - lower_s - compile_s
    result = {"seconds": compile_s, "outside_seconds": outside}
    if trace is not None:
        result.update(phases=trace.seconds, passes=trace.passes, error=trace.error)
    return result


def summarize(family: str, params: dict, shipped: float, plain: list, traced: list) -> dict:
    from costmodel.measure.phases import PHASES, explained_seconds

    ratios = [t["seconds"] / p["seconds"] for p, t in zip(plain, traced)]
    unexplained = [1 - explained_seconds(t["phases"]) / t["seconds"] for t in traced]
    outside_xla = [1 - t["phases"]["xla"] / t["seconds"] for t in traced]
    phases = {p: statistics.median(t["phases"][p] for t in traced)
              if all(t["phases"][p] is not None for t in traced) else None for p in PHASES}
    return {
        "family": family, "params": params, "shipped_compile_seconds": shipped,
        "plain_seconds": [p["seconds"] for p in plain],
        "traced_seconds": [t["seconds"] for t in traced],
        "ratio_median": statistics.median(ratios), "ratios": ratios,
        "trace_outside_seconds_median": statistics.median(t["outside_seconds"] for t in traced),
        "unexplained_share_median": statistics.median(unexplained),
        "outside_xla_share_median": statistics.median(outside_xla),
        "phase_seconds_median": phases,
        "top_passes_last": traced[-1]["passes"],
        "errors": sorted({t["error"] for t in traced if t["error"]}),
    }


def started_cpu(description: str, out: Path):
    """(args, events, place) for a CPU timing bench: `--repeats` and `--out` parsed, the
    persistent cache off, the backend started by one reference compile off every clock."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(out))
    args = parser.parse_args()
    configure({"backend": "cpu"})
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    from costmodel.measure.harness import CompileEvents, compile_once, placement
    from costmodel.measure.reference import build_reference

    events, place = CompileEvents(), placement("cpu", "")
    compile_once(build_reference, place, events)
    return args, events, place


def main() -> None:
    args, events, place = started_cpu(__doc__.splitlines()[0], OUT)
    from costmodel.measure.machine import environment

    builds = [builder(family, params) for family, params, _ in PROGRAMS]
    plain = [[] for _ in PROGRAMS]
    traced = [[] for _ in PROGRAMS]
    started = time.perf_counter()
    for repeat in range(args.repeats):
        order = range(len(PROGRAMS)) if repeat % 2 == 0 else reversed(range(len(PROGRAMS)))
        for i in order:
            first_traced = (repeat + i) % 2 == 1
            for is_traced in (first_traced, not first_traced):
                result = timed(builds[i], place, events, is_traced)
                (traced if is_traced else plain)[i].append(result)
        print(f"repeat {repeat + 1}/{args.repeats} done ({time.perf_counter() - started:.0f} s)",
              flush=True)
    programs = [summarize(family, params, shipped, plain[i], traced[i])
                for i, (family, params, shipped) in enumerate(PROGRAMS)]
    ratios = [p["ratio_median"] for p in programs]
    unexplained = [p["unexplained_share_median"] for p in programs]
    env = environment()
    summary = {
        "command": f"python bench/phase_overhead.py --repeats {args.repeats}",
        "repeats": args.repeats,
        "machine": {k: env[k] for k in ("cpu_model", "cpu_count", "jax_version")},
        "ratio_median_over_programs": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "ratio_median_all_pairs": statistics.median(r for p in programs for r in p["ratios"]),
        "trace_outside_seconds_median": statistics.median(
            p["trace_outside_seconds_median"] for p in programs),
        "unexplained_share_median": statistics.median(unexplained),
        "unexplained_share_range": [min(unexplained), max(unexplained)],
        "programs": programs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    for p in programs:
        print(f"{p['family']:12s} plain {statistics.median(p['plain_seconds']):7.3f} s  "
              f"traced/plain {p['ratio_median']:.3f}  unexplained {p['unexplained_share_median']:.1%}  "
              f"outside xla {p['outside_xla_share_median']:.1%}")
    print(f"median ratio {summary['ratio_median_over_programs']:.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f}); unexplained share median "
          f"{summary['unexplained_share_median']:.1%}; wrote {args.out}")


if __name__ == "__main__":
    main()
