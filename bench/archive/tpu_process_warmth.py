"""How a chip compile's seconds depend on how much its process compiled before: the
position factors `device_labels` fits, the reference program's seconds by position, and
the corpus's second pass over its first by position in the second (no compile; stored rows).

    python bench/archive/tpu_process_warmth.py [--json bench/results/tpu_process_warmth.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import statistics
from pathlib import Path

import numpy as np

from costmodel.training.fitting import device_labels as dl

CORPUS = sorted(glob.glob("bench/data/tpu_device/*.jsonl"))
OUTSIDE = ["bench/data/tpu_outside/normalized.jsonl"]
# the corpus programs' second pass (calls 18-20)
SECOND = {"bench/data/tpu_device/again1.jsonl", "bench/data/tpu_device/again1b.jsonl",
          "bench/data/tpu_device/again2.jsonl"}


def _bin(position: int) -> int:
    return int(np.digitize(position, dl.POSITION_EDGES) - 1)


def reference_by_position(paths) -> list[dict]:
    seconds: dict[int, list[float]] = {}
    for _, position, r in dl.positioned(paths):
        seconds.setdefault(_bin(position), []).extend(r.get("ref_device_s") or [])
    return [{"from": dl.POSITION_EDGES[b], "n": len(v), "median_s": statistics.median(v)}
            for b, v in sorted(seconds.items()) if v]


def second_pass_by_position(obs) -> list[dict]:
    """A second pass's seconds over the same program's earlier passes (their median)."""
    earlier: dict[str, list[float]] = {}
    for o in obs:
        if o.process.split("#")[0] not in SECOND:
            earlier.setdefault(o.key, []).append(o.log_seconds)
    ratios: dict[int, list[float]] = {}
    for o in obs:
        if o.process.split("#")[0] in SECOND and o.key in earlier:
            ratios.setdefault(_bin(o.position), []).append(
                o.log_seconds - float(np.median(earlier[o.key])))
    return [{"from": dl.POSITION_EDGES[b], "n": len(v), "ratio": float(np.exp(np.median(v)))}
            for b, v in sorted(ratios.items())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    paths = [p for p in CORPUS if "rss1" not in p] + OUTSIDE
    obs = dl.observations(paths)
    labels = dl.fit_labels(obs)
    by_key: dict[str, list[float]] = {}
    for o in obs:
        by_key.setdefault(o.key, []).append(o.log_seconds)
    spread = [abs(o.log_seconds - np.mean(by_key[o.key])) for o in obs if len(by_key[o.key]) > 1]
    out = {"observations": len(obs), "programs": len(by_key),
           "programs_seen_twice": sum(len(v) > 1 for v in by_key.values()),
           "position_factor": dict(zip(map(str, dl.POSITION_EDGES),
                                       (round(float(f), 3) for f in labels.position_factor))),
           "residual_fold": {"program_only": float(np.exp(np.median(spread))),
                             "program_position_call": labels.residual_fold},
           "reference_by_position": reference_by_position(paths),
           "second_pass_by_position": second_pass_by_position(obs)}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
