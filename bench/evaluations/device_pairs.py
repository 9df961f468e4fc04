"""Deviceless against on-device GPU compiles of the same programs, on one machine with an
NVIDIA GPU (the `device` tool's H200, in a session lent one).

The H100 model is trained on deviceless compiles: XLA compiling for the H100's target
description on a machine without a GPU, which skips autotuning. A user with a GPU waits
for the on-device compile. `run` compiles each program of the library and unseen benches
on the GPU machine three ways: on the GPU (XLA's defaults, autotuning on) and deviceless
for the H100 target on that machine's CPU, interleaved in each round; then, in a second
process started with `--xla_gpu_autotune_level=0`, on the GPU without autotuning. The
reference program is compiled deviceless in every round of both processes, so the model's
predictions can be scaled to that machine as `costmodel calibrate` would. Rows go to one
JSON-lines file per process as they are measured, so a run stopped by its time budget
keeps what it finished.

    python bench/evaluations/device_pairs.py run --out DIR [--rounds 2] [--budget-s 300]  # GPU machine
    python bench/evaluations/device_pairs.py score DIR/*.jsonl [--json bench/results/device_pairs.json]

A process with the GPU hidden (`CUDA_VISIBLE_DEVICES=`, `JAX_SKIP_CUDA_CONSTRAINTS_CHECK=1`,
`child --mode autotune`, its rows' mode renamed `no_gpu`) compiles deviceless as the
training sweeps do, on a machine without a GPU; `score` reads such rows as a check that a
GPU in the process does not change the deviceless compile. `score` needs no GPU: it reads
the rows and the stored model inputs of the H100 benches (`bench/results/*_h100.json`).

Run on the `device` tool's H200 (jax 0.11.2 and its CUDA 13 plugin there, this tree copied
onto its `PYTHONPATH`, `COSTMODEL_GPU_TARGETS` pointing at a carried copy of the target
descriptions); the rows are in `bench/data/device_pairs/`.
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

HERE = Path(__file__).resolve().parent
STORED = (HERE.parent / "results" / "library_programs_h100.json",
          HERE.parent / "results" / "unseen_programs_h100.json")
MODES = {"autotune": "", "no_autotune": "--xla_gpu_autotune_level=0"}
REFERENCE = "(reference)"


def programs() -> dict:
    """name -> build, the library bench's then the unseen bench's programs."""
    sys.path.insert(0, str(HERE))
    import library_programs
    import unseen_programs

    return {**library_programs.PROGRAMS, **unseen_programs.PROGRAMS}


def smallest_first(names) -> list[str]:
    """Programs in the order of their stored deviceless seconds, so a budget cuts the
    largest; programs with no stored time (not lowerable deviceless here) go last."""
    stored = {}
    for path in STORED:
        for row in json.loads(path.read_text())["results"]:
            stored[row["program"]] = row["measured_s"]
    return sorted(names, key=lambda n: stored.get(n, float("inf")))


def environment() -> dict:
    import jax

    try:
        gpu = jax.devices("gpu")[0].device_kind
    except RuntimeError:  # a dry run on a machine without one: both placements deviceless
        gpu = None
    return {"jax": jax.__version__, "gpu": gpu, "cpu_count": os.cpu_count(),
            "xla_flags": os.environ.get("XLA_FLAGS", "")}


def compile_seconds(build, place) -> float:
    """One compile of a fresh program. Timed around `compile()` itself rather than read
    from jax's compile event (`harness.compile_once`), whose name the GPU machine's newer
    jax may not share; a new function object each time keeps jax's caches out."""
    fn, args = build()
    lowered = place.lower(fn, args)[1]
    start = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - start


