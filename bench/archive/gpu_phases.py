"""Where a deviceless H100 compile spends its time, on a sample of the H100 corpus.

The H100 model under-predicts its largest misses 3-16x (a gymnax PPO update: 229 s
measured, 14.5 s predicted), and the H100 rows carry no phase labels: XLA:GPU compiles on
the calling thread, whose trace line `measure/phases.py` did not read before
2026-12-04, so every traced H100 row came back with no phases. This bench traces one
compile per sampled row (the three sizes nearest each family's smallest, median and
largest recorded compile between `--min-seconds` and `--max-seconds`), in one process,
with `PhaseTrace`, and reports each phase's share of the compile: the HLO pipeline, its
`priority-fusion` pass, the backend (LLVM IR, PTX, cubin). It also shows how the fusion
pass's seconds follow the size counts the model has (log-log correlation over the
sampled rows).

    python bench/archive/gpu_phases.py --out bench/data/gpu_phases.jsonl [--json OUT.json]

Resumable (rows already in `--out` are skipped). Needs the gpu extra and a target
description (`measure/gpu_target.py`); about 10 minutes on the 2-core AMD EPYC.
Shares within one compile are what it measures: its seconds are one compile each,
in a process that compiled others before, not labels.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "training/data/gpu-h100/rows.parquet"
# size counts whose relation to the fusion pass's seconds the report gives
COUNTS = ("hlo_ops_inlined", "fusion_cost_squares", "fusion_max_size", "fanout_squares",
          "fusion_distinct")


def sample(rows: pd.DataFrame, low: float, high: float) -> pd.DataFrame:
    """Per family, the rows at its smallest, median and largest recorded compile within
    [low, high] seconds."""
    ok = rows[(rows["status"] == "ok") & rows["compile_seconds"].between(low, high)]
    picked = []
    for _, part in ok.groupby("family"):
        part = part.sort_values("compile_seconds")
        picked += [part.iloc[i] for i in sorted({0, len(part) // 2, len(part) - 1})]
    return pd.DataFrame(picked).sample(frac=1, random_state=0)


def measure(rows: pd.DataFrame, out: Path) -> None:
    import jax

    from costmodel.measure.harness import placement
    from costmodel.measure.phases import PhaseTrace
    from costmodel.training import corpus

    done = {json.loads(line)["key"] for line in out.read_text().splitlines()} \
        if out.exists() else set()
    place = placement("gpu", "h100")
    for _, row in rows.iterrows():
        if row["key"] in done:
            continue
        spec = corpus.get_family(row["family"])
        jax.config.update("jax_enable_x64", bool(spec.x64))
        fn, args = spec.build(**json.loads(row["params"]))
        _, lowered = place.lower(fn, args)
        with PhaseTrace() as trace:
            start = time.perf_counter()
            lowered.compile()
            wall = time.perf_counter() - start
        record = {"key": row["key"], "family": row["family"], "params": row["params"],
                  "wall_s": wall, "phases": trace.seconds, "passes": trace.passes,
                  "error": trace.error}
        with out.open("a") as handle:
            handle.write(json.dumps(record) + "\n")
        fusion = trace.seconds.get("gpu_priority_fusion") or 0.0
        print(f"{row['family']:<28} {wall:7.2f} s  priority-fusion {fusion:6.2f} s", flush=True)


def report(out: Path, rows: pd.DataFrame) -> dict:
    records = [json.loads(line) for line in out.read_text().splitlines()]
    frame = pd.DataFrame([{"key": r["key"], "family": r["family"], "params": r["params"],
                           "wall": r["wall_s"],
                           **{p: r["phases"].get(p) or 0.0 for p in
                              ("gpu_hlo", "gpu_priority_fusion", "gpu_backend")}}
                          for r in records if not r["error"]])
    counts = rows.set_index("key").loc[frame["key"]]
    shares = {p: frame[p] / frame["wall"] for p in ("gpu_hlo", "gpu_priority_fusion",
                                                     "gpu_backend")}
    fusion = np.log(frame["gpu_priority_fusion"].to_numpy() + 1e-3)
    top = frame.assign(share=shares["gpu_priority_fusion"]).sort_values(
        "gpu_priority_fusion", ascending=False).head(10)
    return {
        "rows": len(frame),
        "share_quantiles": {p: {q: float(s.quantile(q)) for q in (0.1, 0.5, 0.9, 1.0)}
                            for p, s in shares.items()},
        "priority_fusion_correlation": {
            c: float(np.corrcoef(np.log1p(counts[f"f_{c}"].to_numpy(float)), fusion)[0, 1])
            for c in COUNTS},
        "slowest_fusion_pass": [{"family": r.family, "params": r.params, "wall_s": r.wall,
                                 "priority_fusion_s": r.gpu_priority_fusion,
                                 "share": r.share} for r in top.itertuples()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--min-seconds", type=float, default=0.3)
    parser.add_argument("--max-seconds", type=float, default=80.0)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    rows = pd.read_parquet(args.data)
    if not args.report_only:
        measure(sample(rows, args.min_seconds, args.max_seconds), args.out)
    result = report(args.out, rows)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
