"""The `costmodel` command: predict the compile time and memory of JAX programs before
compiling them, and measure, train and serve the models that do it. `costmodel COMMAND
--help` describes each command."""

from __future__ import annotations

import argparse
import os
import sys

from .common import (
    Parser,
    UsageError,
    count,
    known_placements,
    port,
    positive,
    seconds,
    shipped_models,
)
from .program_commands import cmd_advise, cmd_blame, cmd_demo, cmd_predict, cmd_profile
from .serve_commands import cmd_retrain_worker, cmd_serve
from .training_commands import (
    cmd_calibrate,
    cmd_convert_model,
    cmd_evaluate,
    cmd_export,
    cmd_sweep,
    cmd_train,
)
from .user_code import UserCodeError


def _targets_help(placements) -> str:
    """`h100 (gpu), ...`: the targets among `placements` and the backend each implies."""
    return ", ".join(f"{t} ({b})" for b, t in placements if t)


def build_parser() -> argparse.ArgumentParser:
    from costmodel.features.environment import KNOWN_BACKENDS

    parser = Parser(prog="costmodel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="commands")

    def add(name, func, help_text):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--debug", action="store_true",
                       help="a failure shows its whole traceback, costmodel's frames included")
        p.set_defaults(func=func)
        return p

    def measuring_target(p):  # any target costmodel can compile for
        p.add_argument("--backend", default=None, choices=KNOWN_BACKENDS,
                       help="backend (default: the --target's, else cpu)")
        p.add_argument("--target", default=None,
                       help="target, implies its backend: " + _targets_help(known_placements()))

    p = add("demo", cmd_demo, "predict, advise and compile a few example programs")
    p.add_argument("--no-compile", action="store_true", help="predict only")
    p.add_argument("--budget", type=seconds, default=1.0, help="compile budget in seconds")

    shipped = shipped_models()
    for name, func, help_text in (("predict", cmd_predict, "predict compile time and memory"),
                                  ("advise", cmd_advise, "should I split this jit?"),
                                  ("blame", cmd_blame,
                                   "which source lines make the compile slow?")):
        p = add(name, func, help_text)
        p.add_argument("function", help="FILE.py:FUNC or module:FUNC (modules in the "
                                        "current folder are found)")
        p.add_argument("--arg", action="append", default=[],
                       help="an argument as DTYPE[dims], e.g. f32[1024,1024]; repeat per arg")
        p.add_argument("--backend", default=None, choices=KNOWN_BACKENDS,
                       help="backend (default: the --model's, the --target's, else JAX's "
                            "default here)")
        p.add_argument("--target", default=None,
                       help="target with a shipped model, implies its backend: "
                            + _targets_help(shipped) + " (others need --model)")
        p.add_argument("--model", default=None,
                       help="model folder written by `costmodel train --out` (default: the "
                            "shipped model)")
        if name == "predict":
            p.add_argument("--explain", action="store_true", help="features driving it")
            p.add_argument("--process-state", choices=("fresh", "warm"), default="fresh",
                           help="TPU: a compile early in a fresh process (default), or after "
                                "about a hundred others in the process (warm)")
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
                   help="stop starting programs after this many minutes; one still "
                        "running then is killed, writes no row and is measured next run")
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
    p.add_argument("--dask", default=None,
                   help="dask.distributed scheduler address; each worker must run one "
                        "compile at a time (one thread or `--resources compile=1`), GPU "
                        "backends go to workers declaring `gpu=1` (docs/measurement.md, Sweeps on a "
                        "cluster)")
    p.add_argument("--allow-concurrent", action="store_true",
                   help="with --dask, measure on workers that run several compiles at "
                        "once (warns: their timings are inflated)")
    p.add_argument("--any-worker", action="store_true",
                   help="with --dask and a GPU backend, measure on every worker, deviceless "
                        "where it has no GPU (rows say `deviceless`), not only on workers "
                        "declaring gpu=1")
    p.add_argument("--retry-errors", action="store_true", help="re-measure error rows")
    p.add_argument("--programs-of", nargs="*", default=[],
                   help="measure the programs of these datasets' ok rows instead of the "
                        "corpus: the same programs on another backend")
    p.add_argument("--max-repeats", type=count, default=3,
                   help="timed compiles per program (fewer for long ones)")
    p.add_argument("--no-phases", action="store_true",
                   help="skip the per-phase columns (CPU/GPU: a profiled extra compile; "
                        "TPU: libtpu's log)")
    p.add_argument("--shardings", nargs="*", default=[], choices=("dp", "fsdp", "tp"),
                   help="with a TPU topology --target (v5e:2x2, v5e:4x4), measure each "
                        "program sharded by each of these strategies over all its chips")

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

    p = add("calibrate", cmd_calibrate, "measure this machine's speed (or, with --backend "
                                        "tpu, this TPU VM's) against the model's")
    p.add_argument("--rounds", type=count, default=None,
                   help="times the calibration set is measured, one round after another "
                        "(each program's figure is the median of its rounds); unset: 3, "
                        "with --backend tpu 2")
    p.add_argument("--backend", default="cpu", choices=("cpu", "tpu"),
                   help="cpu: this machine's compile speed; tpu: the TPU VM host's, timed "
                        "on its chip (predictions for that chip then apply it)")
    p.add_argument("--target", default=None, help="TPU chip (default: v5e, the one a model "
                                                  "ships for)")
    p.add_argument("--from-rows", nargs="+", default=None, metavar="ROWS",
                   help="TPU: chip timings measured elsewhere (tpu_device_run.py JSON lines "
                        "of the --export artifacts) instead of timing a chip here")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="TPU: write the calibration set as jax.export artifacts with the "
                        "manifest tpu_device_run.py reads, and calibrate nothing")

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

    p = add("retrain-worker", cmd_retrain_worker,
            "run the retrain jobs queued in the service store (COSTMODEL_DATABASE_URL), one "
            "at a time")
    p.add_argument("--model", action="append", default=[],
                   help="the model folder the service serves for its backend and target, as "
                        "`serve --model` names it: candidates must beat it; repeat per model")
    p.add_argument("--poll", type=seconds, default=1.0,
                   help="seconds between looks for a queued job when none is")
    p.add_argument("--once", action="store_true", help="exit once no job is queued")

    p = add("export", cmd_export, "compact dataset shards into one parquet file")
    p.add_argument("--data", nargs="+", required=True, help="dataset files or folders")
    p.add_argument("--out", required=True, help="parquet file to write")
    p = add("convert-model", cmd_convert_model,
            "rewrite a model artifact saved as a pickle (estimator.joblib) as plain data")
    p.add_argument("path", help="the artifact's folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        code = _run(build_parser().parse_args(argv))
        sys.stdout.flush()  # a closed pipe fails here, not at the interpreter's exit
        return code
    except BrokenPipeError:
        # the reader left (`costmodel predict ... --json | head -1`): nothing more to say,
        # and the interpreter's own flush at exit must not fail on the closed pipe either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command a closed pipe stopped


def _run(args) -> int:
    from costmodel._argspec import ArgSpecError
    from costmodel._extras import missing_extra
    from costmodel.features import StableHLOParseError, UnknownTargetError
    from costmodel.models import ArtifactError

    try:
        return args.func(args)
    except UserCodeError as exc:
        if args.debug:
            raise exc.__cause__ from None
        print(f"costmodel {args.command}: {exc}", file=sys.stderr)
        return 2
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

