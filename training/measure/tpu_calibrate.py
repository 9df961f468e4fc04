"""Calibrating TPU predictions to the TPU VM a user compiles on.

The shipped TPU model answers for the compile on a v5e TPU VM's own host (a base model of
deviceless compiles times the device correction fitted on programs compiled on one v5e
chip). Another v5e VM's host compiles faster or slower; `costmodel calibrate --backend
tpu` measures by how much, as `calibrate.py` does for a CPU: the calibration set below
is compiled on the chip, each program in a fresh process with the compilation cache off
and the reference program timed beside it, after the set's other programs have compiled
once in that process (`WARM_UP_SUFFIX`), and the factor applied is the median over the
set of each program's compile there over its compile on the v5e host the correction was
fitted on (`calibration_set`): 1.0 on that host by construction, where the model ratio
(each compile over the model's chip prediction, correction included) reads 0.91 with the
shipped correction and read 0.93, 0.91, 1.00 and 0.89 with the four before: it moves with every refit,
the set's stored seconds do not. The model's predictions come from the set's
TPU lowering made here (with `JAX_PLATFORMS=cpu`, in a process of its own, so the chip is
left to the measuring processes).

Beside it the record keeps the model ratio, and the reference's
(`reference_only`, not trusted alone: it was bimodal there); how far the first two
disagree widens the intervals, as for a CPU. Timings measured elsewhere, by
`bench/evaluations/tpu_device_run.py` on artifacts that `export_set` writes, calibrate
the same way (`figures_from_rows`). Without a chip nothing is calibrated: a deviceless
compile here times this machine, not the TPU VM whose compile the prediction is for.

The set: programs of jax alone (every install has them) compiled on the v5e chip between
0.3 and 5 s, of different kinds, each repeated there within 1.3x, and among those the
model predicted within 0.85-1.05x on that host, so their ratio reads the host's speed
rather than the model's error on them.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

from costmodel.measure.rows import program_key

from .calibrate import (
    AGREEING_SPREAD,
    CALIBRATION_SET,
    MODEL_RATIO,
    REFERENCE_ONLY,
    candidate_spread,
    log_uncertainty,
    model_ratio_scale,
)

# The chip the shipped TPU model's device correction was fitted on.
CHIP = "v5e"
# What JAX's `device_kind` says, by the chip names targets use.
DEVICE_KINDS = {"TPU v5 lite": "v5e", "TPU v5e": "v5e", "TPU v5p": "v5p", "TPU v5": "v5p",
                "TPU v6 lite": "v6e", "TPU v6e": "v6e", "TPU v4": "v4", "TPU v4 lite": "v4i",
                "TPU v3": "v3", "TPU v2": "v2"}
PROGRAMS = {
    "vit_train": ("vit", {"depth": 3, "grad": True, "patch": 4, "width": 192}),
    "lstm_unrolled": ("lstm", {"grad": False, "hidden": 128, "steps": 128,
                               "style": "unrolled"}),
    "resnet_train": ("resnet", {"blocks": 3, "channels": 8, "grad": True, "image": 16}),
    "sparse_power": ("bcoo_power", {"grad": False, "matvecs": 32, "n": 256,
                                    "nnz_per_row": 16}),
    "adam_update": ("adam", {"clip": True, "layers": 3, "width": 512}),
    "eigh_grad": ("eigh", {"grad": True, "n": 8, "nbatch": 128, "outputs": "vectors"}),
    "wavenet": ("wavenet", {"channels": 64, "grad": False, "layers": 4, "layout": "NCW"}),
    "cond_grad": ("cond_switch", {"branches": 2, "grad": True, "size": 16, "width": 16}),
}
# Each program's median chip seconds on the v5e host the correction was fitted on, and
# the reference's median there (bench/data/tpu_device; a test recomputes both).
CHIP_HOST_SECONDS = {"vit_train": 2.277, "lstm_unrolled": 3.139, "resnet_train": 1.535,
                     "sparse_power": 0.801, "adam_update": 0.442, "eigh_grad": 0.399,
                     "wavenet": 0.419, "cond_grad": 0.376}
CHIP_REFERENCE_SECONDS = 0.080
# The scale those stored chip timings give (`figures_from_rows` on bench/data/tpu_device):
# what a host as fast as that one should read.
REFERENCE_HOST_SCALE = 0.92
MIN_PROGRAMS = 5  # of the set measured, or no scale
TIMEOUT_SECONDS = 300.0
ROUNDS = 2  # a round is 8 fresh processes on the chip
# On the v5e host a process's first compiles are slower than later ones: in one process
# the set took a median 1.31x its stored seconds first and 0.97x after 18 other compiles
# (bench/FINDINGS.md, "A fresh process on the chip's host"). The stored seconds are of
# processes that had compiled many programs, so each timed compile follows the set's
# other programs compiled once, untimed.
WARM_UP_SUFFIX = "|warmup"  # the key of an exported warm-up entry: no figure reads it


class NoChip(RuntimeError):
    """JAX sees no TPU chip here, so the TPU VM's host cannot be timed."""


