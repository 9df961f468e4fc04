"""The `costmodel` command: demo, predict, advise, sweep, train, evaluate, calibrate, serve."""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
from pathlib import Path

from costmodel.features import Placement


class UsageError(Exception):
    """A wrong use of the command line: reported as one line on stderr, exit status 2."""


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Appends each option's default, unless it is required or its help already says
    the default in words."""

    def _get_help_string(self, action) -> str:
        if action.required or "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Shows defaults in every `--help`; a wrong argument is one line, not the usage."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _checked(kind: type, accept, what: str):
    """An argparse type: `kind(text)`, finite and accepted (nan, inf and -1 are refused)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not accept(value):
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
        return value
    return parse


seconds = _checked(float, lambda v: v > 0, "a positive number of seconds")
positive = _checked(float, lambda v: v > 0, "a positive number")
count = _checked(int, lambda v: v >= 1, "a whole number >= 1")
port = _checked(int, lambda v: 0 <= v <= 65535, "a port number, 0-65535")


def _emit(data, as_json: bool, text: str = "") -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else text)


# where programs and models come from ----------------------------------------------
def _where(backend: str, target: str) -> str:
    return Placement(backend, target).where


def shipped_models() -> list[tuple[str, str]]:
    """(backend, target) of every model that ships with costmodel."""
    from costmodel.features.environment import KNOWN_TARGETS
    from costmodel.models import default_path

    return [(b, t) for b, targets in KNOWN_TARGETS.items() for t in targets
            if (default_path(b, t) / "manifest.json").is_file()]


def _backend_and_target(backend: str | None, target: str | None) -> tuple[str, str]:
    """Validated (backend, target): a target alone means the GPU backend."""
    from costmodel.features import normalize_target

    if target and backend == "cpu":
        raise UsageError(f"--target {target} is a GPU target: use it with --backend gpu "
                         "(CPU models have no target)")
    return normalize_target(backend or ("gpu" if target else "cpu"), target)


def _model_placement(args) -> tuple[str | None, str | None]:
    """(backend, target) for predict and advise: as asked, else the --model's own; without
    --model, one that has a shipped model (None, None: the local default backend)."""
    from ._predict import load_model

    if args.model:
        artifact = load_model(args.model)
        if args.backend is None and args.target is None:
            return artifact.backend, artifact.target
        asked = _backend_and_target(args.backend, args.target)
        if asked != (artifact.backend, artifact.target):
            raise UsageError(f"--model {args.model} predicts for "
                             f"{_where(artifact.backend, artifact.target)}, not {_where(*asked)}")
        return asked
    if args.backend is None and args.target is None:
        return None, None
    asked = _backend_and_target(args.backend, args.target)
    shipped = shipped_models()
    if asked not in shipped:
        raise UsageError(
            f"no model ships for {_where(*asked)} (shipped: "
            f"{', '.join(_where(*s) for s in shipped)}); measure it with `costmodel sweep "
            f"--backend {asked[0]} --target {asked[1]}`, `costmodel train`, then pass --model")
    return asked


def _import(where: str):
    from ._argspec import import_module_or_file

    if os.getcwd() not in sys.path:  # `cli_prog:fn` finds ./cli_prog.py, as `python -m` does
        sys.path.insert(0, os.getcwd())
    try:
        return import_module_or_file(where)
    except (ImportError, SyntaxError) as exc:
        raise UsageError(f"cannot import {where!r}: {exc}") from None


def _function(ref: str):
    from ._argspec import load_function

    if ":" in ref:
        _import(ref.rpartition(":")[0])
    fn = load_function(ref)
    if not callable(fn):
        raise UsageError(f"{ref} is a {type(fn).__name__}, not a function")
    return fn


