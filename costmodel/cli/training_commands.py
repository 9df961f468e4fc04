"""Commands that measure, train and evaluate: sweep, train, evaluate, calibrate, export,
convert-model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from costmodel.features import Placement

from .common import UsageError, backend_and_target, emit, import_user_module, where_label


def cmd_sweep(args) -> int:
    from costmodel.training.measure.cluster import ClusterRefused
    from costmodel.training.measure.sweep import SweepConfig, run_sweep

    backend, target = backend_and_target(args.backend, args.target)
    for module in args.module:
        import_user_module(module)
    config = SweepConfig(
        backend=backend, target=target,
        families=tuple(args.families) if args.families else None, out=args.out,
        budget_minutes=args.budget_minutes, workers=args.workers, timeout=args.timeout,
        memory_limit=int(args.memory_limit_gb * 2**30), limit=args.limit,
        modules=tuple(args.module), dask_address=args.dask, retry_errors=args.retry_errors,
        allow_concurrent=args.allow_concurrent, any_worker=args.any_worker,
        progress=not args.json, programs_of=tuple(args.programs_of),
        max_repeats=args.max_repeats, trace_phases=not args.no_phases,
        shardings=tuple(args.shardings))
    try:
        summary = run_sweep(config)
    except ClusterRefused as exc:  # the cluster's set-up, not a fault of the sweep
        raise UsageError(str(exc)) from None
    data = {"planned": summary.planned, "skipped": summary.skipped,
            "measured": summary.measured, "statuses": dict(summary.statuses),
            "seconds": round(summary.seconds, 1), "shard": summary.shard,
            "stopped_by_budget": summary.stopped_by_budget,
            "cut_by_budget": summary.cut_by_budget}
    emit(data, args.json, " ".join(f"{k}={v}" for k, v in data.items()))
    return 0


def cmd_train(args) -> int:
    from costmodel.training.build import retrain
    from costmodel.training.fitting.fit import MIN_LABELLED_ROWS, select_rows, untrainable_targets
    from costmodel.training.store import dataset

    backend, target = backend_and_target(args.backend, args.target)
    data = dataset.load(args.data)
    left_out = untrainable_targets(select_rows(data, backend, target))
    try:
        artifact = retrain(data, backend, target, Path(args.out),
                           name=args.name or Path(args.out).name)
    except ValueError as exc:  # no rows for this backend, or none with a compile time
        raise UsageError(f"cannot train on {' '.join(args.data)}: {exc}") from None
    text = (f"wrote {artifact.path} (version {artifact.version}, "
            f"{(artifact.manifest.get('training_data') or {}).get('rows')} rows)")
    text += "".join(f"; not trained: {name} ({n} rows with that label, need "
                    f"{MIN_LABELLED_ROWS}), predicted as NaN" for name, n in left_out.items())
    emit({**artifact.manifest, "not_trained": left_out}, args.json, text)
    return 0


def shipped_data(backend: str, target: str) -> Path:
    """The dataset the shipped model for (backend, target) was trained on: the folder of
    its parquet files (a TPU chip's holds its topologies' sharded rows beside one-chip ones)."""
    import costmodel.training

    label = Placement(backend, target).model.label
    return Path(costmodel.training.__file__).parent / "data" / label


def cmd_evaluate(args) -> int:
    from tqdm import tqdm

    from costmodel.training.evaluation.evaluate import SPLITS, folds, run_evaluation
    from costmodel.training.fitting.fit import select_rows, train
    from costmodel.training.store import dataset

    backend, target = backend_and_target(args.backend, args.target)
    paths = args.data or [shipped_data(backend, target)]
    rows = select_rows(dataset.load(paths), backend, target)
    if len(rows) == 0:
        raise UsageError(f"no ok rows for {where_label(backend, target)} in {', '.join(map(str, paths))}")
    total = sum(len(folds(rows, split)) for split in SPLITS) + bool(args.plots)
    with tqdm(total=total, unit="fold", desc=f"evaluate {where_label(backend, target)}") as bar:
        def done(fold: str) -> None:
            bar.set_postfix_str(fold, refresh=False)
            bar.update()

        result = run_evaluation(rows, backend, target, progress=done, jobs=args.jobs)
        if args.plots:  # plots reuse the held-out predictions of the evaluation just run
            from costmodel.training.evaluation.plots import write_all

            write_all(result.predictions, rows, train(rows, backend, target), Path(args.plots))
            done("plots")
    emit(result.report, args.json, json.dumps(result.report, indent=2))
    return 0


def cmd_calibrate(args) -> int:
    from tqdm import tqdm

    from costmodel.training.corpus.calibration import PROGRAMS
    from costmodel.training.measure.calibrate import ROUNDS, calibrate

    if args.backend == "tpu":
        return _calibrate_tpu(args)
    if args.from_rows or args.export or args.target:
        raise UsageError("--target, --from-rows and --export calibrate a TPU: add --backend tpu")
    rounds = args.rounds or ROUNDS
    with tqdm(total=len(PROGRAMS) * rounds, desc="calibrate", unit="program",
              file=sys.stderr, disable=args.json) as bar:
        def progress(program: str) -> None:
            bar.set_postfix_str(program)
            bar.update(1)

        result = calibrate(progress=progress, rounds=rounds)
    emit(result, args.json, calibration_summary(result))
    return 0


def _calibrate_tpu(args) -> int:
    from tqdm import tqdm

    from costmodel.models import NoModelError
    from costmodel.training.measure import tpu_calibrate as tpu

    chip = (args.target or tpu.CHIP).split(":")[0]
    if args.export:
        entries = tpu.export_set(Path(args.export), chip)
        emit({"programs": entries, "path": args.export}, args.json,
             f"{len(entries)} TPU calibration programs, timed after an untimed warm-up pass of "
             f"them -> {args.export}/manifest.json; on "
             f"the chip host: python bench/evaluations/tpu_device_run.py {args.export} "
             "--out rows.jsonl; then here: costmodel calibrate --backend tpu --from-rows "
             "rows.jsonl")
        return 0
    rounds = args.rounds or tpu.ROUNDS
    with tqdm(total=len(tpu.PROGRAMS) * rounds, desc="calibrate tpu", unit="program",
              file=sys.stderr, disable=args.json or bool(args.from_rows)) as bar:
        def progress(program: str) -> None:
            bar.set_postfix_str(program)
            bar.update(1)

        try:
            result = tpu.calibrate_tpu(target=chip, rounds=rounds, from_rows=args.from_rows,
                                       progress=progress)
        except (tpu.NoChip, tpu.WrongChip, NoModelError) as exc:
            raise UsageError(str(exc)) from None
    emit(result, args.json, tpu_calibration_summary(result))
    return 0


def tpu_calibration_summary(record: dict) -> str:
    """What `costmodel calibrate --backend tpu` prints: the scale, what it was measured
    from, then how sure it is (`tpu_calibrate.confidence`)."""
    from costmodel.training.measure.tpu_calibrate import confidence

    return (f"TPU {record['chip']} calibration scale {record['scale']:.3f} (the set's compiles "
            f"on a {record['device_kind']} over theirs on the {record['chip']} host the model's "
            f"device correction was fitted on, median of {record['program_ratios']['n']} "
            f"programs; from {record['measured_from']}); "
            f"saved to {record.get('path')}; TPU predictions for {record['chip']} now apply "
            f"it\n{confidence(record)}")


def calibration_summary(record: dict) -> str:
    """What `costmodel calibrate` prints: the scale applied and where it comes from, then
    how sure it is (`calibrate.confidence`)."""
    from costmodel.training.measure.calibrate import APPLIED_FACTOR, confidence

    reference = record["reference_seconds"]
    predicted = sum(1 for p in record["programs"].values() if p.get("predicted"))
    source = {
        "model_ratio": "the calibration set's compiles here over the model's predictions "
                       f"of them, median of {predicted} programs, "
                       f"{record['candidates']['model_ratio']:.3f}, times "
                       f"{APPLIED_FACTOR['model_ratio']:.2f} for programs it never saw",
        "reference_speed": f"the reference compiles in {reference['here']:.3f} s here, "
                           f"{reference['model']:.3f} s on the training machine",
        "calibration_set": "the calibration set's median ratio to the training machine",
    }[record["scale_from"]]
    return (f"calibration scale {record['scale']:.3f} ({source}); saved to "
            f"{record.get('path')}\n{confidence(record)}")


def cmd_export(args) -> int:
    from costmodel.training.store import dataset

    data = dataset.load(args.data)
    path = dataset.export_parquet(data, args.out)
    emit({"rows": len(data), "path": str(path)}, args.json, f"{len(data)} rows -> {path}")
    return 0


def cmd_convert_model(args) -> int:
    from costmodel.training.fitting.publish import convert_pickled

    artifact = convert_pickled(args.path)
    emit({"path": str(artifact.path), "version": artifact.version,
           "sha256": artifact.manifest["sha256"]}, args.json,
          f"{artifact.path}: {artifact.version} is now plain data (model.npz)")
    return 0


# the parser -------------------------------------------------------------------------