class WrongChip(ValueError):
    """The chip measured is not the one the model predicts for."""


def chip_of(device_kind: str) -> str | None:
    """`v5e` for JAX's "TPU v5 lite"; None for a kind not known here."""
    return DEVICE_KINDS.get(str(device_kind).strip())


def keys(chip: str = CHIP) -> dict[str, str]:
    """The set's row keys (as sweeps and `tpu_device_run.py` rows name programs), by name."""
    return {name: program_key(family, params, "tpu", chip)
            for name, (family, params) in PROGRAMS.items()}


def check_chip(device_kind: str | None, chip: str, whose: str = "these timings are of") -> None:
    """Raise `WrongChip` unless `device_kind` is the chip `chip` the model predicts for."""
    seen = chip_of(device_kind or "")
    if seen == chip:
        return
    what = (f"a {device_kind} ({seen})" if seen else
            f"an unknown chip kind {device_kind!r}" if device_kind else
            "a chip they do not name (no device_kind in an environment line)")
    raise WrongChip(
        f"{whose} {what}, but the TPU model predicts {chip} compiles: a factor from "
        f"another chip would scale {chip} predictions wrongly, so nothing was saved. "
        f"Calibrate on a {chip} TPU VM" + (
            f"; predicting for {seen} needs a {seen} model, and none ships" if seen else ""))


def read_rows(paths: Sequence[str | os.PathLike]) -> tuple[dict, list[dict]]:
    """(environment, rows) of `tpu_device_run.py` JSON-lines files, a later file's facts
    over an earlier's."""
    env, rows = {}, []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            record = json.loads(line)
            if "environment" in record:
                env.update({k: v for k, v in record["environment"].items() if v})
            else:
                rows.append(record)
    return env, rows


def figures_from_rows(paths: Sequence[str | os.PathLike], chip: str = CHIP
                      ) -> tuple[dict, dict[str, dict]]:
    """(environment, figures by program) of chip timings in `tpu_device_run.py` rows: each
    set program's median chip seconds over every ok row of it, the reference's beside."""
    env, rows = read_rows(paths)
    by_key = {key: name for name, key in keys(chip).items()}
    seen: dict[str, dict[str, list]] = {}
    for row in rows:
        name = by_key.get(row.get("key"))
        if name is None or row.get("status") != "ok" or not row.get("device_s"):
            continue
        got = seen.setdefault(name, {"device": [], "ref": []})
        got["device"] += [float(s) for s in row["device_s"]]
        got["ref"] += [float(s) for s in row.get("ref_device_s") or ()]
    return env, {name: {"compile_seconds": statistics.median(got["device"]),
                        "ref_seconds": statistics.median(got["ref"]) if got["ref"] else None,
                        "compiles": len(got["device"])} for name, got in seen.items()}


def probe_chip() -> dict | None:
    """{"device_kind", "devices"} of the TPU JAX sees here, in a process of its own (a TPU
    opens to one process at a time, and the measuring ones need it); None without one."""
    code = ("import json, jax\ntry:\n    d = jax.devices('tpu')\nexcept RuntimeError:\n"
            "    d = []\nprint(json.dumps({'device_kind': d[0].device_kind, 'devices': len(d)}"
            " if d else None))")
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=180, env=env)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return None


def no_chip_message(chip: str) -> str:
    return (f"JAX sees no TPU here, so there is no {chip} TPU VM host to time. TPU "
            "predictions are for the compile on the chip's own host; a deviceless compile "
            "here would time this machine instead, so it is not used. Run `costmodel "
            "calibrate --backend tpu` on the TPU VM, or measure there with "
            "bench/evaluations/tpu_device_run.py on the artifacts of `costmodel calibrate "
            "--backend tpu --export DIR` and run `costmodel calibrate --backend tpu "
            "--from-rows ROWS.jsonl` here")


