"""What is left of the CPU model's error on programs of libraries it never saw, and what
could remove it? Recomputed from stored runs; nothing is compiled.

Every stored CPU bench run (`bench/results/*.json` with model inputs) is scored as
`costmodel calibrate` would scale it (`outside.score`), and its log errors (measured over
predicted) are taken apart five ways:

- `library_centered`: the median fold as it is, and with each library's level in each run,
  as its other programs there set it, removed: how much of the error is one level per
  library;
- `tree_shrink`: the trees' correction of the baseline scaled by 0, 0.5, 1 and 1.5 (the
  calibration's model ratio recomputed for each): what the trees carry out of the corpus;
- `pass_noise`: the same programs measured in separate passes on one machine, each pass
  brought to the others by its best single factor: the fold one measurement is from
  another, which no prediction beats;
- `xla_count_oracle`: the model refitted with XLA's own optimized instruction count (which
  exists only after compiling) in place of the emulated fusions' ops (`fused_ops`), on the
  corpus rows and on the bench programs whose runs kept it (`bench/data/<run>/
  measured.parquet`); each run's mean log error removed for both fits, so it compares
  shape, not calibration: what a perfect emulation of XLA's simplification could give;
- `correlations`: Spearman of the log error with the model inputs most related to it.

    python bench/evaluations/outside_ceiling.py [--no-refit] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from costmodel.features.schema import with_added
from costmodel.models import load_default
from costmodel.training.evaluation.interval_widening import bench_library
from costmodel.training.evaluation.outside import current_results, scaled_predictions, score
from costmodel.training.fitting.recipe import FFT_INPUTS

ROOT = Path(__file__).resolve().parents[2]  # the repository
RESULTS = ROOT / "bench" / "results"
DATA = ROOT / "bench" / "data"
ROWS = ROOT / "training" / "data" / "cpu" / "rows.parquet"
# passes of one suite's programs on one machine (run names in bench/results)
PASSES = ("outside_libraries", "outside_libraries_pass2", "outside_libraries_pass3")
SHRINKS = (0.0, 0.5, 1.0, 1.5)
CORRELATED = ("hlo_ops_inlined", "tensor_max_rank", "distinct_shapes", "hlo_functions",
              "hlo_max_call_depth", "while_count", "while_max_depth", "fusion_mean_size",
              "fanout_max", "dot_flops", "input_bytes")


def summary(log_errors) -> dict:
    """Median fold, 90th percentile fold and mean |log error| of log errors."""
    size = np.abs(np.asarray(log_errors, float))
    return {"n": int(len(size)), "median_fold": float(np.exp(np.median(size))),
            "p90_fold": float(np.exp(np.quantile(size, 0.9))),
            "mean_abs_log": float(size.mean())}


def centered(log_errors, groups) -> np.ndarray:
    """Log errors with each group's mean removed.

    Example:
        >>> centered([0.1, 0.3, -0.2], ["a", "a", "b"]).round(2)
        array([-0.1,  0.1,  0. ])
    """
    errors = pd.Series(np.asarray(log_errors, float))
    return (errors - errors.groupby(np.asarray(groups)).transform("mean")).to_numpy()


def centered_by_others(log_errors, groups) -> np.ndarray:
    """Each log error less the mean of the other errors of its group (NaN in a group of
    one): what a level learned from a library's other programs would leave.

    Example:
        >>> centered_by_others([0.1, 0.3, -0.2], ["a", "a", "b"]).round(2)
        array([-0.2,  0.2,  nan])
    """
    errors = pd.Series(np.asarray(log_errors, float))
    by = errors.groupby(np.asarray(groups))
    total, count = by.transform("sum"), by.transform("size")
    others = (total - errors) / (count - 1).where(count > 1)
    return (errors - others).to_numpy()


def log_errors(artifact, runs: dict[str, dict]) -> pd.DataFrame:
    """One row per stored program: its run, library and log error (measured over
    predicted as `costmodel calibrate` scales the prediction)."""
    parts = []
    for name, data in runs.items():
        point, _, _, measured = scaled_predictions(artifact, data)
        parts.append(pd.DataFrame({"run": name, "library": [bench_library(r) for r in data["results"]],
                                   "error": np.log(measured / point)}))
    return pd.concat(parts, ignore_index=True)


def library_centered(errors: pd.DataFrame) -> dict:
    """The errors as they are and with each (run, library)'s level removed: as that
    library's other programs in the run set it, over the programs of libraries with two
    or more (`as_is_same_programs` is the same programs as they are)."""
    groups = errors["run"] + "/" + errors["library"]
    level = errors.groupby(groups)["error"].mean()
    left = centered_by_others(errors["error"], groups)
    several = ~np.isnan(left)
    return {"as_is": summary(errors["error"]),
            "as_is_same_programs": summary(errors["error"][several]),
            "library_level_removed": summary(left[several]),
            "libraries": int(level.size), "library_level_sd": float(level.std())}


class ScaledForest:
    """A forest whose output is multiplied by `scale`."""

    def __init__(self, forest, scale: float) -> None:
        self.forest, self.scale = forest, scale

    def predict(self, values):
        return self.scale * self.forest.predict(values)


def shrunk(artifact, scale: float):
    """`artifact` with the compile-time trees' correction scaled by `scale`."""
    predictor = artifact.predictor
    fitted = predictor.targets["compile_seconds"]
    forest = None if scale == 0 else ScaledForest(fitted.forest, scale)
    targets = {**predictor.targets, "compile_seconds": replace(fitted, forest=forest)}
    return replace(artifact, predictor=replace(predictor, targets=targets))


