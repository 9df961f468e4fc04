"""Fit a TPU model's device correction (`costmodel.models.device_correction`) from programs
compiled both deviceless here (the sweep rows) and on the chip (the device rows that
`bench/evaluations/tpu_device_run.py` writes), and score it with each library held out.

The step's input is the model's prediction for a program it did not train on: the
leave-library-out predictions `costmodel.training.build --predictions-out` writes. So the
held-out figures are of model and step together, each blind to the library scored.

    python -m costmodel.training.fitting.device_correction --model models/default/tpu-v5e \\
        --rows training/data/tpu-v5e/rows.parquet --predictions HELD_OUT.parquet \\
        --device-rows bench/data/tpu_device/*.jsonl [--phase-rows ROWS] [--json OUT] [--dry-run]
        [--raw-labels]

`--phase-rows` (sweep rows with libtpu's stage split) blends in part models (`device_parts`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from costmodel.features import MODEL_FEATURES
from costmodel.models.artifact import MANIFEST_FILE, atomic_write, sha256_of, verify
from costmodel.models.device_correction import BASE_COLUMN, CORRECTION_FILE, DeviceCorrection
from costmodel.models.forest import FlatForest

from . import device_labels, device_one_model, device_parts
from .device_card import CARD_HEADING, card_section, write_card_section  # noqa: F401
from .device_memory import fit_memory, folds, memory_points, memory_scores

SPLIT = "leave_library_out"
FALLBACK_SPLIT = "leave_family_out"
# Small on purpose: about a hundred programs, a few dozen libraries.
BOOSTER = {"max_depth": 2, "max_iter": 100, "learning_rate": 0.05, "min_samples_leaf": 8,
           "l2_regularization": 1.0, "random_state": 0}
QUANTILES = (0.05, 0.95)
MIN_MEMORY = 20  # programs with a fresh-process RSS on the chip's host: fewer, no step
MIN_INTERVAL = 30  # real-library programs needed to set the interval from theirs alone
# What the step reads besides the prediction: size and the op kinds whose compile leans on
# the host's cores or its float64 path. With a hundred-odd programs the full feature set
# fits noise: on the v5e pairs it held out at median fold 1.58 against 1.45 for these.
STEP_FEATURES = (
    "hlo_ops", "conv_flops", "dot_flops", "f64_ops", "cat_conv", "cat_linalg", "while_count",
    "tensor_max_elements", "tensor_sum_elements", "fusion_groups", "op_sort", "cat_random",
    "fusion_cost_squares", "cat_dot", "cat_reduce", "op_while", "input_bytes")


@dataclass
class Pairs:
    """One row per program measured on the chip: model inputs, the held-out base
    prediction, the chip's seconds and host RSS growth, the library, the key."""

    frame: pd.DataFrame

    @property
    def X(self) -> np.ndarray:
        inputs = np.log1p(self.frame[list(STEP_FEATURES)].to_numpy(float).clip(min=0))
        return np.column_stack([inputs, np.log(self.frame["base"].to_numpy(float))])

    @property
    def y(self) -> np.ndarray:
        return np.log(self.frame["device"].to_numpy(float) / self.frame["base"].to_numpy(float))


def read_device_rows(paths) -> tuple[dict, list[dict]]:
    """(environment, rows) of device-row JSON-lines files, rows in file order."""
    env, rows = {}, []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            record = json.loads(line)
            if "environment" in record:  # a later run's facts over an earlier's
                env.update({k: v for k, v in record["environment"].items() if v})
            else:
                rows.append(record)
    return env, rows


