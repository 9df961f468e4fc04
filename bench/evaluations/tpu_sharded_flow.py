"""Does where a program's sharded arguments spread explain what sharding adds to its TPU
compile? Each sharded row's program lowered again (never compiled), its splits followed
through the module (`costmodel.features.sharded_flow`), and the counts set against the
compile's log(sharded seconds / one-chip twin's seconds), reference-normalized as the
evaluation scores.

    python bench/evaluations/tpu_sharded_flow.py relower bench/data/tpu_sharded/flow_counts.jsonl
    python bench/evaluations/tpu_sharded_flow.py score bench/data/tpu_sharded/flow_counts.jsonl
    python bench/evaluations/tpu_sharded_flow.py model bench/data/tpu_sharded/flow_counts.jsonl \\
        --inputs split_op_share,reshard_share

`relower` lowers each family in a fresh process, one at a time (libtpu beside another
process's: `ALLOW_MULTIPLE_LIBTPU_LOAD`). `score` prints each count's Spearman correlation
with the ratio left once its (topology, strategy) median is taken out, and with the
shipped model's held-out error, then predicts the ratio with each library held out (the
median ratio, ridge on the counts). `model` refits the TPU model with the library held
out, the named row columns added to its placement inputs, and scores it by placement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
ROWS = ROOT / "training/data/tpu-v5e"
HELD_OUT = ROOT / "bench/data/tpu_sharded/heldout.parquet"
# ratios of counts, which the model reads beside the counts' own columns
DERIVED = {"split_op_share": ("split_ops", "ops"), "reshard_share": ("reshards", "ops"),
           "split_element_share": ("split_elements", "elements")}


def family_counts(family: str) -> list[dict]:
    """Flow counts of one family's ok sharded rows, lowered as the sweep lowers them."""
    import jax

    from costmodel.features.sharded_flow import ShardedFlow
    from costmodel.features.stablehlo.parse import entry_function, functions, parse_module
    from costmodel.measure.harness import placement
    from costmodel.measure.sharding import sharded_placement, split_params
    from costmodel.training import corpus

    rows = pd.read_parquet(ROWS / "sharded.parquet")
    rows = rows[(rows["status"] == "ok") & (rows["family"] == family)]
    built = corpus.get_family(family)
    if built.x64:
        jax.config.update("jax_enable_x64", True)
    out = []
    for row in rows.itertuples():
        params, strategy = split_params(json.loads(row.params))
        place = sharded_placement(placement("tpu", row.target), strategy)
        _, lowered = place.lower(*built.build(**params))
        module = parse_module(lowered.as_text(), check=False)
        funcs = functions(module)
        start = time.perf_counter()
        with module.context:
            counts = ShardedFlow(funcs, entry_function(funcs)).run()
        out.append({"key": row.key, **counts, "flow_seconds": time.perf_counter() - start})
    return out


