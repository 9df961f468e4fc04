"""The fresh-process factor of a chip model: what a program takes compiled in a process of
its own, over its chip label.

A chip label is a program's seconds at the average state of the long processes that
measured it (`device_labels`), where a compile runs faster the more the process compiled
before. A user's compile is most often early in a fresh process. `tpu_device_run.py
--fresh-each` compiles each program in a process of its own, as sweeps measure a row (the
compiler started with the reference program, then the program, repeated up to three
times); a long-process call on the same machine, the same hour (`--warm`), ties that
host's speed to the stored calls'. The factor is fitted in log space on the label:

    log(fresh seconds / (label * host factor)) = log(scale) + power * log(label)

and predictions apply it to their point at the labels' state, clipped to the labels'
range (`models.device_correction.FreshProcess`).

    python -m costmodel.training.fitting.device_fresh --model models/default/tpu-v5e \\
        --fresh bench/data/tpu_fresh/fresh*.jsonl --warm bench/data/tpu_fresh/warm1.jsonl \\
        --label-calls bench/data/tpu_device/call*.jsonl ... [--json F] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from costmodel.models.artifact import load
from costmodel.models.device_correction import CORRECTION_FILE, FreshProcess

from . import device_labels
from .device_card import write_section_line

# the model card's line on the factor starts so (a refit replaces it)
FRESH_START = "Predictions are for a fresh process"
MIN_PROGRAMS = 20


def fresh_rows(paths: Sequence[str | Path]) -> dict[str, dict]:
    """Each program's fresh-process figures over every file: its first compile's seconds
    and the median of each process's compiles (a sweep row's label), per process, with the
    first compile's host RSS growth and the reference's timings."""
    out: dict[str, dict] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if r.get("status") != "ok" or not r.get("fresh_process"):
                continue
            seen = out.setdefault(r["key"], {"first": [], "row": [], "rss": [], "ref": []})
            seen["first"].append(r["device_s"][0])
            seen["row"].append(statistics.median(r["device_s"]))
            seen["rss"].append(r["device_rss_bytes"])
            seen["ref"].extend(r["ref_device_s"])
    return out


def fit(fresh_paths: Sequence[str | Path], warm_paths: Sequence[str | Path],
        label_calls: Sequence[str | Path]) -> tuple[FreshProcess, dict]:
    """The factor and a report: the fit, its leave-one-out error, and the plain ratio's."""
    fresh = fresh_rows(fresh_paths)
    labels = device_labels.fit_labels(device_labels.observations(
        [*map(str, label_calls), *map(str, warm_paths)]))
    warm = {str(p) for p in warm_paths}
    host = [f for call, f in labels.call_factor.items() if call.split("#")[0] in warm]
    host_factor = math.exp(statistics.fmean(math.log(f) for f in host)) if host else 1.0
    keys = sorted(k for k in fresh if k in labels.seconds.index)
    if len(keys) < MIN_PROGRAMS:
        raise ValueError(f"{len(keys)} fresh-process programs have a chip label; "
                         f"{MIN_PROGRAMS} needed")
    label = np.array([float(labels.seconds[k]) for k in keys])
    ratio = np.array([statistics.median(fresh[k]["row"]) for k in keys]) / (label * host_factor)
    x, y = np.log(label), np.log(ratio)
    power, log_scale = np.polyfit(x, y, 1)
    held = []  # each program's miss with the fit made without it, by the law and by a constant
    for i in range(len(keys)):
        rest = np.arange(len(keys)) != i
        b, a = np.polyfit(x[rest], y[rest], 1)
        held.append((abs(y[i] - a - b * x[i]), abs(y[i] - np.median(y[rest]))))
    law, constant = (np.array(v) for v in zip(*held))
    first = np.array([statistics.median(fresh[k]["first"]) for k in keys]) / (label * host_factor)
    report = {"programs": len(keys), "processes": sum(len(fresh[k]["row"]) for k in keys),
              "host_factor": host_factor, "scale": float(math.exp(log_scale)),
              "power": float(power), "low_s": float(label.min()), "high_s": float(label.max()),
              "row_over_label_median": float(np.exp(np.median(y))),
              "first_over_label_median": float(np.median(first)),
              "held_out_fold": {"law": float(np.exp(np.median(law))),
                                "law_p90": float(np.exp(np.quantile(law, 0.9))),
                                "constant": float(np.exp(np.median(constant))),
                                "constant_p90": float(np.exp(np.quantile(constant, 0.9)))},
              "fresh_files": [str(p) for p in fresh_paths],
              "warm_files": [str(p) for p in warm_paths]}
    factor = FreshProcess(scale=report["scale"], power=report["power"],
                          low_s=report["low_s"], high_s=report["high_s"],
                          about={k: report[k] for k in (
                              "programs", "processes", "host_factor", "row_over_label_median",
                              "first_over_label_median", "held_out_fold")})
    return factor, report


def card_line(factor: FreshProcess) -> str:
    """The model card's line on the factor."""
    about = factor.about
    lo, hi = factor.factor([factor.high_s, factor.low_s])
    return (f"{FRESH_START}: a program compiled in a process of its own (the compiler "
            f"started, then the program, as sweeps measure a row), as a training script's "
            f"first jit or an AOT compile is. On the chip's host {about['programs']} programs "
            f"compiled that way took a median {about['row_over_label_median']:.2f}x their "
            f"labels (their first compile {about['first_over_label_median']:.2f}x), less for "
            f"longer compiles, so the prediction at the labels' state is multiplied by "
            f"{factor.scale:.2f} x s ^ {factor.power:.3f} (s its seconds, held to "
            f"{factor.low_s:.2f}-{factor.high_s:.1f} s: {lo:.2f}-{hi:.2f}x; each program "
            f"left out of the fit, median fold {about['held_out_fold']['law']:.2f}). "
            f"`Artifact.predict(..., process_state=\"warm\")` answers at the labels' state, "
            f"a process that has compiled about a hundred programs "
            f"(`training/fitting/device_fresh.py`).")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--fresh", nargs="+", required=True,
                        help="tpu_device_run.py --fresh-each rows")
    parser.add_argument("--warm", nargs="+", required=True,
                        help="a long-process call on the same machine, for its host factor")
    parser.add_argument("--label-calls", nargs="+", required=True,
                        help="the stored chip calls the correction's labels are fitted on")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    from .device_correction import install

    artifact = load(args.model)
    if artifact.device_correction is None:
        parser.error(f"{args.model} has no {CORRECTION_FILE}")
    factor, report = fit(args.fresh, args.warm, args.label_calls)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if not args.dry_run:
        correction = artifact.device_correction.with_fresh(factor)
        install(args.model, correction)
        write_section_line(args.model, card_line(factor), FRESH_START)
        print(f"installed {args.model / CORRECTION_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