def tree_shrink(artifact, runs: dict[str, dict]) -> dict:
    """Per scale of the trees' correction: the pooled summary and each run's median fold."""
    out = {}
    for scale in SHRINKS:
        model = shrunk(artifact, scale)
        folds = {name: score(model, data)["folds"] for name, data in runs.items()}
        out[str(scale)] = {"pooled": summary(np.log(np.concatenate(list(folds.values())))),
                           "by_run": {n: float(np.median(f)) for n, f in folds.items()}}
    return out


def pass_noise(runs: dict[str, dict]) -> dict:
    """For each pair of passes of the same programs: the median and p90 fold between
    them after the single factor that best brings one to the other."""
    seconds = {name: {r["program"]: r["measured_s"] for r in runs[name]["results"]}
               for name in PASSES if name in runs}
    names = sorted(seconds)
    out = {}
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            common = sorted(set(seconds[first]) & set(seconds[second]))
            ratio = np.log([seconds[first][p] / seconds[second][p] for p in common])
            out[f"{first} vs {second}"] = summary(ratio - ratio.mean())
    return out


def xla_counts(runs: dict[str, dict]) -> pd.DataFrame:
    """Stored programs whose run kept XLA's optimized instruction count: run, model
    inputs, measured seconds and that count."""
    found = []
    for name, data in runs.items():
        path = DATA / name / "measured.parquet"
        if not path.exists():
            continue
        measured = pd.read_parquet(path)
        measured = measured[measured["status"] == "ok"]
        counts = dict(zip(measured["family"] + " " + measured["params"], measured["hlo_instructions"]))
        for row in data["results"]:
            if pd.notna(counts.get(row["program"])):
                found.append({"run": name, "inputs": with_added(row["model_inputs"]),
                              "measured_s": row["measured_s"],
                              "xla": float(counts[row["program"]])})
    return pd.DataFrame(found)


def with_count(inputs: dict, count: float | None = None) -> dict:
    """Model inputs, with the emulated fused ops (`fusion_groups` x `fusion_mean_size`)
    made `count` if one is given. An FFT program stored before schema 18 lacks its
    transform inputs; they are set to zero, which a CPU fit never reads (`FFT_INPUTS`)."""
    out = {**dict.fromkeys(FFT_INPUTS, 0.0), **inputs}
    return out if count is None else {**out, "fusion_groups": count, "fusion_mean_size": 1.0}


def xla_count_oracle(programs: pd.DataFrame) -> dict:
    """Both fits' summaries on `programs`, each run's mean log error removed."""
    from costmodel.training.fitting.fit import train
    from costmodel.training.store import dataset

    rows = dataset.load(ROWS)
    known = rows["hlo_instructions"].notna()
    oracle_rows = rows.copy()
    oracle_rows.loc[known, "f_fusion_groups"] = oracle_rows.loc[known, "hlo_instructions"]
    oracle_rows.loc[known, "f_fusion_mean_size"] = 1.0
    out = {"corpus_rows": int(len(rows)), "corpus_rows_with_count": int(known.sum())}
    for label, fitted_on, oracle in (("emulated", rows, False), ("xla_count", oracle_rows, True)):
        predictor = train(fitted_on, "cpu").predictor_
        inputs = [with_count(x, c if oracle else None)
                  for x, c in zip(programs["inputs"], programs["xla"])]
        point = predictor.predict(inputs)["compile_seconds"]["point"]
        error = np.log(programs["measured_s"].to_numpy(float) / point)
        out[label] = summary(centered(error, programs["run"]))
    return out


def correlations(runs: dict[str, dict], errors: pd.DataFrame) -> dict:
    """Spearman of each program's log error with each of `CORRELATED`."""
    inputs = pd.DataFrame([row["model_inputs"] for data in runs.values() for row in data["results"]])
    return {name: float(spearmanr(errors["error"], inputs[name])[0]) for name in CORRELATED}


def report(refit: bool = True) -> dict:
    artifact = load_default("cpu")
    runs = current_results(RESULTS, "cpu")
    errors = log_errors(artifact, runs)
    out = {"model": artifact.version, "runs": sorted(runs),
           "library_centered": library_centered(errors),
           "tree_shrink": tree_shrink(artifact, runs),
           "pass_noise": pass_noise(runs),
           "correlations": correlations(runs, errors)}
    if refit:
        programs = xla_counts(runs)
        out["xla_count_oracle"] = {"programs": int(len(programs)), **xla_count_oracle(programs)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-refit", action="store_true",
                        help="skip the two refits of the oracle (about 30 s)")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args()
    out = report(refit=not args.no_refit)
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
