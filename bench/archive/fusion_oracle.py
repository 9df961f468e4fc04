"""How much better would the CPU model do on programs nobody here wrote if the fusion
emulator made exactly XLA's fusions? An upper bound for work on the emulator.

    python bench/archive/fusion_sizes_vs_xla.py dump --dump /tmp/fusion-sizes --outside
    python bench/archive/fusion_oracle.py --dump /tmp/fusion-sizes [--json bench/results/fusion_oracle.json]
    python bench/archive/fusion_oracle.py --ratios bench/results/fusion_oracle.json [--json ...]

For each outside-libraries program in the dump, the fusion features of its stored model
inputs are scaled by XLA's over the emulator's (both counted the same way from the dumped
modules, `fusion_sizes_vs_xla`): fusions (`fusion_groups`), fused ops (`fusion_mean_size`
with them), the largest fusion, the summed squared fusion costs (`fusion_cost_squares`)
and the distinct kernels (`fusion_distinct`, `fusion_distinct_cost`). The shipped model,
not retrained, scores every stored CPU bench result of those programs both ways, with all
five replaced and with each alone. No compile is timed.

It is a bound in one direction only: the model learned from the emulator's counts of the
corpus, which differ from XLA's too (the corpus's total fused ops are 0.94 times XLA's
in median), so replacing only the test programs' counts shifts their predictions.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import numpy as np
from fusion_sizes_vs_xla import emulated_fusions, xla_fusions

from costmodel.models import load_default
from costmodel.training.evaluation.outside import current_results, scaled_predictions

ROOT = Path(__file__).resolve().parents[2]
# What each replaced count scales in the model inputs.
SCALED_INPUTS = {"fusions": ("fusion_groups",), "fused_ops": ("fusion_mean_size",),
                 "largest": ("fusion_max_size",), "squares": ("fusion_cost_squares",),
                 "distinct": ("fusion_distinct", "fusion_distinct_cost")}


def xla_over_emulated(folder: Path) -> dict[str, dict[str, float]]:
    """Per outside program (`family params`, as bench results name it): each count of
    XLA's fusions over the emulator's (plus one on both sides)."""
    ratios = {}
    for meta in sorted(folder.glob("*.json")):
        program = json.loads(meta.read_text())
        if not program["family"].startswith("outside_"):
            continue
        xla = xla_fusions(meta.with_suffix(".hlo").read_text())
        ours = emulated_fusions(meta.with_suffix(".mlir").read_text())
        xla_counts = _counts([(ops, cost, kernel) for ops, cost, kernel in xla])
        our_counts = _counts([(ops, cost, kernel) for ops, cost, _, kernel, _ in ours])
        ratio = {name: (xla_counts[name] + 1) / (our_counts[name] + 1) for name in xla_counts}
        # the model reads the mean size: the total's ratio over the count's
        ratio["fused_ops"] /= ratio["fusions"]
        ratios[f"{program['family']} {program['params']}"] = ratio
    return ratios


def _counts(fusions: list[tuple]) -> dict[str, float]:
    return {"fusions": len(fusions), "fused_ops": sum(ops for ops, _, _ in fusions),
            "largest": max((ops for ops, _, _ in fusions), default=0),
            "squares": sum(cost * cost for _, cost, _ in fusions),
            "distinct": len({kernel for _, _, kernel in fusions})}


def with_xla_counts(data: dict, ratios: dict, replaced: tuple[str, ...]) -> dict:
    """A copy of one bench result whose programs' fusion inputs are scaled to XLA's."""
    changed = copy.deepcopy(data)
    for row in changed["results"]:
        for count in replaced:
            for name in SCALED_INPUTS[count]:
                row["model_inputs"][name] *= ratios[row["program"]][count]
    return changed


def log_errors(model, results: dict, ratios: dict, replaced: tuple[str, ...]) -> dict:
    """log(measured / predicted) per bench, for the programs the dump holds."""
    out = {}
    for name, data in results.items():
        data = {**data, "results": [row for row in data["results"] if row["program"] in ratios]}
        if data["results"]:
            point, _, _, measured = scaled_predictions(
                model, with_xla_counts(data, ratios, replaced) if replaced else data)
            out[name] = np.log(measured / point)
    return out


def summary(errors: dict) -> dict:
    every = np.concatenate(list(errors.values()))
    return {"programs": len(every), "mean_abs_log": float(np.abs(every).mean()),
            "median_fold": float(np.exp(np.median(np.abs(every)))),
            "mean_log": float(every.mean()),
            "per_bench": {name: float(np.abs(logs).mean()) for name, logs in errors.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--dump", type=Path,
                        help="folder of `fusion_sizes_vs_xla.py dump --outside`")
    source.add_argument("--ratios", type=Path,
                        help="a stored result of this bench: score the shipped model on its "
                             "ratios again, compiling nothing")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.ratios:
        ratios = json.loads(args.ratios.read_text())["xla_over_emulated"]
    else:
        ratios = xla_over_emulated(args.dump)
    if not ratios:
        raise SystemExit(f"{args.dump or args.ratios}: no outside program's ratios "
                         "(dump with --outside)")
    model = load_default("cpu")
    results = current_results(ROOT / "bench/results", "cpu")
    variants = {"emulated": (), "all XLA": tuple(SCALED_INPUTS),
                **{f"XLA {count}": (count,) for count in SCALED_INPUTS}}
    scores = {name: summary(log_errors(model, results, ratios, replaced))
              for name, replaced in variants.items()}
    for name, score in scores.items():
        benches = ", ".join(f"{bench} {value:.3f}" for bench, value in score["per_bench"].items())
        print(f"{name:14s} {score['programs']} programs: mean |log| {score['mean_abs_log']:.3f}, "
              f"median fold {score['median_fold']:.3f}, mean log {score['mean_log']:+.3f} "
              f"({benches})")
    if args.json:
        args.json.write_text(json.dumps({"model": model.version, "dumped_programs": len(ratios),
                                         "scores": scores, "xla_over_emulated": ratios},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
