"""On-device truth for the TPU model: the same programs compiled on a real TPU v5e chip and
deviceless, beside the deviceless rows the sweeps measured here.

The device machine has no corpus libraries, so programs travel as `jax.export` artifacts:
`export` builds programs of the TPU sweep here, flattens their arguments and results to
leaves (custom pytree nodes do not serialize), lowers them for platform `tpu` and writes
the serialized modules with a manifest. `tpu_device_run.py` compiles them on the chip
(the `device` tool) and writes JSON lines; `score` joins those rows to the sweep rows and
the shipped TPU model, and reports the deviceless-to-device ratio, the reference
program's spread on the TPU host, and the model's figures on the device.

    python bench/evaluations/tpu_device.py export --rows SWEEP_DIR --out .tpu-artifacts [--n 100]
        [--exclude DEVICE_ROWS... | --without-fresh-rss DEVICE_ROWS... | --again DEVICE_ROWS...]
    # on the device machine: python bench/evaluations/tpu_device_run.py .tpu-artifacts --out $OUT/rows.jsonl
    python bench/evaluations/tpu_device.py score bench/data/tpu_device/*.jsonl --rows SWEEP_DIR \\
        [--predictions HELD_OUT.parquet] [--json bench/results/tpu_device.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("EQX_ON_ERROR", "nan")  # Equinox's runtime checks use host callbacks

from costmodel.measure.tpu_export import serialize_for_tpu  # noqa: E402
from costmodel.training.fitting.device_correction import read_device_rows  # noqa: E402


def by_memory(rows, keys) -> list[int]:
    """Indices of the ok rows whose key is in `keys`, largest sweep RSS growth first: the
    programs whose host memory a fresh process on the chip's host should measure first."""
    ok = rows[(rows["status"] == "ok") & rows["key"].isin(set(keys))]
    return list(ok.drop_duplicates("key").sort_values("peak_rss_bytes", ascending=False).index)


def select(rows, n: int, seed: int = 0, exclude=()) -> list[int]:
    """Indices of `n` ok rows spread over libraries and sizes: rows are sorted by their
    deviceless seconds and taken at even steps within each library, real libraries first;
    the result is shuffled so a run cut short loses a random part, not the largest. Rows
    whose key is in `exclude` (measured on the chip before) are not taken."""
    ok = rows[(rows["status"] == "ok") & ~rows["key"].isin(set(exclude))].copy()
    ok["lib"] = ok["library"].fillna("").replace("", "synthetic")
    real = ok[ok["lib"] != "synthetic"]
    share = {lib: min(len(group), max(1, round(n * 0.8 * len(group) / len(real))))
             for lib, group in real.groupby("lib")}
    # what the real libraries cannot fill (most of them measured already) goes to the rest
    share["synthetic"] = max(1, n - sum(share.values()))
    picked = []
    for lib, group in ok.groupby("lib"):
        group = group.sort_values("compile_seconds")
        take = min(share.get(lib, 0), len(group))
        if take:
            steps = [round(i * (len(group) - 1) / max(take - 1, 1)) for i in range(take)]
            picked += [group.index[i] for i in sorted(set(steps))]
    random.Random(seed).shuffle(picked)
    return picked


def again(device: list[dict], rows, below_s: float, seed: int = 0, from_s: float = 0.0
          ) -> list[int]:
    """Indices of the real-library programs the chip compiled in `device` rows in `from_s`
    to `below_s` seconds (median), shuffled: a second pass of their labels, taken the same way
    for every program so the pass does not favour the ones the model misses."""
    seconds: dict[str, list[float]] = {}
    for r in device:
        if r.get("status") == "ok" and r.get("device_s"):
            seconds.setdefault(r["key"], []).extend(r["device_s"])
    keys = {k for k, s in seconds.items() if from_s <= statistics.median(s) < below_s}
    ok = rows[(rows["status"] == "ok") & rows["key"].isin(keys)
              & (rows["library"].fillna("") != "")]
    picked = list(ok.drop_duplicates("key").index)
    random.Random(seed).shuffle(picked)
    return picked


