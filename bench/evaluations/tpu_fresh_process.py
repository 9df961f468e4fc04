"""A user's fresh process on the chip: each program compiled in a process of its own, as
sweeps measure a row (`tpu_device_run.py --fresh-each`), against the state the chip labels
and the shipped TPU model stand for (`device_labels`: the average over long processes).

No compile here: it joins the fresh rows to each program's label, fitted over the stored
chip calls (the fresh rows kept out of that fit), and to the shipped model's chip
prediction from the program's stored model inputs.

    python bench/evaluations/tpu_fresh_process.py bench/data/tpu_fresh/fresh*.jsonl \\
        --features bench/data/tpu_outside/features_de.parquet [--json bench/results/tpu_fresh_process.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tpu_device import folds  # noqa: E402

from costmodel.training.fitting.device_fresh import fresh_rows  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
# every stored chip call in long processes: what the labels are fitted on
LABEL_CALLS = tuple(str(p) for p in (
    sorted(p for p in DATA.glob("tpu_device/*.jsonl") if "rss1" not in p.name)
    + [DATA / "tpu_outside/normalized.jsonl"]
    + sorted(DATA.glob("tpu_outside/outside_c[0-9].jsonl"))
    + sorted(DATA.glob("tpu_outside/outside_de[0-9].jsonl"))))


def labels(calls=LABEL_CALLS):
    from costmodel.training.fitting import device_labels

    return device_labels.fit_labels(device_labels.observations(list(calls)))


def predictions(keys, features_path: Path, process_state: str = "fresh") -> dict[str, dict]:
    """The shipped model's chip prediction (point, interval, host RSS) of each key whose
    model inputs the features file holds, for a process in `process_state`."""
    import pandas as pd

    from costmodel.models import load_default

    frame = pd.read_parquet(features_path).drop_duplicates("key").set_index("key")
    known = [k for k in keys if k in frame.index]
    artifact = load_default("tpu", "v5e")
    inputs = [{n: float(frame.loc[k, "f_" + n]) for n in artifact.predictor.feature_names}
              for k in known]
    out = artifact.on_device(inputs, artifact.predictor.predict(inputs),
                             process_state=process_state)
    seconds, rss = out["compile_seconds"], out["peak_rss_bytes"]
    return {k: {"point": float(seconds["point"][i]), "lo": float(seconds["lo"][i]),
                "hi": float(seconds["hi"][i]), "rss": float(rss["point"][i]),
                "model": artifact.version} for i, k in enumerate(known)}


def leave_one_out_factor(ratios: list[float]) -> list[float]:
    """For each program, the median ratio of the others (the factor it would be given)."""
    return [math.exp(statistics.median(math.log(r) for j, r in enumerate(ratios) if j != i))
            for i in range(len(ratios))]


def analyse(paths, features_path: Path) -> dict:
    fresh = fresh_rows(paths)
    fitted = labels()
    by_label = {k: v for k, v in fresh.items() if k in fitted.seconds.index}
    rows = []
    for key, seen in sorted(by_label.items()):
        label = float(fitted.seconds[key])
        rows.append({"key": key, "label_s": label,
                     "first_s": statistics.median(seen["first"]),
                     "row_s": statistics.median(seen["row"]),
                     "rss_bytes": max(seen["rss"]), "processes": len(seen["first"])})
    first_ratio = [r["first_s"] / r["label_s"] for r in rows]
    row_ratio = [r["row_s"] / r["label_s"] for r in rows]  # the host's drift not taken out
    result = {"programs": len(fresh), "labelled": len(rows),
              "position_factor_fitted": [round(float(f), 3) for f in fitted.position_factor],
              "first_over_label": _spread(first_ratio),
              "row_over_label": _spread(row_ratio)}
    terciles = sorted(r["label_s"] for r in rows)
    edges = (terciles[len(rows) // 3], terciles[2 * len(rows) // 3]) if rows else (0, 0)
    result["row_over_label_by_size"] = {
        name: _spread([q for q, r in zip(row_ratio, rows) if test(r["label_s"])])
        for name, test in ((f"under {edges[0]:.2f} s", lambda s: s < edges[0]),
                           (f"{edges[0]:.2f}-{edges[1]:.2f} s",
                            lambda s: edges[0] <= s < edges[1]),
                           (f"{edges[1]:.2f} s and over", lambda s: s >= edges[1]))}
    refs = [s for seen in fresh.values() for s in seen["ref"]]
    result["reference_s"] = {"min": min(refs), "median": statistics.median(refs),
                             "max": max(refs)} if refs else None
    keys = [r["key"] for r in rows]
    predicted, warm = (predictions(keys, features_path, state) for state in ("fresh", "warm"))
    scored = [r for r in rows if r["key"] in predicted]
    if scored:
        measured = [r["row_s"] for r in scored]
        result["model"] = predicted[scored[0]["key"]]["model"]
        for name, by_key in (("as_shipped", predicted), ("at_the_labels_state", warm)):
            p = [by_key[r["key"]] for r in scored]
            result[f"{name}_against_fresh"] = {
                **folds([x["point"] for x in p], measured),
                "covered": statistics.fmean(x["lo"] <= m <= x["hi"] for x, m in zip(p, measured))}
        p = [warm[r["key"]] for r in scored]
        result["at_the_labels_state_against_labels"] = folds([x["point"] for x in p],
                                                             [r["label_s"] for r in scored])
        factor = leave_one_out_factor([m / x["point"] for x, m in zip(p, measured)])
        result["labels_state_times_one_factor_against_fresh"] = {
            **folds([x["point"] * f for x, f in zip(p, factor)], measured),
            "factor": math.exp(statistics.median(math.log(m / x["point"])
                                                 for x, m in zip(p, measured))),
            "covered": statistics.fmean(x["lo"] * f <= m <= x["hi"] * f
                                        for x, f, m in zip(p, factor, measured))}
        big = [(predicted[r["key"]]["rss"], r["rss_bytes"]) for r in scored
               if r["rss_bytes"] > 50e6]
        if big:
            result["host_rss_over_50MB"] = folds(*zip(*big))
        for r in scored:
            r["predicted_s"] = predicted[r["key"]]["point"]
            r["predicted_warm_s"] = warm[r["key"]]["point"]
            r["predicted_rss_bytes"] = predicted[r["key"]]["rss"]
    result["rows"] = rows
    return result


def _spread(ratios: list[float]) -> dict:
    if not ratios:
        return {"n": 0}
    q = statistics.quantiles(ratios, n=10) if len(ratios) > 1 else [ratios[0]] * 9
    return {"n": len(ratios), "median": statistics.median(ratios), "p10": q[0], "p90": q[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="tpu_device_run.py --fresh-each rows")
    parser.add_argument("--features", type=Path, required=True,
                        help="the programs' stored model inputs (tpu_outside.py features)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = analyse(args.paths, args.features)
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
