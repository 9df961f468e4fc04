"""Predict, then compile and time, a set of programs against a shipped default model.

Shared by the benches that score the model on programs outside the corpus. Each program
is predicted (`costmodel.predict`, no calibration applied) and then compiled the way the
sweep compiles (`training.harness.compile_once`: CPU, or a GPU target deviceless where
no GPU is present): new function objects each time, exactly one backend compile each,
all programs and the reference program interleaved per round, median of the rounds.
Fold errors are reported as measured and with the prediction scaled by this run's
reference time over the model's, to the model's reference power (what `costmodel
calibrate` would apply). Each row keeps
the program's model inputs, so tests can score a retrained model on the same programs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Mapping

import jax
import numpy as np

import costmodel
from costmodel.features import SCHEMA_VERSION
from costmodel.measure.harness import CompileEvents, compile_once, placement
from costmodel.measure.reference import build_reference
from costmodel.models import load_default
from costmodel.training.corpus.registry import sds
from costmodel.training.evaluation.metrics import fold_errors
from costmodel.training.evaluation.outside import score as score_stored
from costmodel.training.evaluation.outside import speed_scale

Build = Callable[[], tuple[Callable, tuple]]


def fold(a: float, b: float) -> float:
    return float(fold_errors([a], [b])[0])


def f32(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape)


def i32(*shape) -> jax.ShapeDtypeStruct:
    return sds(shape, np.int32)


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="program names to run")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--target", default="", help="a GPU target (h100) instead of CPU")
    parser.add_argument("--refresh-inputs", action="store_true",
                        help="re-extract the model inputs stored in --json for this feature "
                             "schema, keeping its measurements (compiles nothing)")
    return parser.parse_args()


def run(programs: Mapping[str, Build], args: argparse.Namespace,
        extra: Mapping | None = None) -> None:
    """What a bench's command line asks for: score the programs, or refresh stored inputs."""
    if args.refresh_inputs:
        if not args.json:
            raise SystemExit("--refresh-inputs needs --json, the stored run to refresh")
        refresh_inputs(programs, args.json, args.target)
    else:
        score(programs, args.rounds, args.json, extra, target=args.target)


def refresh_inputs(programs: Mapping[str, Build], json_path: str, target: str = "") -> dict:
    """Re-extract each stored program's model inputs for this feature schema, keeping the
    measured seconds: a schema change needs new inputs, not new timings. The stored
    predictions stay those of the model that made them (`model`); the summary is
    recomputed when the shipped model reads this schema."""
    from costmodel.features import from_lowered

    with open(json_path) as stored:
        result = json.load(stored)
    backend = "gpu" if target else "cpu"
    if (result["backend"], result.get("target", "")) != (backend, target):
        raise SystemExit(f"{json_path} was measured for {result['backend']} "
                         f"{result.get('target', '')}, not {backend} {target}")
    place = placement(backend, target)
    for row in result["results"]:
        fn, fn_args = programs[row["program"]]()
        traced, lowered = place.lower(fn, fn_args)
        row["model_inputs"] = from_lowered(traced, lowered, backend=backend,
                                           target=target).model_inputs()
    result["schema_version"] = SCHEMA_VERSION
    try:
        result["summary"] = summarize(load_default(backend, target), result)
    except ValueError as exc:  # the shipped model is of another schema: retrain it first
        print(f"summary left as it was: {exc}")
    with open(json_path, "w") as out:
        json.dump(result, out, indent=1)
    print(f"{len(result['results'])} programs' inputs refreshed to schema {SCHEMA_VERSION} "
          f"in {json_path}")
    return result


def summarize(model, result: dict) -> dict:
    """The run's scores as model cards and tests compute them (`training.outside.score`)."""
    return {k: v for k, v in score_stored(model, result).items() if k != "folds"}