def export_programs(rows_dir: str, out: Path, n: int, exclude=(), include=None,
                    again_rows=None, again_below_s: float = 20.0,
                    again_from_s: float = 0.0) -> None:
    import jax

    from costmodel.training import corpus
    from costmodel.training.store import dataset

    rows = dataset.load([rows_dir])
    out.mkdir(parents=True, exist_ok=True)
    entries = []
    if again_rows is not None:
        picked = again(again_rows, rows, again_below_s, from_s=again_from_s)[:n]
    elif include is not None:
        picked = by_memory(rows, include)[:n]
    else:
        picked = select(rows, n, exclude=exclude)
    for i, index in enumerate(picked):
        row = rows.loc[index]
        spec = corpus.get_family(row["family"])
        jax.config.update("jax_enable_x64", bool(spec.x64))
        try:
            blob = serialize_for_tpu(*spec.build(**json.loads(row["params"])))
        except Exception as exc:  # not exportable (host callbacks, unstable custom calls)
            print(f"skip {row['family']}: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
            continue
        name = f"p{i:03d}"
        (out / f"{name}.bin").write_bytes(blob)
        entries.append({"name": name, "file": f"{name}.bin", "key": row["key"],
                        "family": row["family"], "library": spec.library or "synthetic",
                        "x64": bool(spec.x64),
                        "here_s": float(row["compile_seconds"])})
        print(f"{name} {row['family']} {row['compile_seconds']:.2f}s {len(blob) / 1e3:.0f} kB",
              file=sys.stderr)
        # rewritten after each program, so an export cut short still travels
        (out / "manifest.json").write_text(json.dumps({"programs": entries}, indent=1))


def spread(values) -> dict:
    values = sorted(values)
    return {"n": len(values), "min": values[0], "median": statistics.median(values),
            "max": values[-1]}


def folds(predicted, measured) -> dict:
    f = [max(p / m, m / p) for p, m in zip(predicted, measured)]
    logs = [math.log(m / p) for p, m in zip(predicted, measured)]
    f.sort()
    return {"n": len(f), "median_fold": statistics.median(f),
            "p90_fold": f[min(len(f) - 1, int(math.ceil(0.9 * len(f))) - 1)], "max_fold": f[-1],
            "bias": math.exp(statistics.fmean(logs)),
            "median_abs_log": statistics.median(abs(v) for v in logs)}


def score(paths, rows_dir: str) -> dict:
    """Deviceless (on the TPU host) over device; the sweep's deviceless seconds here over
    device; and the reference program's spread on the host."""
    from costmodel.training.store import dataset

    env, device = read_device_rows(paths)
    sweep = dataset.load([rows_dir]).set_index("key")
    ok = [r for r in device if r.get("status") == "ok"]
    host_ratio = [statistics.median(r["deviceless_s"]) / statistics.median(r["device_s"])
                  for r in ok if r.get("deviceless_s")]
    here_ratio = [sweep.loc[r["key"], "compile_seconds"] / statistics.median(r["device_s"])
                  for r in ok if r["key"] in sweep.index]
    refs = [s for r in ok for s in r["ref_device_s"]]
    return {"environment": env, "programs": len(device), "ok": len(ok),
            "errors": [r.get("message", "")[:200] for r in device if r.get("status") != "ok"],
            "deviceless_over_device_on_host": spread(host_ratio) if host_ratio else None,
            "sweep_here_over_device": spread(here_ratio) if here_ratio else None,
            "reference_on_device_s": spread(refs) if refs else None,
            "device_seconds": spread([statistics.median(r["device_s"]) for r in ok]) if ok else None}


def held_out(paths, rows_dir: str, predictions: str, cpu_rows: str,
             split: str = "leave_library_out") -> dict:
    """The TPU model's held-out predictions (`split`, from `costmodel.training.build
    --predictions-out`) scored against the chip: each prediction scaled by the reference
    program's speed on the TPU host over here (as `costmodel calibrate` scales a CPU
    model), beside two baselines scored the same way: the op-count power law fitted on the
    same folds, and the program's measured CPU compile times one constant (fitted on the
    other device programs, one left out at a time)."""
    import pandas as pd

    from costmodel.training.store import dataset

    _, device = read_device_rows(paths)
    ok = [r for r in device if r.get("status") == "ok"]
    sweep = dataset.load([rows_dir]).set_index("key")
    pred = pd.read_parquet(predictions)
    pred = pred[pred["split"] == split]
    scale = statistics.median(s for r in ok for s in r["ref_device_s"]) / statistics.median(
        sweep.loc[[r["key"] for r in ok if r["key"] in sweep.index], "ref_seconds"])
    cpu = dataset.load([cpu_rows])
    cpu = cpu[cpu["status"] == "ok"]
    cpu_s = dict(zip(cpu["family"] + "|" + cpu["params"], cpu["compile_seconds"]))

    def point(model, target, key):
        hit = pred[(pred["model"] == model) & (pred["target"] == target) & (pred["key"] == key)]
        return None if hit.empty else hit.iloc[0]

    out = {"split": split, "reference_scale": scale}
    rows = []
    for r in ok:
        measured = statistics.median(r["device_s"])
        ours, law = point("costmodel", "compile_seconds", r["key"]), point(
            "power_law", "compile_seconds", r["key"])
        memory = point("costmodel", "peak_rss_bytes", r["key"])
        family, params = r["key"].split("|")[:2]
        if ours is None or law is None:
            continue
        rows.append({"key": r["key"], "measured": measured, "ours": ours["point"] * scale,
                     "lo": ours["lo"] * scale, "hi": ours["hi"] * scale,
                     "law": law["point"] * scale, "cpu": cpu_s.get(f"{family}|{params}"),
                     "rss": r.get("device_rss_bytes"),
                     "rss_pred": None if memory is None else memory["point"]})
    measured = [r["measured"] for r in rows]
    out["costmodel"] = folds([r["ours"] for r in rows], measured)
    out["costmodel"]["coverage"] = statistics.fmean(
        r["lo"] <= r["measured"] <= r["hi"] for r in rows)
    out["costmodel"]["spearman"] = _spearman([r["ours"] for r in rows], measured)
    out["power_law"] = folds([r["law"] for r in rows], measured)
    with_cpu = [r for r in rows if r["cpu"]]
    logs = [math.log(r["measured"] / r["cpu"]) for r in with_cpu]
    loo = [r["cpu"] * math.exp((sum(logs) - v) / (len(logs) - 1)) for r, v in zip(with_cpu, logs)]
    out["cpu_times_constant"] = folds(loo, [r["measured"] for r in with_cpu])
    big = [r for r in rows if r["rss"] and r["rss_pred"] and r["rss"] > 50e6]
    out["host_rss_over_50MB"] = folds([r["rss_pred"] for r in big], [r["rss"] for r in big]) \
        if big else None
    out["rows"] = rows
    return out


def _spearman(a, b) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=v.__getitem__)
        r = [0.0] * len(v)
        for i, j in enumerate(order):
            r[j] = float(i)
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export")
    p.add_argument("--rows", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--exclude", nargs="*", default=[],
                   help="device rows (JSON lines) whose programs are not exported again")
    p.add_argument("--without-fresh-rss", nargs="*",
                   help="export instead the programs of these device rows that have no "
                        "fresh-process RSS yet, largest sweep RSS first (for --fresh-rss-only)")
    p.add_argument("--again", nargs="*",
                   help="export instead the real-library programs of these device rows "
                        "again, in random order: a second pass of their chip labels")
    p.add_argument("--again-below-s", type=float, default=20.0,
                   help="with --again: only programs the chip compiled faster than this")
    p.add_argument("--again-from-s", type=float, default=0.0,
                   help="with --again: only programs the chip took at least this long for")
    p = sub.add_parser("score")
    p.add_argument("paths", nargs="+")
    p.add_argument("--rows", required=True)
    p.add_argument("--json", type=Path)
    p.add_argument("--predictions", help="held-out predictions (build --predictions-out)")
    p.add_argument("--cpu-rows", default="training/data/cpu/rows.parquet")
    args = parser.parse_args()
    if args.command == "export":
        done = [r["key"] for r in read_device_rows(args.exclude)[1]]
        include = None
        if args.without_fresh_rss:
            measured = read_device_rows(args.without_fresh_rss)[1]
            fresh = {r["key"] for r in measured if r.get("fresh_deviceless_rss_bytes")}
            include = {r["key"] for r in measured if r.get("status") == "ok"} - fresh
        again_rows = read_device_rows(args.again)[1] if args.again else None
        export_programs(args.rows, args.out, args.n, exclude=done, include=include,
                        again_rows=again_rows, again_below_s=args.again_below_s,
                        again_from_s=args.again_from_s)
        return
    result = score(args.paths, args.rows)
    if args.predictions:
        for split in ("leave_library_out", "leave_family_out"):
            result[split] = held_out(args.paths, args.rows, args.predictions, args.cpu_rows,
                                     split)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