def measure_on_chip(rounds: int = ROUNDS, chip: str = CHIP,
                    progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """The set compiled on this machine's TPU, each program in a fresh process per round
    (as sweeps measure, but on the chip) after the set's other programs compiled there
    once: median seconds and reference seconds of its rounds."""
    from .runner import run_child

    seen: dict[str, dict[str, list]] = {}
    for _ in range(rounds):
        for name, (family, params) in PROGRAMS.items():
            others = [{"family": f, "params": p} for n, (f, p) in PROGRAMS.items() if n != name]
            spec = {"family": family, "params": params, "backend": "tpu", "target": chip,
                    "on_device": True, "max_repeats": 2, "trace_phases": False,
                    "warmup": others}
            result = run_child(spec, timeout=TIMEOUT_SECONDS, use_zygote=False)
            if result.get("status") != "ok" or result.get("deviceless", True):
                raise RuntimeError(
                    f"calibration program {name!r} did not compile on the chip: "
                    f"{result.get('status')}: {result.get('message') or 'compiled deviceless'}")
            got = seen.setdefault(name, {"device": [], "ref": []})
            got["device"].append(float(result["compile_seconds"]))
            got["ref"].append(float(result["ref_seconds"]))
            if progress:
                progress(name)
    return {name: {"compile_seconds": statistics.median(got["device"]),
                   "ref_seconds": statistics.median(got["ref"]), "compiles": len(got["device"])}
            for name, got in seen.items()}


def _inputs_here(chip: str) -> dict[str, dict[str, float]]:
    from costmodel._lowering import features_of
    from costmodel.training import corpus

    out = {}
    for name, (family, params) in PROGRAMS.items():
        fn, args = corpus.get_family(family).build(**params)
        out[name] = features_of(fn, args, "tpu", chip, jaxpr=False).model_inputs()
    return out


def model_inputs(chip: str = CHIP) -> dict[str, dict[str, float]]:
    """The model inputs of each set program's TPU lowering, as a prediction reads them,
    lowered in a process with `JAX_PLATFORMS=cpu` (this one may be about to time the chip)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-m", __name__, "inputs", chip], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"lowering the TPU calibration set failed: {done.stderr[-800:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def record_for(here: Mapping[str, dict], predicted: Mapping[str, float], env: Mapping,
               chip: str, model_version: str, source: str) -> dict:
    """The TPU calibration record of the set's chip figures `here` and the model's chip
    predictions of them: the scale applied (the set's ratio to the chip host's seconds),
    the candidates, their spread and the log uncertainty it gives intervals, and each
    program's figures."""
    check_chip(env.get("device_kind"), chip)
    measured = {p: f for p, f in here.items() if p in PROGRAMS and predicted.get(p)}
    if len(measured) < MIN_PROGRAMS:
        raise ValueError(f"only {len(measured)} of the {len(PROGRAMS)} TPU calibration "
                         f"programs were timed on the chip ({', '.join(sorted(measured)) or 'none'}"
                         f"); need {MIN_PROGRAMS}")
    refs = [f["ref_seconds"] for f in measured.values() if f.get("ref_seconds")]
    ways = {MODEL_RATIO: model_ratio_scale(measured, predicted),
            CALIBRATION_SET: statistics.median(
                measured[p]["compile_seconds"] / CHIP_HOST_SECONDS[p] for p in measured),
            REFERENCE_ONLY: statistics.median(refs) / CHIP_REFERENCE_SECONDS if refs else None}
    spread = candidate_spread(ways)
    ratios = [measured[p]["compile_seconds"] / predicted[p] for p in measured]
    return {
        "scale": float(ways[CALIBRATION_SET]), "scale_from": CALIBRATION_SET, "candidates": ways,
        "spread": spread, "log_uncertainty": log_uncertainty(spread),
        "program_ratios": {"min": min(ratios), "max": max(ratios), "n": len(ratios)},
        "reference_seconds": {"here": statistics.median(refs) if refs else None,
                              "model": CHIP_REFERENCE_SECONDS},
        "backend": "tpu", "chip": chip, "device_kind": env.get("device_kind"),
        "libtpu_version": env.get("libtpu_version"), "cpu_model": env.get("cpu_model"),
        "cpu_count": env.get("host_cpu_count"), "measured_from": source,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "model_version": model_version,
        "programs": {p: {"here": measured[p], "chip_host": CHIP_HOST_SECONDS[p],
                         "predicted": predicted[p]} for p in measured}}


def calibrate_tpu(*, target: str | None = None, rounds: int = ROUNDS,
                  from_rows: Sequence[str] | None = None, path: Path | None = None,
                  model=None, inputs: Mapping[str, dict] | None = None,
                  progress: Callable[[str], None] | None = None) -> dict:
    """Time the TPU calibration set on this machine's chip (or read its timings from
    `from_rows`), and save the TPU scale for the chip of `target` (default v5e).

    Raises `NoChip` without a TPU here (and no rows), `WrongChip` when the timings are of
    another chip than the model's, `costmodel.models.NoModelError` for a chip no model
    ships for. `model` (an Artifact) and `inputs` (model inputs by program) default to the
    shipped TPU model and the set's lowering here."""
    from costmodel.models import load_default
    from costmodel.models.calibration import calibration_path, save_record

    chip = (target or CHIP).split(":")[0]
    model = model if model is not None else load_default("tpu", chip)
    if model.device_correction is None:
        raise ValueError(f"model {model.version} answers for deviceless compiles, not a "
                         "TPU VM's host: a TPU calibration scales only a model with a "
                         "device correction")
    if from_rows:
        env, here = figures_from_rows(from_rows, chip)
        files = [str(p) for p in from_rows]
        source = ", ".join(files) if len(files) <= 2 else f"{len(files)} files: {files[0]}, ..."
    else:
        if rounds < 1:
            raise ValueError(f"rounds must be at least 1, not {rounds}")
        env = probe_chip()
        if not env:
            raise NoChip(no_chip_message(chip))
        check_chip(env["device_kind"], chip, "JAX here sees")  # before minutes of compiling
        here = measure_on_chip(rounds, chip, progress)
        env = {**env, **_host()}
        source = f"this machine's chip, {rounds} rounds"
    inputs = inputs if inputs is not None else model_inputs(chip)
    names = [p for p in PROGRAMS if p in inputs]
    # the set's timed compiles follow its other programs' in their process, and the stored
    # seconds are of long processes: the model ratio reads them at the labels' state
    points = model.predict([inputs[p] for p in names],
                           process_state="warm")["compile_seconds"]["point"]
    predicted = {p: float(v) for p, v in zip(names, points) if math.isfinite(v) and v > 0}
    record = record_for(here, predicted, env, chip, model.version, source)
    path = Path(path) if path is not None else calibration_path()
    save_record(record, path, "tpu", chip)
    return {**record, "path": str(path)}


def _host() -> dict:
    from importlib import metadata

    from costmodel.features.environment import cpu_model, host_cpu_count

    try:
        libtpu = metadata.version("libtpu")
    except metadata.PackageNotFoundError:
        libtpu = ""
    return {"cpu_model": cpu_model(), "host_cpu_count": host_cpu_count(),
            "libtpu_version": libtpu}


def export_set(out: Path, chip: str = CHIP) -> list[dict]:
    """The set as `jax.export` artifacts with the manifest `tpu_device_run.py` reads, for
    timing on a chip host where costmodel is not installed: the set twice, first as
    warm-up entries (`WARM_UP_SUFFIX` on their keys, so no figure reads them), then the
    entries timed. Returns the timed entries."""
    import jax

    from costmodel.measure.tpu_export import MANIFEST, write_artifacts
    from costmodel.training import corpus

    try:
        import flatbuffers  # noqa: F401 - what jax.export serializes with
    except ImportError:
        raise RuntimeError("exporting needs flatbuffers: pip install flatbuffers "
                           '(or "costmodel[tpu]")') from None
    jax.config.update("jax_platforms", "cpu")  # lowering only; a chip here stays free
    programs = [{"name": name, "key": key, "family": PROGRAMS[name][0], "library": "jax",
                 "x64": corpus.get_family(PROGRAMS[name][0]).x64,
                 "here_s": CHIP_HOST_SECONDS[name]} for name, key in keys(chip).items()]
    entries = write_artifacts(Path(out), programs, lambda p: corpus.get_family(
        p["family"]).build(**PROGRAMS[p["name"]][1]))
    warm = [{**e, "name": f"warm_{e['name']}", "key": e["key"] + WARM_UP_SUFFIX}
            for e in entries]
    (Path(out) / MANIFEST).write_text(json.dumps({"programs": warm + entries}, indent=1))
    return entries


def confidence(record: Mapping) -> str:
    """One line saying how sure a TPU calibration is."""
    ways, ratios = record["candidates"], record["program_ratios"]
    widened = record["log_uncertainty"]
    verdict = ("they agree, intervals as fitted" if not widened else
               f"they disagree, so each bound of a 90% interval moves out by up to "
               f"{math.exp(widened):.2f}x")
    return (f"how sure: the set's ratio to the {record['chip']} host the correction was "
            f"fitted on {ways[CALIBRATION_SET]:.2f} and the model ratio {ways[MODEL_RATIO]:.2f} "
            f"are {record['spread']:.2f}x apart (agreeing up to {AGREEING_SPREAD}); {verdict}; "
            f"the {ratios['n']} programs' own ratios ran {ratios['min']:.2f}-{ratios['max']:.2f}; "
            f"on that host the model ratio reads {REFERENCE_HOST_SCALE:.2f}")


if __name__ == "__main__" and sys.argv[1:2] == ["inputs"]:
    print(json.dumps(_inputs_here(sys.argv[2] if len(sys.argv) > 2 else CHIP)))