def predict_all(programs: Mapping[str, Build], model, place) -> tuple[dict, dict]:
    """`({name: (point, (lo, hi), model inputs)}, {name: why it was skipped})`, uncalibrated."""
    predictions, skipped = {}, {}
    for name, build in programs.items():
        fn, fn_args = build()
        try:
            p = costmodel.lower(fn, *place.args(fn_args)).predict(
                backend=place.backend, target=place.target or None, model=model)
        except Exception as exc:  # e.g. a host callback cannot lower for a deviceless GPU
            skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            print(f"{name}: skipped, it does not lower here ({skipped[name]})")
            continue
        scale = p.calibration_scale  # undo a calibration file, if this machine has one
        predictions[name] = (p.compile_seconds / scale,
                             tuple(v / scale for v in p.compile_seconds_interval),
                             p.features.model_inputs())
    return predictions, skipped


def time_all(programs: Mapping[str, Build], place, rounds: int) -> dict[str, list[float]]:
    """Compile seconds per program over `rounds` interleaved rounds, the reference program
    (key "(reference)") timed in each; one untimed warm-up compile each first."""
    from tqdm import tqdm

    events = CompileEvents()
    timed = {"(reference)": build_reference, **programs}
    times = {name: [] for name in timed}
    with tqdm(total=len(timed) * (rounds + 1), desc="compiles", unit="compile") as bar:
        for round_ in range(-1, rounds):  # round -1: first-compile costs off the clock
            for name, build in timed.items():
                seconds = compile_once(build, place, events)[1]
                if round_ >= 0:
                    times[name].append(seconds)
                bar.update()
    return times


def score(programs: Mapping[str, Build], rounds: int, json_path: str | None = None,
          extra: Mapping | None = None, target: str = "") -> dict:
    """Predict and time `programs` (name -> build) for CPU, or for the GPU `target`, and
    print one line each; the summary and rows go to `json_path` too, with `extra` (e.g.
    library versions) alongside."""
    jax.config.update("jax_enable_compilation_cache", False)
    backend = "gpu" if target else "cpu"
    model = load_default(backend, target)
    place = placement(backend, target)
    predictions, skipped = predict_all(programs, model, place)
    times = time_all({name: programs[name] for name in predictions}, place, rounds)
    model_reference = model.manifest["reference_seconds"]
    reference = statistics.median(times.pop("(reference)"))
    speed = speed_scale(model, reference)
    print(f"reference program: {reference * 1e3:.0f} ms here, {model_reference * 1e3:.0f} ms "
          f"in the model's sweep (scale {speed:.2f}); model {model.version}")
    rows = []
    width = max(len(name) for name in predictions)
    for name, (point, (lo, hi), inputs) in predictions.items():
        measured = statistics.median(times[name])
        rows.append({"program": name, "predicted_s": point, "interval_s": [lo, hi],
                     "measured_s": measured, "all_s": times[name],
                     "fold": fold(point, measured), "fold_scaled": fold(point * speed, measured),
                     "inside_interval_scaled": lo * speed <= measured <= hi * speed,
                     "model_inputs": inputs})
        print(f"{name:{width}} predicted {point:7.3f} s  measured {measured:7.3f} s  "
              f"fold {rows[-1]['fold']:5.2f}  scaled {rows[-1]['fold_scaled']:5.2f}"
              f"{'' if rows[-1]['inside_interval_scaled'] else '  outside interval'}")
    result = {"rounds": rounds, "model": model.version, "schema_version": SCHEMA_VERSION,
              "backend": backend, "target": target, "deviceless": place.deviceless,
              "speed_scale": speed, "reference_s": reference, **(extra or {}),
              "summary": None, "results": rows, "skipped": skipped}
    result["summary"] = summarize(model, result)
    print(", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in result["summary"].items()))
    if json_path:
        with open(json_path, "w") as out:
            json.dump(result, out, indent=1)
    return result


def selected(programs: Mapping[str, Build], only: list[str] | None) -> dict[str, Build]:
    """`programs` restricted to the names in `only` (all when None); unknown names fail."""
    if not only:
        return dict(programs)
    unknown = sorted(set(only) - set(programs))
    if unknown:
        raise SystemExit(f"unknown programs: {', '.join(unknown)}; known: {', '.join(programs)}")
    return {name: programs[name] for name in only}