def pairs(rows: pd.DataFrame, predictions: pd.DataFrame, device: list[dict],
          cpu_seconds: dict[str, float] | None = None) -> Pairs:
    """Join chip rows to sweep rows (features, library) and held-out predictions (the
    model's, the power law's, host memory). A program measured in several runs keeps the
    median of all its chip seconds. `cpu_seconds`: measured CPU compile seconds by
    "family|params", for the CPU-times-a-constant baseline."""
    seconds: dict[str, list[float]] = {}
    warm: dict[str, float] = {}
    fresh: dict[str, float] = {}
    for r in device:
        # a fresh process's growth, from any run that measured it (some measure only that)
        if r.get("fresh_deviceless_rss_bytes"):
            fresh[r["key"]] = max(fresh.get(r["key"], 0), r["fresh_deviceless_rss_bytes"])
        if r.get("status") == "ok" and r.get("device_s"):
            seconds.setdefault(r["key"], []).extend(r["device_s"])
            if r.get("device_rss_bytes"):  # a warm process's: it understates a fresh one's
                warm[r["key"]] = max(warm.get(r["key"], 0), r["device_rss_bytes"])
    rows = rows[rows["status"] == "ok"].drop_duplicates("key").set_index("key")
    base = _held_out_points(predictions, "costmodel", "compile_seconds")
    keys = [k for k in seconds if k in rows.index and k in base.index]
    if not keys:
        raise ValueError("no chip row matches a sweep row with a held-out prediction")
    frame = pd.DataFrame({name: rows.loc[keys, f"f_{name}"].to_numpy(float)
                          for name in MODEL_FEATURES}, index=keys)
    frame["base"] = base.loc[keys].to_numpy(float)
    law = _held_out_points(predictions, "power_law", "compile_seconds")
    frame["law"] = law.reindex(keys).to_numpy(float)
    memory = _held_out_points(predictions, "costmodel", "peak_rss_bytes")
    frame["rss_pred"] = memory.reindex(keys).to_numpy(float)
    frame["device"] = [statistics.median(seconds[k]) for k in keys]
    frame["rss"] = [fresh.get(k, warm.get(k, math.nan)) for k in keys]
    frame["fresh_rss"] = [fresh.get(k, math.nan) for k in keys]
    frame["library"] = rows.loc[keys, "library"].fillna("").replace("", "synthetic").to_numpy()
    frame["here"] = rows.loc[keys, "compile_seconds"].to_numpy(float)
    cpu = {} if cpu_seconds is None else cpu_seconds
    frame["cpu"] = [cpu.get("|".join(k.split("|")[:2]), math.nan) for k in keys]
    return Pairs(frame)


def _held_out_points(predictions: pd.DataFrame, model: str, target: str) -> pd.Series:
    ours = predictions[(predictions["model"] == model) & (predictions["target"] == target)]
    # programs of no library (the synthetic families) have their family held out instead
    points = pd.concat([ours[ours["split"] == split].set_index("key")["point"]
                        for split in (SPLIT, FALLBACK_SPLIT)])
    return points[~points.index.duplicated()]


def _booster():
    from sklearn.ensemble import HistGradientBoostingRegressor

    return HistGradientBoostingRegressor(loss="absolute_error", **BOOSTER)


def _one_thread():
    # a hundred rows: OpenMP threads cost more than they give, and on a busy host far more
    import sklearn.ensemble  # noqa: F401  (limits reach only libraries already loaded)
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


def held_out(p: Pairs) -> np.ndarray:
    """Log corrections for each program from a step fitted without its library."""
    X, y, libs = p.X, p.y, p.frame["library"].to_numpy()
    out = np.zeros(len(y))
    with _one_thread():
        for lib in np.unique(libs):
            test = libs == lib
            out[test] = _booster().fit(X[~test], y[~test]).predict(X[test])
    return out


def held_out_by_parts(p: Pairs, parts: device_parts.PartRows) -> tuple[np.ndarray, np.ndarray]:
    """(log correction by the part models alone, the programs' part seconds), each program
    from part models and factors fitted without its library."""
    libs, chip = p.frame["library"].to_numpy(), p.frame["device"].to_numpy(float)
    with _one_thread():
        held = device_parts.held_out_parts(parts, device_parts.inputs_of(p.frame), libs)
    return (device_parts.held_out_log_seconds(held, chip, libs)
            - np.log(p.frame["base"].to_numpy(float))), held