def measure(mode: str, out: Path, rounds: int, deadline: float) -> None:
    """One process's compiles: round by round, each program on the GPU (and deviceless for
    the H100 in mode autotune), the reference program deviceless in every round."""
    import jax

    from costmodel.measure.gpu_target import deviceless_sharding, gpu_sharding
    from costmodel.measure.harness import Placement
    from costmodel.measure.reference import build_reference

    jax.config.update("jax_enable_compilation_cache", False)
    device = Placement("gpu", "h100", gpu_sharding("h100")[0], False)
    deviceless = Placement("gpu", "h100", deviceless_sharding("h100"), True)
    places = {"device": device, "deviceless": deviceless} if mode == "autotune" else {"device": device}
    builds = programs()
    order = smallest_first(builds)
    with open(out / f"{mode}.jsonl", "a") as rows:
        def record(**row) -> None:
            rows.write(json.dumps({"mode": mode, **row}) + "\n")
            rows.flush()

        record(environment=environment())
        compile_seconds(build_reference, deviceless)  # first-compile costs off the clock
        for round_ in range(rounds):
            record(program=REFERENCE, placement="deviceless", round=round_,
                   seconds=compile_seconds(build_reference, deviceless))
            for name in order:
                if time.monotonic() > deadline:
                    record(stopped=f"budget spent in round {round_} before {name}")
                    return
                for where, place in places.items():
                    try:
                        seconds = compile_seconds(builds[name], place)
                    except Exception as exc:  # a library missing there, or a program XLA refuses
                        record(program=name, placement=where, round=round_,
                               error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                        continue
                    record(program=name, placement=where, round=round_, seconds=seconds)
                    print(f"{mode} round {round_} {where:<10} {seconds:7.2f} s  {name}", flush=True)


def run(out: Path, rounds: int, budget_s: float) -> None:
    """Both processes, the autotuned one given two thirds of the budget (it compiles twice
    per program)."""
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    shares = {"autotune": 2 / 3, "no_autotune": 1.0}
    for mode, flags in MODES.items():
        env = {**os.environ, "XLA_FLAGS": " ".join(filter(None, [os.environ.get("XLA_FLAGS", ""), flags]))}
        deadline = start + budget_s * shares[mode]
        subprocess.run([sys.executable, __file__, "child", "--mode", mode, "--out", str(out),
                        "--rounds", str(rounds), "--deadline", str(deadline - time.monotonic())],
                       env=env, check=False)


def medians(rows: list[dict]) -> dict[tuple[str, str, str], float]:
    """(mode, placement, program) -> median seconds over the rounds measured."""
    seconds: dict[tuple[str, str, str], list[float]] = {}
    for row in rows:
        if "seconds" in row:
            seconds.setdefault((row["mode"], row["placement"], row["program"]), []).append(row["seconds"])
    return {key: statistics.median(values) for key, values in seconds.items()}


def stored_inputs() -> dict[str, dict]:
    inputs = {}
    for path in STORED:
        for row in json.loads(path.read_text())["results"]:
            inputs[row["program"]] = {"model_inputs": row["model_inputs"],
                                      "here_deviceless_s": row["measured_s"]}
    return inputs


def score(rows: list[dict], model=None) -> dict:
    """Per program: deviceless, on-device and untuned on-device seconds on the GPU machine,
    the H100 model's prediction scaled by the reference program timed there; and the
    summaries of their ratios."""
    import numpy as np

    from costmodel.models import load_default
    from costmodel.training.evaluation.metrics import coverage, fold_errors, median_fold
    from costmodel.training.evaluation.outside import speed_scale

    model = model or load_default("gpu", "h100")
    med = medians(rows)
    reference = med[("autotune", "deviceless", REFERENCE)]
    scale = speed_scale(model, reference)
    stored = stored_inputs()
    names = [p for (mode, where, p) in med if mode == "autotune" and where == "device"
             and ("autotune", "deviceless", p) in med]
    known = [n for n in names if n in stored]  # the rest did not lower deviceless here
    predicted = model.predict([stored[n]["model_inputs"] for n in known])["compile_seconds"]
    point, lo, hi = (dict(zip(known, np.asarray(predicted[k]) * scale)) for k in ("point", "lo", "hi"))
    table = []
    for name in names:
        entry = {"program": name, "deviceless_s": med[("autotune", "deviceless", name)],
                 "device_s": med[("autotune", "device", name)],
                 "device_no_autotune_s": med.get(("no_autotune", "device", name))}
        if ("no_gpu", "deviceless", name) in med:
            entry["deviceless_no_gpu_s"] = med[("no_gpu", "deviceless", name)]
        if name in point:
            entry.update(predicted_s=float(point[name]), interval_s=[float(lo[name]), float(hi[name])],
                         here_deviceless_s=stored[name]["here_deviceless_s"])
        table.append(entry)

    def ratio(a: str, b: str) -> dict:
        pairs = [(e[a], e[b]) for e in table if e.get(a) is not None and e.get(b) is not None]
        r = np.array([x / y for x, y in pairs])
        return {"programs": len(r), "median": float(np.median(r)), "min": float(r.min()),
                "max": float(r.max()), "geometric_mean": float(np.exp(np.log(r).mean()))}

    predicted_rows = [e for e in table if "predicted_s" in e]

    def against(label: str) -> dict:
        pred = np.array([e["predicted_s"] for e in predicted_rows])
        actual = np.array([e[label] for e in predicted_rows])
        return {"median_fold": median_fold(pred, actual),
                "max_fold": float(fold_errors(pred, actual).max()),
                "measured_over_predicted": float(np.median(actual / pred)),
                "coverage_90": coverage(np.array([e["interval_s"][0] for e in predicted_rows]),
                                        np.array([e["interval_s"][1] for e in predicted_rows]), actual)}

    environments = {row["mode"]: row["environment"] for row in rows if "environment" in row}
    return {"model": model.version, "environments": environments, "reference_s": reference,
            "speed_scale": scale, "programs": table,
            "device_over_deviceless": ratio("device_s", "deviceless_s"),
            "no_autotune_over_deviceless": ratio("device_no_autotune_s", "deviceless_s"),
            "device_over_no_autotune": ratio("device_s", "device_no_autotune_s"),
            "deviceless_there_over_here": ratio("deviceless_s", "here_deviceless_s"),
            **({"deviceless_no_gpu_over_with_gpu": ratio("deviceless_no_gpu_s", "deviceless_s")}
               if any("deviceless_no_gpu_s" in e for e in table) else {}),
            "model_vs_deviceless_there": against("deviceless_s"),
            "model_vs_device": against("device_s"),
            "stopped": [row["stopped"] for row in rows if "stopped" in row],
            "errors": {row["program"]: row["error"] for row in rows if "error" in row}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    run_p = sub.add_parser("run")
    run_p.add_argument("--out", type=Path, required=True)
    run_p.add_argument("--rounds", type=int, default=2)
    run_p.add_argument("--budget-s", type=float, default=300.0)
    child = sub.add_parser("child")
    child.add_argument("--mode", choices=tuple(MODES), required=True)
    child.add_argument("--out", type=Path, required=True)
    child.add_argument("--rounds", type=int, default=2)
    child.add_argument("--deadline", type=float, required=True, help="seconds from now")
    score_p = sub.add_parser("score")
    score_p.add_argument("rows", nargs="+", type=Path)
    score_p.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.step == "run":
        run(args.out, args.rounds, args.budget_s)
    elif args.step == "child":
        measure(args.mode, args.out, args.rounds, time.monotonic() + args.deadline)
    else:
        rows = [json.loads(line) for path in args.rows for line in path.read_text().splitlines()]
        report = score(rows)
        print(json.dumps({k: v for k, v in report.items() if k != "programs"}, indent=1))
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