def relower(out: Path) -> None:
    rows = pd.read_parquet(ROWS / "sharded.parquet")
    env = {**os.environ, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    with open(out, "w") as sink:
        for family in sorted(rows.loc[rows["status"] == "ok", "family"].unique()):
            done = subprocess.run([sys.executable, __file__, "family", family], env=env,
                                  capture_output=True, text=True, check=True)
            for line in done.stdout.splitlines():
                if line.startswith("{"):
                    sink.write(line + "\n")
            print(family, flush=True)


def pairs(counts: Path) -> pd.DataFrame:
    """Sharded rows with their one-chip twin's seconds, their flow counts, the ratio
    (`ratio`, log, reference-normalized), the ratio less its (target, strategy) median
    (`residual`) and the shipped model's held-out log error (`model_error`)."""
    def base(params: str) -> str:
        return json.dumps({k: v for k, v in json.loads(params).items() if k != "sharding"},
                          sort_keys=True)

    sharded = pd.read_parquet(ROWS / "sharded.parquet")
    sharded = sharded[sharded["status"] == "ok"].assign(base=lambda r: r["params"].map(base))
    single = pd.read_parquet(ROWS / "rows.parquet")
    single = single[single["status"] == "ok"]
    p = sharded.merge(single[["family", "params", "compile_seconds", "ref_seconds"]],
                      left_on=["family", "base"], right_on=["family", "params"],
                      suffixes=("", "_one"))
    p = p.merge(pd.read_json(counts, lines=True), on="key")
    p["ratio"] = np.log((p["compile_seconds"] / p["ref_seconds"])
                        / (p["compile_seconds_one"] / p["ref_seconds_one"]))
    p["residual"] = p["ratio"] - p.groupby(["target", "sharding"])["ratio"].transform("median")
    held = pd.read_parquet(HELD_OUT)
    held = held[(held["split"] == "leave_library_out") & (held["model"] == "costmodel")
                & (held["target"] == "compile_seconds")]
    p = p.merge(held[["key", "actual", "point"]], on="key", how="left")
    twins = single[["key", "family", "params"]].merge(held[["key", "actual", "point"]],
                                                      on="key")
    p = p.merge(twins.drop(columns="key").rename(columns={
                    "params": "base", "point": "point_one", "actual": "actual_one"}),
                on=["family", "base"], how="left")
    p["model_error"] = np.log(p["actual"] / p["point"])
    for name, (num, den) in DERIVED.items():
        p[name] = p[num] / p[den].clip(lower=1)
    return p


def score(counts: Path) -> None:
    from sklearn.linear_model import Ridge

    p = pairs(counts)
    print(f"{len(p)} sharded rows with a one-chip twin; flow walk median "
          f"{p['flow_seconds'].median() * 1e3:.1f} ms, max {p['flow_seconds'].max():.2f} s")
    columns = ["ops", "split_ops", "reshards", "contracted_splits", *DERIVED,
               "sharded_args", "sharded_input_share", "hlo_collectives"]
    for c in columns:
        r = p[c].corr(p["residual"], method="spearman")
        m = p[c].corr(p["model_error"], method="spearman")
        h = p[c].corr(p["hlo_collectives"], method="spearman")
        print(f"{c:22s} Spearman: ratio residual {r:+.3f}, model error {m:+.3f}, "
              f"compiled collectives {h:+.3f}")
    within = {f"{t} {s}": np.corrcoef(np.log1p(g["reshards"]), g["ratio"])[0, 1]
              for (t, s), g in p.groupby(["target", "sharding"])}
    print("log(1 + reshards) against the ratio within each topology and strategy (Pearson):",
          ", ".join(f"{k} {v:+.2f}" for k, v in within.items()))
    families = p.groupby("family")["residual"].median().sort_values()
    print("ratio residual by family (median):", ", ".join(
        f"{k} {v:+.2f}" for k, v in pd.concat([families.head(2), families.tail(2)]).items()))
    by_program = p.groupby(["family", "base"])["residual"].transform("mean")
    share = 1 - ((p["residual"] - by_program) ** 2).mean() / p["residual"].var(ddof=0)
    print(f"share of the residual's variance between programs: {share:.2f}")
    inputs = {"median ratio": [],
              "placement inputs": ["chips", "sharded_args", "sharded_input_share"],
              "+ flow counts": ["chips", "sharded_args", "sharded_input_share",
                                "split_op_share", "reshard_share", "log_reshards",
                                "log_split_ops", "log_ops"],
              "+ compiled collectives": ["chips", "sharded_args", "sharded_input_share",
                                         "log_collectives"]}
    p = p.assign(log_reshards=np.log1p(p["reshards"]), log_split_ops=np.log1p(p["split_ops"]),
                 log_ops=np.log(p["ops"]), log_collectives=np.log1p(p["hlo_collectives"]),
                 chips=np.log2(p["target"].map({"v5e:2x2": 4, "v5e:4x4": 16})))
    library = p["library"].to_numpy()
    for name, cols in inputs.items():
        predicted = np.zeros(len(p))
        for held_out in np.unique(library):
            test = library == held_out
            if not cols:
                predicted[test] = p["ratio"][~test].median()
                continue
            fit = Ridge(alpha=1.0).fit(p.loc[~test, cols], p["ratio"][~test])
            predicted[test] = fit.predict(p.loc[test, cols])
        fold = np.exp(np.abs(predicted - p["ratio"]))
        # the model's held-out prediction of the one-chip twin times the predicted ratio
        two = np.exp(np.abs(np.log(p["actual"] / (p["point_one"] * np.exp(predicted)))))
        print(f"ratio, library held out, {name:24s} median fold {np.median(fold):.3f} "
              f"p90 {np.percentile(fold, 90):.3f}; twin's prediction x ratio: median fold "
              f"{np.median(two):.3f} p90 {np.percentile(two, 90):.3f}")
    model_fold = np.exp(np.abs(p["model_error"]))
    print(f"the model on the sharded rows: median fold {np.median(model_fold):.3f} p90 "
          f"{np.percentile(model_fold, 90):.3f}; on their one-chip twins: median fold "
          f"{np.median(np.exp(np.abs(np.log(p['actual_one'] / p['point_one'])))):.3f}")
    twin = p.pivot_table(index=["family", "base", "sharding"], columns="target",
                         values="residual").dropna()
    gap = twin["v5e:2x2"] - twin["v5e:4x4"]
    gap = np.abs(gap - gap.median()).median()
    # the two share their one-chip twin: the gap is their own noise and the topologies'
    print(f"ratio residual, v5e:2x2 against v5e:4x4 of one program and strategy: "
          f"correlation {twin.corr().iloc[0, 1]:.2f} (n={len(twin)}), median |gap| "
          f"{gap:.2f}: a sharded label's own noise at most a median fold of "
          f"{np.exp(gap / np.sqrt(2)):.2f}")


def model(counts: Path, extra: list[str]) -> None:
    """Library-held-out TPU model with `extra` row columns among its placement inputs."""
    import costmodel.features.sharding as sharding
    import costmodel.training.fitting.estimator as estimator
    import costmodel.training.fitting.fit as fit
    from costmodel.training.evaluation import by_placement
    from costmodel.training.evaluation.evaluate import predictions, with_keys
    from costmodel.training.store import dataset

    names = tuple(sharding.PLACEMENT_INPUTS) + tuple(extra)
    estimator.PLACEMENT_INPUTS = names
    frame = fit.placement_frame

    def placement_frame(rows: pd.DataFrame) -> pd.DataFrame:
        out = frame(rows)
        for name in extra:
            out[name] = pd.to_numeric(rows[name], errors="coerce").fillna(0.0).to_numpy(float)
        return out

    fit.placement_frame = placement_frame
    rows = fit.select_rows(dataset.load([ROWS]), "tpu", "v5e")
    flow = pd.read_json(counts, lines=True).drop(columns=["flow_seconds"])
    rows = rows.merge(flow, on="key", how="left")
    rows = rows.assign(**{name: rows[num] / rows[den].where(rows[den] > 0)
                          for name, (num, den) in DERIVED.items()})
    counted = [*flow.columns[1:], *DERIVED]
    rows[counted] = rows[counted].fillna(0.0)  # one chip: nothing split
    held = with_keys(predictions(rows, "leave_library_out", models=("costmodel",),
                                 params=fit.model_params("tpu")), rows)
    print("placement inputs:", ", ".join(names))
    for group, by_model in by_placement.scores(held, rows).items():
        m = by_model["costmodel"]
        print(f"{group:22s} n={m['n']:4d} median fold {m['median_fold']:.3f} p90 "
              f"{m['p90_fold']:.3f} Spearman {m['spearman']:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("relower", "score", "model", "family"))
    parser.add_argument("path", help="the flow counts (jsonl); for `family`, its name")
    parser.add_argument("--inputs", default="", help="model: row columns to add, comma-separated")
    args = parser.parse_args(argv)
    if args.command == "family":
        for row in family_counts(args.path):
            print(json.dumps(row))
    elif args.command == "relower":
        relower(Path(args.path))
    elif args.command == "score":
        score(Path(args.path))
    else:
        model(Path(args.path), [n for n in args.inputs.split(",") if n])
    return 0


if __name__ == "__main__":
    sys.exit(main())