def held_out_correction(p: Pairs, parts: device_parts.PartRows | None = None,
                        chip_log_seconds: np.ndarray | None = None
                        ) -> tuple[np.ndarray, np.ndarray | None]:
    """(log correction of each program fitted without its library, the programs' held-out
    part seconds or None): the step's, blended with the part models' when `parts` given,
    and with the chip model's held-out log seconds when given (`device_one_model`)."""
    step, held = held_out(p), None
    if parts is not None:
        by_parts, held = held_out_by_parts(p, parts)
        step = (1 - device_parts.WEIGHT) * step + device_parts.WEIGHT * by_parts
    if chip_log_seconds is not None:
        chip = chip_log_seconds - np.log(p.frame["base"].to_numpy(float))
        step = (1 - device_one_model.WEIGHT) * step + device_one_model.WEIGHT * chip
    return step, held


def score(p: Pairs, correction: np.ndarray | None = None) -> dict:
    """Held-out figures against the chip, all programs and those of real libraries: the
    model with the step (its interval from the other libraries' held-out residuals), the
    model times the best constant, the power law times one, the program's measured CPU
    compile times one (each constant from the other libraries), and host memory.
    `correction`: held-out log corrections (`held_out_correction`), else the step's."""
    y, libs = p.y, p.frame["library"].to_numpy()
    residual = y - (held_out(p) if correction is None else correction)
    pool = _interval_pool(libs)
    bounds = {lib: interval_bounds(residual, libs, pool & (libs != lib)) for lib in np.unique(libs)}
    lo, hi = (np.array([bounds[lib][i] for lib in libs]) for i in (0, 1))
    measured = p.frame["device"].to_numpy(float)
    corrected = measured / np.exp(residual)
    out = {"n": int(len(y)), "libraries": int(len(np.unique(libs)))}
    outside = (p.frame["outside"].to_numpy(bool) if "outside" in p.frame
               else np.zeros(len(y), bool))
    sets = [("all", np.ones(len(y), bool)), ("real_libraries", libs != "synthetic")]
    if outside.any():  # the programs no sweep row holds, and the corpus's without them
        sets += [("corpus_real_libraries", (libs != "synthetic") & ~outside),
                 ("outside", outside)]
    for name, keep in sets:
        figures = {"n": int(keep.sum()),
                   "corrected": {**folds(residual[keep]),
                                 "coverage": float(np.mean(((residual >= lo)
                                                            & (residual <= hi))[keep])),
                                 "spearman": spearman(corrected[keep], measured[keep])}}
        for base, column in (("model_times_constant", "base"), ("power_law", "law"),
                             ("cpu_times_constant", "cpu"), ("sweep_here", "here")):
            ratio = np.log(measured / p.frame[column].to_numpy(float))
            has = keep & np.isfinite(ratio)
            if not has.any():
                continue
            if base == "sweep_here":
                figures[base] = folds(ratio[has])
            else:
                figures[base] = folds(ratio[has] - _constant(ratio, libs, has))
        big = keep & (p.frame["rss"].to_numpy(float) > 50e6)
        if big.any():
            figures["host_rss_over_50MB"] = folds(np.log(
                p.frame["rss"].to_numpy(float)[big] / p.frame["rss_pred"].to_numpy(float)[big]))
        figures.update(memory_scores(p, keep))
        out[name] = figures
    return out


def interval_bounds(residual: np.ndarray, libs: np.ndarray, keep: np.ndarray
                    ) -> tuple[float, float]:
    """The `QUANTILES` of the residuals where `keep`, each library weighing the same: a
    library of many programs must not set the interval for libraries unlike it (pooled by
    program, the corpus's 191 covered 94% and 73 outside programs 75%)."""
    r, groups = residual[keep], libs[keep]
    sizes = dict(zip(*np.unique(groups, return_counts=True)))
    weights = np.array([1.0 / sizes[g] for g in groups])
    order = np.argsort(r)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return tuple(float(r[order][min(len(r) - 1, np.searchsorted(cumulative, q))])
                 for q in QUANTILES)


def _interval_pool(libs: np.ndarray) -> np.ndarray:
    """Programs whose residuals set the interval: those of real libraries, what users
    compile (the synthetic families' extremes widened it to cover 96% of them, 75% of
    their own), unless too few."""
    real = libs != "synthetic"
    return real if real.sum() >= MIN_INTERVAL else np.ones(len(libs), bool)


def _constant(ratio: np.ndarray, libs: np.ndarray, has: np.ndarray) -> np.ndarray:
    """For each program where `has`, the median log ratio of the other libraries'."""
    return np.array([np.median(ratio[has & (libs != lib)]) for lib in libs[has]])