def _check_arguments(fn, ref: str, shapes: list) -> None:
    """The --args must fit the function's positional parameters."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to check (a builtin): tracing will tell
        return
    try:
        signature.bind(*shapes)
    except TypeError as exc:
        raise UsageError(f"{ref}{signature} cannot take {len(shapes)} --arg: {exc}") from None


def _program(args):
    from ._argspec import parse_arg

    fn = _function(args.function)
    shapes = [parse_arg(a) for a in args.arg]
    _check_arguments(fn, args.function, shapes)
    return fn, shapes


def _traced(call):
    """Run `call()`; a program that does not trace with the given --args is a wrong use."""
    try:
        return call()
    except TypeError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"the function does not trace with these --args: {first}") from None


# commands ---------------------------------------------------------------------------
def cmd_demo(args) -> int:
    from . import _demo

    rows = _demo.run(compile_programs=not args.no_compile, budget_seconds=args.budget,
                     as_json=args.json)
    if args.json:
        _emit(rows, True)
    return 0


def cmd_predict(args) -> int:
    from ._stage import lower

    fn, shapes = _program(args)
    backend, target = _model_placement(args)
    pred = _traced(lambda: lower(fn, *shapes).predict(backend=backend, target=target,
                                                       model=args.model))
    text = repr(pred)
    if args.explain:
        text += "\n" + "\n".join(f"  halving {name}: ×{ratio:.2f}" for name, ratio in pred.explain())
    _emit(pred.to_dict(), args.json, text)
    return 0


def cmd_advise(args) -> int:
    from ._stage import lower

    fn, shapes = _program(args)
    backend, target = _model_placement(args)
    advice = _traced(lambda: lower(fn, *shapes).advise(budget_seconds=args.budget,
                                                       backend=backend, target=target,
                                                       model=args.model))
    _emit(advice.to_dict(), args.json, str(advice))
    return 0


def cmd_blame(args) -> int:
    from ._stage import lower

    fn, shapes = _program(args)
    backend, target = _model_placement(args)
    blame = _traced(lambda: lower(fn, *shapes).blame(backend=backend, target=target,
                                                     model=args.model))
    text = str(blame).splitlines()[:2 + args.top]
    if args.html:
        Path(args.html).write_text(blame.html())
        text.append(f"icicle chart: {args.html}")
    if args.trace:
        Path(args.trace).write_text(json.dumps(blame.trace()))
        text.append(f"trace (open in https://ui.perfetto.dev): {args.trace}")
    _emit(blame.to_dict(), args.json, "\n".join(text))
    return 0


def cmd_profile(args) -> int:
    from ._stage import lower

    fn, shapes = _program(args)
    result = _traced(lambda: lower(fn, *shapes)).profile()
    text = str(result)
    if args.html:
        Path(args.html).write_text(result.html())
        text += f"\nicicle chart: {args.html}"
    _emit(result.to_dict(), args.json, text)
    return 0


def cmd_sweep(args) -> int:
    from costmodel.training.sweep import SweepConfig, run_sweep

    backend, target = _backend_and_target(args.backend, args.target)
    for module in args.module:
        _import(module)
    config = SweepConfig(
        backend=backend, target=target,
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
    from costmodel.training import dataset
    from costmodel.training.fit import MIN_LABELLED_ROWS, retrain, select_rows, untrainable_targets

    backend, target = _backend_and_target(args.backend, args.target)
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
    _emit({**artifact.manifest, "not_trained": left_out}, args.json, text)
    return 0


def shipped_data(backend: str, target: str) -> Path:
    """The dataset the shipped model for (backend, target) was trained on."""
    import costmodel.training

    label = Placement(backend, target).label
    return Path(costmodel.training.__file__).parent / "data" / label / "rows.parquet"


def cmd_evaluate(args) -> int:
    from tqdm import tqdm

    from costmodel.training import dataset
    from costmodel.training.evaluate import SPLITS, folds, run_evaluation
    from costmodel.training.fit import select_rows, train

    backend, target = _backend_and_target(args.backend, args.target)
    paths = args.data or [shipped_data(backend, target)]
    rows = select_rows(dataset.load(paths), backend, target)
    if len(rows) == 0:
        raise UsageError(f"no ok rows for {_where(backend, target)} in {', '.join(map(str, paths))}")
    total = sum(len(folds(rows, split)) for split in SPLITS) + bool(args.plots)
    with tqdm(total=total, unit="fold", desc=f"evaluate {_where(backend, target)}") as bar:
        def done(fold: str) -> None:
            bar.set_postfix_str(fold, refresh=False)
            bar.update()

        result = run_evaluation(rows, backend, target, progress=done, jobs=args.jobs)
        if args.plots:  # plots reuse the held-out predictions of the evaluation just run
            from costmodel.training.plots import write_all

            write_all(result.predictions, rows, train(rows, backend, target), Path(args.plots))
            done("plots")
    _emit(result.report, args.json, json.dumps(result.report, indent=2))
    return 0


def cmd_calibrate(args) -> int:
    from tqdm import tqdm

    from costmodel.training.calibrate import calibrate
    from costmodel.training.corpus.calibration import PROGRAMS

    with tqdm(total=len(PROGRAMS), desc="calibrate", unit="program", file=sys.stderr,
              disable=args.json) as bar:
        def progress(program: str) -> None:
            bar.set_postfix_str(program)
            bar.update(1)

        result = calibrate(progress=progress)
    parts = result.get("part_scales")
    detail = (" (" + ", ".join(f"{k} x{v:.2f}" for k, v in parts.items()) + ")") if parts else ""
    _emit(result, args.json, f"calibration scale {result['scale']:.3f}{detail} saved to "
                             f"{result.get('path')}")
    return 0


def served_models(paths: list[str]) -> dict[tuple[str, str], Path] | None:
    """`MODEL_PATHS` for the service: the shipped models, replaced by each --model for the
    backend and target its manifest names (None: no --model, the shipped ones)."""
    from costmodel.models import default_path, verify

    if not paths:
        return None
    models = {key: default_path(*key) for key in shipped_models()}
    for path in paths:
        manifest = verify(path)  # checked without unpickling, before any worker starts
        models[(manifest["backend"], manifest["target"])] = Path(path)
    return models


def cmd_serve(args) -> int:
    from costmodel.api.serve import serve

    models = served_models(args.model)
    # Unset thread and timeout options leave serve()'s own defaults in force.
    tuning = {name: value for name, value in (("threads", args.threads),
                                              ("read_timeout", args.read_timeout))
              if value is not None}
    serve(host=args.host, port=args.port, workers=args.workers,
          config=None if models is None else {"MODEL_PATHS": models}, **tuning)
    return 0


def cmd_export(args) -> int:
    from costmodel.training import dataset

    data = dataset.load(args.data)
    path = dataset.export_parquet(data, args.out)
    _emit({"rows": len(data), "path": str(path)}, args.json, f"{len(data)} rows -> {path}")
    return 0


def cmd_convert_model(args) -> int:
    from costmodel.training.publish import convert_pickled

    artifact = convert_pickled(args.path)
    _emit({"path": str(artifact.path), "version": artifact.version,
           "sha256": artifact.manifest["sha256"]}, args.json,
          f"{artifact.path}: {artifact.version} is now plain data (model.npz)")
    return 0


# the parser -------------------------------------------------------------------------
def _gpu_targets_help(targets) -> str:
    return f"GPU target, implies --backend gpu: {', '.join(targets)}"


def build_parser() -> argparse.ArgumentParser:
    from costmodel.features.environment import KNOWN_TARGETS

    parser = _Parser(prog="costmodel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name, func, help_text):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func)
        return p

    def measuring_target(p):  # any target costmodel can compile for
        p.add_argument("--backend", default=None, choices=["cpu", "gpu"],
                       help="backend (default: gpu with --target, else cpu)")
        p.add_argument("--target", default=None, help=_gpu_targets_help(KNOWN_TARGETS["gpu"]))

    p = add("demo", cmd_demo, "predict, advise and compile a few example programs")
    p.add_argument("--no-compile", action="store_true", help="predict only")
    p.add_argument("--budget", type=seconds, default=1.0, help="compile budget in seconds")

    shipped_gpu = [t for b, t in shipped_models() if b == "gpu"]
    for name, func, help_text in (("predict", cmd_predict, "predict compile time and memory"),
                                  ("advise", cmd_advise, "should I split this jit?"),
                                  ("blame", cmd_blame,
                                   "which source lines make the compile slow?")):
        p = add(name, func, help_text)
        p.add_argument("function", help="FILE.py:FUNC or module:FUNC (modules in the "
                                        "current folder are found)")
        p.add_argument("--arg", action="append", default=[],
                       help="an argument as DTYPE[dims], e.g. f32[1024,1024]; repeat per arg")
        p.add_argument("--backend", default=None, choices=["cpu", "gpu"],
                       help="backend (default: the --model's, gpu with --target, else JAX's "
                            "default here)")
        p.add_argument("--target", default=None,
                       help=_gpu_targets_help(shipped_gpu) + " (others need --model)")
        p.add_argument("--model", default=None,
                       help="model folder written by `costmodel train --out` (default: the "
                            "shipped model)")
        if name == "predict":
            p.add_argument("--explain", action="store_true", help="features driving it")
        elif name == "advise":
            p.add_argument("--budget", type=seconds, default=10.0, help="budget in seconds")
        else:
            p.add_argument("--top", type=count, default=10, help="regions to print")
            p.add_argument("--html", default=None, help="write an icicle chart page here")
            p.add_argument("--trace", default=None,
                           help="write Chrome trace-event JSON here (Perfetto opens it)")

    p = add("profile", cmd_profile,
            "compile once under a profiler: where the time went, beside the prediction")
    p.add_argument("function", help="FILE.py:FUNC or module:FUNC")
    p.add_argument("--arg", action="append", default=[],
                   help="an argument as DTYPE[dims], e.g. f32[1024,1024]; repeat per arg")
    p.add_argument("--html", default=None, help="write an icicle chart page here")

    p = add("sweep", cmd_sweep, "measure real compiles of the program corpus (resumable)")
    measuring_target(p)
    p.add_argument("--families", nargs="*", help="families to measure (default: all)")
    p.add_argument("--out", required=True, help="folder of JSON-lines shards")
    p.add_argument("--budget-minutes", type=positive, default=None,
                   help="stop starting programs after this many minutes")
    p.add_argument("--workers", type=count, default=1,
                   help="concurrent measurements (1 keeps timings clean on 2 cores)")
    p.add_argument("--timeout", type=seconds, default=300.0, help="seconds per program")
    p.add_argument("--memory-limit-gb", type=positive, default=12.0,
                   help="a measurement past this RSS is killed and recorded as oom")
    p.add_argument("--limit", type=count, default=None,
                   help="the sweep's first N programs (of its fixed order); rerunning "
                        "resumes them")
    p.add_argument("--module", action="append", default=[],
                   help="import this module first (registers your own families)")
    p.add_argument("--dask", default=None, help="dask.distributed scheduler address")
    p.add_argument("--retry-errors", action="store_true", help="re-measure error rows")

    p = add("train", cmd_train, "fit a model from dataset files and write an artifact")
    p.add_argument("--data", nargs="+", required=True,
                   help="dataset files or folders (sweeps, `costmodel.record` files)")
    p.add_argument("--out", required=True, help="artifact folder, e.g. models/mine")
    p.add_argument("--name", default=None, help="model name (default: the --out folder's)")
    measuring_target(p)

    p = add("evaluate", cmd_evaluate, "leave-one-family-out, leave-one-library-out and "
                                      "extrapolation evaluation")
    p.add_argument("--data", nargs="+", default=None,
                   help="dataset files or folders (default: the shipped data of the backend "
                        "and target)")
    p.add_argument("--plots", default=None, help="folder for PNG plots")
    p.add_argument("--jobs", type=count, default=1,
                   help="processes fitting folds side by side (each one thread)")
    measuring_target(p)

    add("calibrate", cmd_calibrate, "measure this machine's speed against the model's")

    p = add("serve", cmd_serve, "run the HTTP API under gunicorn")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind")
    p.add_argument("--port", type=port, default=8000, help="TCP port (0: any free one)")
    p.add_argument("--workers", type=count, default=2, help="gunicorn worker processes")
    p.add_argument("--threads", type=count, default=None,
                   help="request threads per worker, 64 when unset (a half-sent request "
                        "holds one)")
    p.add_argument("--read-timeout", type=seconds, default=None,
                   help="seconds a request may take to arrive before it gets 408, 10 when unset")
    p.add_argument("--model", action="append", default=[],
                   help="serve this model folder for the backend and target it was trained "
                        "for, instead of the shipped one; repeat per model")

    p = add("export", cmd_export, "compact dataset shards into one parquet file")
    p.add_argument("--data", nargs="+", required=True, help="dataset files or folders")
    p.add_argument("--out", required=True, help="parquet file to write")
    p = add("convert-model", cmd_convert_model,
            "rewrite a model artifact saved as a pickle (estimator.joblib) as plain data")
    p.add_argument("path", help="the artifact's folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from costmodel._argspec import ArgSpecError
    from costmodel._extras import missing_extra
    from costmodel.features import StableHLOParseError, UnknownTargetError
    from costmodel.models import ArtifactError

    try:
        return args.func(args)
    except (UsageError, ArgSpecError, UnknownTargetError, StableHLOParseError, ArtifactError,
            FileNotFoundError) as exc:
        message = " ".join(str(exc).split())  # one line, whatever the message held
        print(f"costmodel {args.command}: {message}", file=sys.stderr)
        return 2
    except ImportError as exc:
        extra = missing_extra(exc)
        if extra is None:
            raise
        print(f"costmodel {args.command}: needs the {extra!r} extra ({exc.name} is not "
              f"installed): pip install 'costmodel[{extra}]'", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
