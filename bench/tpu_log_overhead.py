"""What turning libtpu's INFO log on costs a deviceless TPU compile, and what its stages explain.

libtpu reads its log levels once per process, so each configuration runs in processes of
its own, interleaved round by round: `off` (libtpu's defaults), `info`
(TPU_MIN_LOG_LEVEL=0 TPU_STDERR_LOG_LEVEL=0, what the harness sets:
`tpu_phases.LOG_ENV`) and `passes` (`info` plus TPU_VMODULE=hlo_pass_pipeline=1, the
opt-in per-pass times: `tpu_phases.PASS_LOG_ENV`). Each process warms the backend with
the reference program, then compiles every program `--compiles` times plain (each from a
fresh function object); with the log on, one more compile of each runs under
`TpuStageLog`, the capture the harness uses. Reports per configuration the median compile
seconds (wall, and CPU seconds of all the process's threads, which the machine's other
load moves less) per program over those of the first configuration named, the captured
compile over the plain ones of its own process, and the share of the wall the four
stages cover.

    python bench/tpu_log_overhead.py --rounds 4 --configs off,info
    # writes bench/results/tpu_log_overhead_off_info.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROGRAMS = (  # TPU compiles of 0.5-1 s in the shipped deviceless rows
    ("mlp", {"batch": 1, "depth": 32, "grad": True, "width": 256}),
    ("adam", {"clip": True, "layers": 8, "width": 16}),
    ("resnet", {"blocks": 6, "channels": 8, "grad": False, "image": 16}),
)
CONFIGS = {
    "off": {},
    "info": None,  # tpu_phases.LOG_ENV and PASS_LOG_ENV, filled in by main()
    "passes": None,
}
RESULTS = Path(__file__).with_name("results")


def child(config: str, compiles: int) -> dict:
    """Runs in a fresh process whose environment already holds the configuration."""
    os.environ.update(JAX_PLATFORMS="cpu", JAX_ENABLE_COMPILATION_CACHE="false")
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    from costmodel.measure.harness import CompileEvents, compile_once, placement
    from costmodel.measure.reference import build_reference
    from costmodel.measure.tpu_phases import TpuStageLog, module_name
    from costmodel.training import corpus

    events, place = CompileEvents(), placement("tpu", "v5e")
    compile_once(build_reference, place, events)
    out = {}
    for family, params in PROGRAMS:
        spec = corpus.get_family(family)

        def build(spec=spec, params=params):
            return spec.build(**params)

        plain, cpu = [], []
        for _ in range(compiles):
            start = time.process_time()  # all threads: contention moves wall, not this
            plain.append(compile_once(build, place, events)[1])
            cpu.append(time.process_time() - start)
        result = {"plain": plain, "cpu": cpu}
        if config != "off":
            fn, args = build()
            lowered = place.lower(fn, args)[1]
            with TpuStageLog(module_name(lowered)) as log:
                start = time.perf_counter()
                lowered.compile()
                wall = time.perf_counter() - start
            result.update(captured=wall, stages=log.seconds, passes=log.passes, error=log.error)
        out[f"{family}|{json.dumps(params, sort_keys=True)}"] = result
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compiles", type=int, default=2)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--out", help="default: results/tpu_log_overhead_<configs>.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.compiles)), flush=True)
        return
    from costmodel.measure.machine import environment
    from costmodel.measure.tpu_phases import LOG_ENV, PASS_LOG_ENV, STAGES

    CONFIGS.update(info=LOG_ENV, passes={**LOG_ENV, **PASS_LOG_ENV})
    configs = args.configs.split(",")
    runs = {name: [] for name in configs}
    for round_ in range(args.rounds):
        names = configs if round_ % 2 == 0 else configs[::-1]
        for name in names:
            env = {k: v for k, v in os.environ.items() if k not in CONFIGS["passes"]}
            # two deviceless libtpu processes at once need this (libtpu's machine-wide lock)
            env.update(CONFIGS[name], ALLOW_MULTIPLE_LIBTPU_LOAD="1")
            done = subprocess.run([sys.executable, __file__, "--child", name,
                                   "--compiles", str(args.compiles)], env=env, check=True,
                                  capture_output=True, text=True)
            line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
            runs[name].append(json.loads(line[len("RESULT "):]))
            print(f"round {round_ + 1}/{args.rounds} {name} done", flush=True)
    programs = list(runs[configs[0]][0])
    base = configs[0]  # ratios are over the first configuration named
    off = {p: statistics.median(s for r in runs[base] for s in r[p]["plain"]) for p in programs}
    off_cpu = {p: statistics.median(s for r in runs[base] for s in r[p]["cpu"])
               for p in programs}
    summary = {"command": f"python bench/tpu_log_overhead.py --rounds {args.rounds} "
                          f"--compiles {args.compiles} --configs {args.configs}",
               "machine": {k: environment()[k] for k in ("cpu_model", "cpu_count", "jax_version")},
               "base": base, "base_seconds": off, "configs": {}}
    for name in configs:
        plain = {p: statistics.median(s for r in runs[name] for s in r[p]["plain"])
                 for p in programs}
        cpu = {p: statistics.median(s for r in runs[name] for s in r[p]["cpu"]) for p in programs}
        entry = {"plain_seconds": plain, "over_base": {p: plain[p] / off[p] for p in programs},
                 "cpu_seconds": cpu, "cpu_over_base": {p: cpu[p] / off_cpu[p] for p in programs}}
        if "captured" in runs[name][0][programs[0]]:
            captured = [(r[p]["captured"], r[p]["stages"], p) for r in runs[name] for p in programs]
            entry["captured_over_plain"] = {p: statistics.median(
                w / plain[q] for w, _, q in captured if q == p) for p in programs}
            entry["stage_share_of_wall"] = {stage: statistics.median(
                s[stage] / w for w, s, _ in captured if s.get(stage) is not None)
                for stage in STAGES}
            entry["errors"] = sorted({r[p]["error"] for r in runs[name] for p in programs} - {""})
            entry["top_passes_last"] = {p: runs[name][-1][p]["passes"] for p in programs}
        summary["configs"][name] = entry
        print(name, {p.split("|")[0]: round(v, 3) for p, v in entry["over_base"].items()},
              {k: {p.split("|")[0]: round(v, 3) for p, v in entry.get(k, {}).items()}
               for k in ("cpu_over_base", "captured_over_plain", "stage_share_of_wall")})
    out = Path(args.out or RESULTS / f"tpu_log_overhead_{'_'.join(configs)}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**summary, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