def spearman(a, b) -> float:
    ra, rb = (pd.Series(v).rank().to_numpy() for v in (a, b))
    return float(np.corrcoef(ra, rb)[0, 1])


def fit(p: Pairs, about: dict, parts: device_parts.PartRows | None = None,
        held_out_figures: tuple | None = None, chip_model=None) -> DeviceCorrection:
    """The step (and part models) fitted on every program; interval from held-out residuals.
    `held_out_figures`: what `held_out_correction(p, parts)` gave, if already computed;
    `chip_model`: a fitted chip model (`device_one_model`) to blend in."""
    correction, held = held_out_figures or held_out_correction(p, parts)
    with _one_thread():
        booster = _booster().fit(p.X, p.y)
        models = None if parts is None else device_parts.fit_part_models(
            parts, held, p.frame["device"].to_numpy(float))
    libs = p.frame["library"].to_numpy()
    residual, pool = p.y - correction, _interval_pool(libs)
    lo, hi = interval_bounds(residual, libs, pool)
    fresh, pred, has = memory_points(p)
    added = fit_memory(fresh[has], pred[has]) if has.sum() >= MIN_MEMORY else 0.0
    return DeviceCorrection(
        feature_names=(*STEP_FEATURES, BASE_COLUMN), forest=FlatForest.from_booster(booster),
        lo=lo, hi=hi, rss_added_bytes=added,
        about={**about, "rss_added_mb": round(added / 1e6, 1),
               **({} if models is None else {"part_factors": dict(zip(
                   models.parts, (round(f, 3) for f in models.factors))),
                   "parts_weight": device_parts.WEIGHT}),
               **({} if chip_model is None else {"chip_model_weight": device_one_model.WEIGHT})},
        parts=models, parts_weight=0.0 if models is None else device_parts.WEIGHT,
        chip_model=chip_model,
        chip_model_weight=0.0 if chip_model is None else device_one_model.WEIGHT)


def install(model: Path, correction: DeviceCorrection) -> None:
    """Write the step beside the model and name it, with its sha256, in the manifest."""
    manifest = verify(model)
    atomic_write(model / CORRECTION_FILE, correction.save)
    sha = sha256_of(model / CORRECTION_FILE)
    manifest["device_correction"] = {"file": CORRECTION_FILE, "sha256": sha, **correction.about}
    # predictions change with the step, so the version a cache or a client keys on does
    manifest["version"] = f"{manifest['version'].split('+')[0]}+chip-{sha[:6]}"
    text = json.dumps(manifest, indent=2) + "\n"
    atomic_write(model / MANIFEST_FILE, lambda handle: handle.write(text.encode()))


def carried_widening(correction: DeviceCorrection, model: Path) -> DeviceCorrection:
    """`correction` with the widening and the fresh-process factor of the step already
    beside `model`, if any: a refit keeps them until `device_widening` and `device_fresh`
    fit them again."""
    path = model / CORRECTION_FILE
    if not path.is_file():
        return correction
    old = DeviceCorrection.load(path)
    return correction.widened(old.widening, old.about.get("widening")).with_fresh(old.fresh)


