"""The shipped TPU model on programs no TPU row, chip row or fit has seen: the outside
libraries' programs (`outside_programs*.py`, kept off every training list) compiled on a
real TPU v5e chip.

`export` runs here, with the outside extras installed: it builds each program, asks the
shipped model for its chip prediction (`costmodel.lower(fn, *args).predict(backend="tpu",
target="v5e")`, as a user would, device correction included) and writes the program's
`jax.export` artifact beside a manifest holding the prediction. `tpu_device_run.py`
compiles the artifacts on the chip (the `device` tool); `score` joins its rows to the
manifest's predictions and compares with two baselines that have seen the suite itself:
the op-count power law and the program's measured CPU compile times one constant, each
fitted on the other programs (leave one out).

    python bench/evaluations/tpu_outside.py export --programs bench/evaluations/outside_programs.py \\
        --out .tpu-artifacts-outside [--max-predicted-s 40]
    # on the device machine: python bench/evaluations/tpu_device_run.py .tpu-artifacts-outside \\
    #     --out $OUT/outside.jsonl --max-here-s 40 --fresh-rss-below-s 3 --stages
    python bench/evaluations/tpu_outside.py rebase bench/data/tpu_outside/features.parquet  # after a rebuild
    python bench/evaluations/tpu_outside.py score bench/data/tpu_outside/outside[1-7]*.jsonl \\
        --manifest bench/data/tpu_outside/manifest.json [--json bench/results/tpu_outside.json]
    # a suite's own calls, labelled at one process state with every other stored chip call
    python bench/evaluations/tpu_outside.py score bench/data/tpu_outside/outside_c*.jsonl \\
        --manifest bench/data/tpu_outside/manifest_c.json \\
        --labels-with bench/data/tpu_device/*.jsonl bench/data/tpu_outside/outside[1-7]*.jsonl

In the manifest `here_s` is the model's chip prediction (what `--max-here-s` filters by).

`split` takes a scored suite's chip error apart with the same artifacts compiled
deviceless on a machine without a chip (`tpu_device_run.py --deviceless-only`): how far
the base model misses those compiles, and how far they stand from the chip's:

    python bench/evaluations/tpu_outside.py split bench/results/tpu_outside_de.json \\
        --deviceless bench/data/tpu_outside/deviceless_here_de.jsonl \\
        --features bench/data/tpu_outside/features_de.parquet
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("EQX_ON_ERROR", "nan")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tpu_device import _spearman, folds, serialize_for_tpu  # noqa: E402

# where the CPU compile seconds of each suite were measured (first pass, calibrated run)
CPU_RUNS = ("bench/data/outside_libraries", "bench/data/outside_libraries_b1",
            "bench/data/outside_libraries_b2", "bench/data/outside_top",
            "bench/data/outside_libraries_c", "bench/data/outside_libraries_d1",
            "bench/data/outside_libraries_d2", "bench/data/outside_libraries_e1",
            "bench/data/outside_libraries_e2")


def program_key(family: str, params: dict) -> str:
    return f"{family}|{json.dumps(params, sort_keys=True)}"


def export(program_files, out: Path, max_predicted_s: float) -> None:
    import jax

    import costmodel
    from costmodel.measure.user_modules import import_module_or_file

    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.json"
    entries = json.loads(manifest.read_text())["programs"] if manifest.exists() else []
    done = {e["key"] for e in entries}
    for path in program_files:
        module = import_module_or_file(str(path))
        for family in module.OUTSIDE_FAMILIES:
            for params in family.grid:
                key = program_key(family.name, params)
                if key in done:
                    continue
                jax.config.update("jax_enable_x64", bool(family.x64))
                try:
                    fn, args = family.build(**params)
                    # scored against labels of long processes: at their state
                    p = costmodel.lower(fn, *args).predict(backend="tpu", target="v5e",
                                                           process_state="warm")
                    entry = {"key": key, "family": family.name, "library": family.library,
                             "suite": Path(path).stem, "x64": bool(family.x64),
                             "here_s": p.compile_seconds,
                             "interval": list(p.compile_seconds_interval),
                             "rss_bytes": p.peak_memory_bytes,
                             "hlo_ops": float(p.features["hlo_ops"]),
                             "model_version": p.model_version}
                    if p.compile_seconds > max_predicted_s:
                        entry["skipped"] = "predicted over --max-predicted-s"
                    else:
                        fn, args = family.build(**params)  # a fresh closure to export
                        blob = serialize_for_tpu(fn, args)
                        entry["name"] = f"o{len(entries):03d}"
                        entry["file"] = f"{entry['name']}.bin"
                        (out / entry["file"]).write_bytes(blob)
                except Exception as exc:  # not buildable or not exportable here: say so
                    entry = {"key": key, "family": family.name, "suite": Path(path).stem,
                             "skipped": f"{type(exc).__name__}: {str(exc)[:200]}"}
                entries.append(entry)
                print(f"{family.name} {params} -> {entry.get('here_s', float('nan')):.2f}s "
                      f"{entry.get('skipped', '')}", file=sys.stderr, flush=True)
                manifest.write_text(json.dumps({"programs": entries}, indent=1))
    runnable = [e for e in entries if "file" in e]
    manifest.write_text(json.dumps({"programs": entries, "runnable": len(runnable)}, indent=1))


def features(program_files, out: Path) -> None:
    """Each program's TPU model inputs and the base model's own prediction (before the
    device correction), as the device correction's fit reads sweep rows: a parquet of
    key, library, suite, `f_<input>`, `base` and `rss_pred`, appended to `out`."""
    import jax
    import pandas as pd

    import costmodel
    from costmodel.features import MODEL_FEATURES
    from costmodel.features.sharding import placement_inputs
    from costmodel.measure.user_modules import import_module_or_file
    from costmodel.models import load_default

    artifact = load_default("tpu", "v5e")
    old = pd.read_parquet(out) if out.exists() else pd.DataFrame({"key": []})
    rows = []
    for path in program_files:
        module = import_module_or_file(str(path))
        for family in module.OUTSIDE_FAMILIES:
            for params in family.grid:
                key = program_key(family.name, params)
                if key in set(old["key"]):
                    continue
                jax.config.update("jax_enable_x64", bool(family.x64))
                try:
                    fn, args = family.build(**params)
                    f = costmodel.lower(fn, *args).features("tpu", "v5e", jaxpr=False)
                except Exception as exc:  # the export skipped it too
                    print(f"skip {key}: {type(exc).__name__}", file=sys.stderr)
                    continue
                inputs = {name: float(f[name]) for name in MODEL_FEATURES}
                inputs.update(placement_inputs("v5e", getattr(f, "info", None)))
                base, rss_pred = base_predictions(artifact, [inputs])
                rows.append({"key": key, "library": family.library,
                             "suite": Path(path).stem,
                             **{f"f_{n}": v for n, v in inputs.items()},
                             "base": float(base[0]), "rss_pred": float(rss_pred[0])})
                print(key, rows[-1]["base"], file=sys.stderr, flush=True)
    frame = pd.concat([old, pd.DataFrame(rows)], ignore_index=True)
    frame["cpu"] = frame["key"].map(cpu_seconds())  # measured CPU seconds, a baseline
    frame.to_parquet(out)


def rebase(out: Path, artifact=None) -> None:
    """After the TPU model is rebuilt: each stored program's `base` and `rss_pred` predicted
    again by the shipped model (or `artifact`) from its stored inputs, nothing lowered."""
    import pandas as pd

    from costmodel.models import load_default

    artifact = artifact or load_default("tpu", "v5e")
    frame = pd.read_parquet(out)
    names = [c for c in frame.columns if c.startswith("f_")]
    inputs = [{name[2:]: float(row[name]) for name in names} for _, row in frame.iterrows()]
    frame["base"], frame["rss_pred"] = base_predictions(artifact, inputs)
    frame.to_parquet(out)


def base_predictions(artifact, inputs: list[dict]):
    """The base model's compile seconds and host RSS for model inputs, before the device
    correction (what the correction's pairs read as `base` and `rss_pred`)."""
    predicted = artifact.predictor.predict(inputs)
    return (predicted["compile_seconds"]["point"].astype(float),
            predicted["peak_rss_bytes"]["point"].astype(float))


def cpu_seconds(runs=CPU_RUNS) -> dict[str, float]:
    """Each program's measured CPU compile seconds (the first run that has it)."""
    import pandas as pd

    found: dict[str, float] = {}
    for run in runs:
        path = Path(run) / "measured.parquet"  # compacted, else the run's own lines
        if path.exists():
            rows = pd.read_parquet(path)
        elif path.with_suffix(".jsonl").exists():
            rows = pd.read_json(path.with_suffix(".jsonl"), lines=True, dtype=False)
        else:
            continue
        for row in rows[rows["status"] == "ok"].itertuples():
            found.setdefault(program_key(row.family, json.loads(row.params)),
                             float(row.compile_seconds))
    return found


def leave_one_out_power_law(ops, seconds) -> list[float]:
    """log seconds = a + b log ops, fitted on all programs but the one predicted."""
    xs, ys = [math.log(max(o, 1.0)) for o in ops], [math.log(s) for s in seconds]
    out = []
    for i in range(len(xs)):
        x = xs[:i] + xs[i + 1:]
        y = ys[:i] + ys[i + 1:]
        mx, my = statistics.fmean(x), statistics.fmean(y)
        b = sum((a - mx) * (c - my) for a, c in zip(x, y)) / sum((a - mx) ** 2 for a in x)
        out.append(math.exp(my + b * (xs[i] - mx)))
    return out


def call_scale(calibration_rows: str) -> float:
    """The host's speed in one device call, as `costmodel calibrate --backend tpu` reads it:
    the calibration set's median ratio to its seconds on the host the correction was
    fitted on."""
    from costmodel.training.measure import tpu_calibrate as tpu

    _, here = tpu.figures_from_rows([calibration_rows])
    return statistics.median(f["compile_seconds"] / tpu.CHIP_HOST_SECONDS[p]
                             for p, f in here.items() if p in tpu.CHIP_HOST_SECONDS)


def normalize(pairs, out: Path) -> None:
    """Chip rows with their seconds divided by their call's calibration scale
    (`ROWS=CALIBRATION_ROWS`; `ROWS=1` for a call whose host read as the fitted one):
    every call brought to the fitted host's speed, as a user's calibration would."""
    lines = []
    for pair in pairs:
        rows, cal = pair.split("=")
        scale = 1.0 if cal == "1" else call_scale(cal)
        for line in Path(rows).read_text().splitlines():
            r = json.loads(line)
            if "environment" not in r and r.get("device_s"):
                r["raw_device_s"], r["call_scale"] = r["device_s"], scale
                r["device_s"] = [s / scale for s in r["device_s"]]
            lines.append(json.dumps(r))
        print(f"{rows}: scale {scale:.3f}", file=sys.stderr)
    out.write_text("\n".join(lines) + "\n")


def process_state_labels(paths, context) -> dict[str, float]:
    """Each program's chip seconds at the observations' average process state
    (`device_labels`), fitted over `paths` and the `context` device-row files together: the
    stored calls tie down the position factors, and programs seen in both (anchors) tie the
    new calls' host drift."""
    from costmodel.training.fitting import device_labels

    labels = device_labels.fit_labels(device_labels.observations([*context, *paths]))
    return labels.seconds.to_dict()


def score(paths, manifest_path: Path, context=None) -> dict:
    from costmodel.training.fitting.device_correction import read_device_rows

    env, device = read_device_rows(paths)
    labels = process_state_labels(paths, context) if context else None
    manifest = {e["key"]: e for e in json.loads(manifest_path.read_text())["programs"]}
    ok = [r for r in device if r.get("status") == "ok" and r["key"] in manifest]
    seconds: dict[str, list[float]] = {}  # a program compiled in several calls: all of them
    fresh: dict[str, int] = {}
    for r in ok:
        seconds.setdefault(r["key"], []).extend(r["device_s"])
        if r.get("fresh_deviceless_rss_bytes"):
            fresh[r["key"]] = max(fresh.get(r["key"], 0), r["fresh_deviceless_rss_bytes"])
    cpu = cpu_seconds()
    rows = []
    for key, measured_s in seconds.items():
        entry = manifest[key]
        rows.append({"key": key, "library": entry["library"], "suite": entry["suite"],
                     "measured": labels[key] if labels else statistics.median(measured_s),
                     "raw": statistics.median(measured_s), "ours": entry["here_s"],
                     "lo": entry["interval"][0], "hi": entry["interval"][1],
                     "hlo_ops": entry["hlo_ops"], "cpu": cpu.get(key),
                     "rss": fresh.get(key), "rss_pred": entry["rss_bytes"]})
    measured = [r["measured"] for r in rows]
    result = {"environment": env, "programs": len(manifest),
              "exported": sum("file" in e for e in manifest.values()),
              "compiled_ok": len(rows),
              "errors": [r.get("message", "")[:200] for r in device if r.get("status") != "ok"],
              "libraries": sorted({r["library"] for r in rows})}
    result["costmodel"] = folds([r["ours"] for r in rows], measured)
    result["costmodel"]["coverage"] = statistics.fmean(
        r["lo"] <= r["measured"] <= r["hi"] for r in rows)
    result["costmodel"]["spearman"] = _spearman([r["ours"] for r in rows], measured)
    result["labels"] = "process state" if labels else "raw medians"
    if labels:  # the same predictions against each program's raw median over its compiles
        result["costmodel_raw_medians"] = folds([r["ours"] for r in rows],
                                                [r["raw"] for r in rows])
    result["power_law_fitted_on_suite"] = folds(
        leave_one_out_power_law([r["hlo_ops"] for r in rows], measured), measured)
    with_cpu = [r for r in rows if r["cpu"]]
    if len(with_cpu) > 1:  # a suite whose CPU compiles were measured
        logs = [math.log(r["measured"] / r["cpu"]) for r in with_cpu]
        loo = [r["cpu"] * math.exp((sum(logs) - v) / (len(logs) - 1))
               for r, v in zip(with_cpu, logs)]
        result["cpu_times_constant"] = folds(loo, [r["measured"] for r in with_cpu])
        result["costmodel_on_those"] = folds([r["ours"] for r in with_cpu],
                                             [r["measured"] for r in with_cpu])
    big = [r for r in rows if r["rss"] and r["rss"] > 50e6]
    result["host_rss_over_50MB"] = folds([r["rss_pred"] for r in big], [r["rss"] for r in big]) \
        if big else None
    refs = [s for r in ok for s in r["ref_device_s"]]
    result["reference_on_device_s"] = {"min": min(refs), "median": statistics.median(refs),
                                       "max": max(refs)} if refs else None
    result["rows"] = sorted(rows, key=lambda r: -max(r["ours"] / r["measured"],
                                                     r["measured"] / r["ours"]))
    return result


def level_removed(predicted, measured) -> dict:
    """`folds` after each program's predictions are scaled by the median log ratio of the
    others (leave one out): the spread a constant cannot take away, and that constant."""
    logs = [math.log(m / p) for p, m in zip(predicted, measured)]
    moved = [p * math.exp(statistics.median(logs[:i] + logs[i + 1:]))
             for i, p in enumerate(predicted)]
    return {**folds(moved, measured), "level": math.exp(statistics.median(logs))}


def split(scored: Path, deviceless_rows, features_path: Path) -> dict:
    """The chip's error of a scored suite beside the base model's error against the same
    programs compiled deviceless here, and the step between here and the chip."""
    import pandas as pd

    from costmodel.models import load_default

    chip = {r["key"]: r["measured"] for r in json.loads(scored.read_text())["rows"]}
    here: dict[str, list[float]] = {}
    for path in deviceless_rows:
        for line in Path(path).read_text().splitlines():
            r = json.loads(line)
            if r.get("status") == "ok" and r.get("deviceless_s"):
                here.setdefault(r["key"].rsplit("|tpu|", 1)[0], []).extend(r["deviceless_s"])
    frame = pd.read_parquet(features_path).drop_duplicates("key").set_index("key")
    keys = sorted(k for k in chip if k in here and k in frame.index)
    artifact = load_default("tpu", "v5e")
    inputs = [{n: float(frame.loc[k, "f_" + n]) for n in artifact.predictor.feature_names}
              for k in keys]
    predicted = artifact.predictor.predict(inputs)  # the base model's, then on the chip
    base = predicted["compile_seconds"]["point"]
    # against labels of long processes: the prediction at their state
    on_chip = artifact.on_device(inputs, predicted,
                                 process_state="warm")["compile_seconds"]["point"]
    measured = [chip[k] for k in keys]
    deviceless = [statistics.median(here[k]) for k in keys]
    step_measured = [m / d for m, d in zip(measured, deviceless)]
    step_predicted = [c / b for c, b in zip(on_chip, base)]
    errors = ([math.log(d / b) for d, b in zip(deviceless, base)],
              [math.log(m / c) for m, c in zip(measured, on_chip)])
    return {"programs": len(keys), "model": artifact.version,
            "chip_as_predicted": folds(list(on_chip), measured),
            "base_against_deviceless_here": level_removed(list(base), deviceless),
            "deviceless_here_times_one_constant": level_removed(deviceless, measured),
            "step_predicted_against_measured": level_removed(step_predicted, step_measured),
            "base_times_one_constant": level_removed(list(base), measured),
            "error_correlation": statistics.correlation(*errors)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export")
    p.add_argument("--programs", nargs="+", required=True,
                   help="one file per run when one imports another (outside_top imports outside)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--max-predicted-s", type=float, default=40.0)
    p = sub.add_parser("features")
    p.add_argument("--programs", nargs="+", required=True)
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("rebase")
    p.add_argument("out", type=Path)
    p = sub.add_parser("normalize")
    p.add_argument("pairs", nargs="+", help="ROWS=CALIBRATION_ROWS or ROWS=1")
    p.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("split")
    p.add_argument("scored", type=Path, help="a suite's `score --json` result")
    p.add_argument("--deviceless", nargs="+", required=True,
                   help="tpu_device_run.py --deviceless-only rows of its artifacts")
    p.add_argument("--features", type=Path, required=True)
    p.add_argument("--json", type=Path)
    p = sub.add_parser("score")
    p.add_argument("paths", nargs="+")
    p.add_argument("--manifest", type=Path, required=True)
    p.add_argument("--json", type=Path)
    p.add_argument("--labels-with", nargs="+", metavar="DEVICE_ROWS",
                   help="label each program at the average process state, fitted with "
                        "these stored chip rows, which must not hold PATHS' calls again "
                        "(normalized.jsonl holds every outside call; else raw medians)")
    args = parser.parse_args()
    if args.command == "export":
        export(args.programs, args.out, args.max_predicted_s)
        return
    if args.command == "normalize":
        normalize(args.pairs, args.out)
        return
    if args.command == "features":
        features(args.programs, args.out)
        return
    if args.command == "rebase":
        rebase(args.out)
        return
    if args.command == "split":
        result = split(args.scored, args.deviceless, args.features)
        print(json.dumps(result, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
        return
    result = score(args.paths, args.manifest, args.labels_with)
    text = json.dumps(result, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
