"""The `costmodel` command: demo, predict, advise, sweep, train, evaluate, calibrate, serve."""

from __future__ import annotations

import argparse
import json
import sys


def _emit(data, as_json: bool, text: str = "") -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else text)


def cmd_demo(args) -> int:
    from . import _demo

    rows = _demo.run(compile_programs=not args.no_compile, budget_seconds=args.budget,
                     as_json=args.json)
    if args.json:
        _emit(rows, True)
    return 0


def _program(args):
    from ._argspec import load_function, parse_arg

    return load_function(args.function), [parse_arg(a) for a in args.arg]


def cmd_predict(args) -> int:
    from ._predict import predict

    fn, shapes = _program(args)
    pred = predict(fn, *shapes, backend=args.backend, target=args.target)
    text = repr(pred)
    if args.explain:
        text += "\n" + "\n".join(f"  halving {name}: ×{ratio:.2f}" for name, ratio in pred.explain())
    _emit(pred.to_dict(), args.json, text)
    return 0


def cmd_advise(args) -> int:
    from ._advise import advise

    fn, shapes = _program(args)
    advice = advise(fn, *shapes, budget_seconds=args.budget, backend=args.backend,
                    target=args.target)
    _emit(advice.to_dict(), args.json, str(advice))
    return 0


def cmd_sweep(args) -> int:
    from costmodel.training.sweep import SweepConfig, run_sweep

    config = SweepConfig(
        backend=args.backend, target=args.target or ("h100" if args.backend == "gpu" else ""),
        families=tuple(args.families) if args.families else None, out=args.out,
        budget_minutes=args.budget_minutes, workers=args.workers, timeout=args.timeout,
        memory_limit=int(args.memory_limit_gb * 2**30), limit=args.limit,
        modules=tuple(args.module), dask_address=args.dask, retry_errors=args.retry_errors,
        progress=not args.json)
    summary = run_sweep(config)
    data = {"planned": summary.planned, "skipped": summary.skipped,
            "measured": summary.measured, "statuses": dict(summary.statuses),
            "seconds": round(summary.seconds, 1), "shard": summary.shard,
            "stopped_by_budget": summary.stopped_by_budget}
    _emit(data, args.json, " ".join(f"{k}={v}" for k, v in data.items()))
    return 0


def cmd_train(args) -> int:
    from pathlib import Path

    from costmodel.training import dataset
    from costmodel.training.fit import retrain

    data = dataset.load(args.data)
    artifact = retrain(data, args.backend, args.target or "", Path(args.out),
                       name=args.name or Path(args.out).name)
    _emit(artifact.manifest, args.json,
          f"wrote {artifact.path} (version {artifact.version}, "
          f"{(artifact.manifest.get('training_data') or {}).get('rows')} rows)")
    return 0


def cmd_evaluate(args) -> int:
    from pathlib import Path

    from costmodel.training import dataset
    from costmodel.training.evaluate import run_evaluation
    from costmodel.training.fit import select_rows, train

    target = args.target or ""
    rows = select_rows(dataset.load(args.data), args.backend, target)
    result = run_evaluation(rows, args.backend, target)
    if args.plots:  # plots reuse the held-out predictions of the evaluation just run
        from costmodel.training.plots import write_all

        write_all(result.predictions, rows, train(rows, args.backend, target), Path(args.plots))
    _emit(result.report, args.json, json.dumps(result.report, indent=2))
    return 0


def cmd_calibrate(args) -> int:
    from costmodel.training.calibrate import calibrate

    result = calibrate()
    _emit(result, args.json, f"calibration scale {result['scale']:.3f} saved to {result.get('path')}")
    return 0


def cmd_serve(args) -> int:
    from costmodel.api.serve import serve

    serve(host=args.host, port=args.port, workers=args.workers)
    return 0


def cmd_export(args) -> int:
    from costmodel.training import dataset

    data = dataset.load(args.data)
    path = dataset.export_parquet(data, args.out)
    _emit({"rows": len(data), "path": str(path)}, args.json, f"{len(data)} rows -> {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="costmodel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_text):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func)
        return p

    def target_args(p, default_backend=None):
        p.add_argument("--backend", default=default_backend, choices=["cpu", "gpu"])
        p.add_argument("--target", default=None, help="GPU target: h100, a100, h200")

    p = add("demo", cmd_demo, "predict, advise and compile a few example programs")
    p.add_argument("--no-compile", action="store_true", help="predict only")
    p.add_argument("--budget", type=float, default=5.0, help="compile budget in seconds")

    for name, func, help_text in (("predict", cmd_predict, "predict compile time and memory"),
                                  ("advise", cmd_advise, "should I split this jit?")):
        p = add(name, func, help_text)
        p.add_argument("function", help="FILE.py:FUNC or module:FUNC")
        p.add_argument("--arg", action="append", default=[],
                       help="an argument as DTYPE[dims], e.g. f32[1024,1024]; repeat per arg")
        target_args(p)
        if name == "predict":
            p.add_argument("--explain", action="store_true", help="features driving it")
        else:
            p.add_argument("--budget", type=float, default=10.0, help="budget in seconds")

    p = add("sweep", cmd_sweep, "measure real compiles of the program corpus (resumable)")
    p.add_argument("--backend", default="cpu", choices=["cpu", "gpu"])
    p.add_argument("--target", default="", help="GPU target for --backend gpu (default h100)")
    p.add_argument("--families", nargs="*", help="families to measure (default: all)")
    p.add_argument("--out", required=True, help="folder of JSON-lines shards")
    p.add_argument("--budget-minutes", type=float, default=None)
    p.add_argument("--workers", type=int, default=1,
                   help="concurrent measurements (1 keeps timings clean on 2 cores)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per program")
    p.add_argument("--memory-limit-gb", type=float, default=12.0)
    p.add_argument("--limit", type=int, default=None, help="measure at most N programs")
    p.add_argument("--module", action="append", default=[],
                   help="import this module first (registers your own families)")
    p.add_argument("--dask", default=None, help="dask.distributed scheduler address")
    p.add_argument("--retry-errors", action="store_true", help="re-measure error rows")

    p = add("train", cmd_train, "fit a model from dataset files and write an artifact")
    p.add_argument("--data", nargs="+", required=True, help="dataset files or folders")
    p.add_argument("--out", required=True, help="artifact folder, e.g. models/mine")
    p.add_argument("--name", default=None)
    target_args(p, "cpu")

    p = add("evaluate", cmd_evaluate, "leave-one-family-out and extrapolation evaluation")
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--plots", default=None, help="folder for PNG plots")
    target_args(p, "cpu")

    add("calibrate", cmd_calibrate, "measure this machine's speed against the model's")

    p = add("serve", cmd_serve, "run the HTTP API under gunicorn")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=2)

    p = add("export", cmd_export, "compact dataset shards into one parquet file")
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--out", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from costmodel._argspec import ArgSpecError
    from costmodel.features import StableHLOParseError, UnknownTargetError

    try:
        return args.func(args)
    except (ArgSpecError, UnknownTargetError, StableHLOParseError, FileNotFoundError) as exc:
        print(f"costmodel {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