def write_held_out(p: Pairs, correction: np.ndarray, path: Path) -> None:
    """Each program's chip label and library-held-out prediction (s): the misses named."""
    frame = p.frame[["library", "device", "base"]].rename_axis("key").reset_index()
    frame["predicted"] = frame["base"].to_numpy(float) * np.exp(correction)
    frame.assign(fold=np.exp(np.abs(np.log(frame["device"] / frame["predicted"])))).to_parquet(path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--rows", required=True, help="the TPU sweep rows (parquet or folder)")
    parser.add_argument("--predictions", required=True,
                        help="held-out predictions of that model (build --predictions-out)")
    parser.add_argument("--device-rows", nargs="+", required=True)
    parser.add_argument("--cpu-rows", default="training/data/cpu/rows.parquet",
                        help="CPU sweep rows of the same programs (a baseline)")
    parser.add_argument("--phase-rows", nargs="*", default=[],
                        help="TPU sweep rows with libtpu's stage split: adds part models")
    parser.add_argument("--outside", nargs=2, metavar=("PROGRAMS", "DEVICE_ROWS"),
                        help="outside programs' inputs (tpu_outside.py features) and their "
                             "chip rows (a glob in quotes): added to the pairs")
    parser.add_argument("--chip-model", nargs="+", metavar="SWEEP_ROWS",
                        help="blend in a chip model fitted on these deviceless sweep rows "
                             "and the chip's (`device_one_model`)")
    parser.add_argument("--raw-labels", action="store_true",
                        help="label a program by the median of its chip seconds, not at one "
                             "process state (`device_labels`)")
    parser.add_argument("--json", type=Path, help="write the held-out figures here")
    parser.add_argument("--held-out-out", type=Path, help="each program's held-out prediction")
    parser.add_argument("--dry-run", action="store_true", help="score only; install nothing")
    args = parser.parse_args(argv)
    from costmodel.training.store import dataset

    env, device = read_device_rows(args.device_rows)
    cpu = dataset.load([args.cpu_rows])
    cpu = cpu[cpu["status"] == "ok"]
    p = pairs(dataset.load([args.rows]), pd.read_parquet(args.predictions), device,
              dict(zip(cpu["family"] + "|" + cpu["params"], cpu["compile_seconds"])))
    outside_paths = []
    if args.outside:
        import glob

        outside_paths = sorted(glob.glob(args.outside[1]))
        outside_env, outside_rows = read_device_rows(outside_paths)
        env = {**outside_env, **env}
        from .device_outside import with_outside

        p = with_outside(p, pd.read_parquet(args.outside[0]), outside_rows)
    labels = None
    if not args.raw_labels:
        try:
            labels = device_labels.fit_labels(device_labels.observations(
                [*args.device_rows, *outside_paths]))
            p = device_labels.with_labels(p, labels)
        except ValueError as exc:
            print(f"labels: raw medians ({exc})", file=sys.stderr)
    parts = (device_parts.part_rows(dataset.load(args.phase_rows)) if args.phase_rows
             else None)
    sweep = dataset.load(args.chip_model) if args.chip_model else None
    chip = (None if sweep is None else device_one_model.held_out_log_seconds(
        sweep, p.frame, progress=lambda lib: print(f"chip model without {lib}", file=sys.stderr)))
    correction, held = held_out_correction(p, parts, chip)
    figures = score(p, correction)
    if args.held_out_out:
        write_held_out(p, correction, args.held_out_out)
    if labels is not None:  # the same held-out predictions against each raw median
        raw = p.frame["device_raw"].to_numpy(float) / p.frame["base"].to_numpy(float)
        real = p.frame["library"].to_numpy() != "synthetic"
        figures["real_libraries_raw_labels"] = folds((np.log(raw) - correction)[real])
    if parts is not None:
        figures["step_only"] = score(p)["real_libraries"]["corrected"]
        figures["phase_rows"] = len(parts)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if not args.dry_run:
        scored = figures["real_libraries"]["corrected"]
        about = {"programs": figures["n"], "libraries": figures["libraries"],
                 "outside_programs": figures.get("outside", {}).get("n", 0),
                 "chip": env.get("device_kind", ""), "libtpu": env.get("libtpu_version", ""),
                 "host_cpu_count": env.get("host_cpu_count", 0),
                 "library_held_out_median_fold": round(scored["median_fold"], 3),
                 "library_held_out_p90_fold": round(scored["p90_fold"], 3),
                 "labels": "raw median" if labels is None else {
                     "at": "the observations' average process state",
                     "position_edges": list(device_labels.POSITION_EDGES),
                     "position_factor": [round(float(f), 3) for f in labels.position_factor],
                     "residual_fold": round(labels.residual_fold, 3)}}
        chip_model = None if sweep is None else device_one_model.fit_chip_model(
            *device_one_model.training_set(sweep, p.frame))
        correction = carried_widening(fit(p, about, parts, (correction, held), chip_model),
                                      args.model)
        install(args.model, correction)
        write_card_section(args.model, card_section(figures, correction.about))
        print(f"installed {args.model / CORRECTION_FILE}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
