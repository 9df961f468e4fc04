"""Families the TPU compiler is slow on at a fixed op count, on the chip: `thin_conv`
programs (one-channel stencils, depthwise blurs) and `spectral` ones (FFTs) at sizes the
family's grid (the TPU training rows) does not hold, compiled on a TPU v5e and predicted
by the shipped TPU model.

`export` lowers a check set's programs for platform `tpu` (with four corpus anchors
from an earlier artifact folder) and writes a manifest for `tpu_device_run.py`; `score`
compares the chip's median seconds with the shipped model's chip prediction of each.

    python bench/evaluations/tpu_thin_conv.py export --out .tpu-artifacts-thin-check \\
        [--anchors-from .tpu-artifacts-thin] [--check spectral|fft_lengths]
    # on the device machine: python bench/evaluations/tpu_device_run.py \\
    #     .tpu-artifacts-thin-check --out $OUT/check.jsonl --stages --passes 2
    python bench/evaluations/tpu_thin_conv.py score bench/data/tpu_thin_conv/check1.jsonl \\
        [--json bench/results/tpu_thin_conv.json] [--model DIR] [--check spectral]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# off the thin_conv grid (fields of 64 and 256, windows 3 to 7): other sizes, windows of
# 4 and 9, a 32x32 field
THIN_CONV = (
    dict(kind="fd", n=128, window=4, convs=2), dict(kind="fd", n=512, window=3, convs=4),
    dict(kind="fd", n=512, window=7, convs=1), dict(kind="fd", n=128, window=9, convs=2),
    dict(kind="laplacian", n=128, window=3, convs=1),
    dict(kind="laplacian", n=128, window=4, convs=2),
    dict(kind="laplacian", n=512, window=3, convs=1),
    dict(kind="laplacian", n=32, window=5, convs=1),
    dict(kind="depthwise", n=128, window=4, convs=2),
    dict(kind="depthwise", n=512, window=3, convs=1),
    dict(kind="depthwise", n=512, window=7, convs=2),
    dict(kind="depthwise", n=128, window=9, convs=1),
)
# off the spectral grid (powers of two, one or three transforms): lengths between them,
# lengths with odd factors, a 1024x1024 field beyond them, two transforms
SPECTRAL = (
    dict(kind="conv1d", n=2048, transforms=2), dict(kind="conv1d", n=32768, transforms=1),
    dict(kind="conv1d", n=3000, transforms=1), dict(kind="conv1d", n=16384, transforms=2),
    dict(kind="spectral2d", n=96, transforms=2), dict(kind="spectral2d", n=384, transforms=1),
    dict(kind="spectral2d", n=200, transforms=1), dict(kind="spectral2d", n=1024, transforms=1),
    dict(kind="poisson3d", n=24, transforms=2), dict(kind="poisson3d", n=48, transforms=1),
    dict(kind="poisson3d", n=40, transforms=1), dict(kind="poisson3d", n=56, transforms=2),
)
# one FFT convolution of 8 signals, transforms of 2n points: powers of two beside lengths
# of small factors (4128, 4608, 6000, 22050, 22528, 24576) and of a large prime (22562 =
# 2 x 29 x 389 and 20014 = 2 x 10007, as `fftconvolve` of odd sizes gives)
FFT_LENGTHS = tuple(dict(kind="conv1d", n=n, transforms=1) for n in (
    2048, 2064, 2304, 3000, 4096, 10007, 11025, 11264, 11281, 12288, 16384))
# a check set's name: (its corpus family, its programs)
CHECKS = {"thin_conv": ("thin_conv", THIN_CONV), "spectral": ("spectral", SPECTRAL),
          "fft_lengths": ("spectral", FFT_LENGTHS)}


def key(family: str, params: dict) -> str:
    return f"{family}|{json.dumps(params, sort_keys=True)}|tpu|v5e"


def export(out: Path, anchors_from: Path | None, anchors: int = 4,
           check: str = "thin_conv") -> None:
    from costmodel.measure.tpu_export import serialize_for_tpu
    from costmodel.training import corpus

    out.mkdir(parents=True, exist_ok=True)
    entries = []
    if anchors_from is not None:
        found = json.loads((anchors_from / "manifest.json").read_text())["programs"]
        for entry in [e for e in found if e.get("anchor")][:anchors]:
            shutil.copy(anchors_from / entry["file"], out / entry["file"])
            entries.append(entry)
    family, programs = CHECKS[check]
    for i, params in enumerate(programs):
        name = f"c{i:03d}"
        (out / f"{name}.bin").write_bytes(serialize_for_tpu(*corpus.build(family, params)))
        entries.append({"name": name, "file": f"{name}.bin", "key": key(family, params),
                        "family": family, "library": "synthetic", "x64": False,
                        "here_s": 5.0, "params": params})
    (out / "manifest.json").write_text(json.dumps({"programs": entries}, indent=1))


def score(paths: list[Path], model: str | None = None, check: str = "thin_conv") -> dict:
    """The chip's median seconds of each program of the `check` set against `model`'s
    chip prediction (a model folder; the shipped TPU model by default)."""
    family, checked = CHECKS[check]
    import costmodel
    from costmodel.training import corpus

    seconds: dict[str, list[float]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row.get("status") == "ok" and str(row.get("key", "")).startswith(family + "|"):
                seconds.setdefault(row["key"], []).extend(row["device_s"])
    programs = []
    for params in checked:
        if key(family, params) not in seconds:
            continue
        fn, args = corpus.build(family, params)
        # the chip's seconds are of long processes: the prediction at that state
        prediction = costmodel.lower(fn, *args).predict(backend="tpu", target="v5e",
                                                        model=model, process_state="warm")
        measured = statistics.median(seconds[key(family, params)])
        programs.append({"params": params, "chip_s": measured,
                         "chip_all_s": seconds[key(family, params)],
                         "predicted_s": prediction.compile_seconds,
                         "interval_s": list(prediction.compile_seconds_interval)})
    logs = [math.log(p["chip_s"] / p["predicted_s"]) for p in programs]
    from costmodel.models import load, load_default

    return {"model": (load(model) if model else load_default("tpu", "v5e")).version,
            "programs": programs,
            "median_fold": math.exp(statistics.median(abs(x) for x in logs)),
            "measured_over_predicted": math.exp(statistics.fmean(logs)),
            "covered": statistics.fmean(p["interval_s"][0] <= p["chip_s"] <= p["interval_s"][1]
                                        for p in programs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--anchors-from", type=Path)
    p.add_argument("--check", "--family", dest="check", choices=sorted(CHECKS),
                   default="thin_conv")
    p = sub.add_parser("score")
    p.add_argument("--check", "--family", dest="check", choices=sorted(CHECKS),
                   default="thin_conv")
    p.add_argument("paths", type=Path, nargs="+")
    p.add_argument("--json", type=Path)
    p.add_argument("--model", help="a TPU model folder in place of the shipped one")
    args = parser.parse_args()
    if args.command == "export":
        export(args.out, args.anchors_from, check=args.check)
        return
    result = score(args.paths, args.model, check=args.check)
    for p in result["programs"]:
        print(f"{json.dumps(p['params']):62s} chip {p['chip_s']:6.2f} s  "
              f"predicted {p['predicted_s']:6.2f} s")
    print(f"median fold {result['median_fold']:.2f}, measured over predicted "
          f"{result['measured_over_predicted']:.2f}, covered {result['covered']:.0%}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
