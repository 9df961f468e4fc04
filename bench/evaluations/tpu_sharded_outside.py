"""Sharded TPU compiles of programs from libraries no training row uses: the third outside
suite's programs (`outside_programs_c.py`) compiled deviceless over a `v5e:2x2` topology
under the `dp`, `fsdp` and `tp` strategies, scored against the TPU model's predictions.

    PYTHONPATH=<a folder holding only libtpu> venv-outside-c/bin/costmodel sweep \\
        --module bench/evaluations/outside_programs_c.py --families <its families> \\
        --backend tpu --target v5e:2x2 --shardings dp fsdp tp --max-repeats 1 --no-phases \\
        --timeout 240 --out sweeps/tpu-sharded-outside-c-2x2
    costmodel export --data sweeps/tpu-sharded-outside-c-2x2 \\
        --out bench/data/tpu_sharded/outside_c_rows.parquet
    python bench/evaluations/tpu_sharded_outside.py bench/data/tpu_sharded/outside_c_rows.parquet \\
        [--model DIR ...] [--json OUT.json]

Each row's seconds are brought to the model's reference machine as its training labels
were (`(model reference / row reference) ** reference power`); `--model` scores other
artifacts beside the shipped one (its folder or `model.npz`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def score(rows: pd.DataFrame, predictor) -> dict:
    """The evaluation's metrics (`metrics.summarize`) of `predictor` on the ok sharded
    `rows`, with the largest fold and measured over predicted (geometric mean)."""
    from costmodel.training.evaluation import metrics
    from costmodel.training.fitting.fit import features_frame

    predicted = predictor.predict(features_frame(rows).to_dict("records"))["compile_seconds"]
    power = predictor.reference_power or 0.0
    ref = pd.to_numeric(rows["ref_seconds"], errors="coerce").to_numpy(float)
    scale = ((predictor.reference_seconds / ref) ** power
             if predictor.reference_seconds and np.all(ref > 0) else 1.0)
    actual = rows["compile_seconds"].to_numpy(float) * scale
    point = np.asarray(predicted["point"], float)
    return {**metrics.summarize(point, actual, predicted["lo"], predicted["hi"]),
            "max_fold": float(np.exp(np.abs(np.log(point / actual))).max()),
            "measured_over_predicted": float(np.exp(np.mean(np.log(actual / point))))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rows", help="the sweep's rows (parquet)")
    parser.add_argument("--model", nargs="*", default=[],
                        help="other TPU model artifacts to score (folder or model.npz)")
    parser.add_argument("--json", help="write the scores here too")
    args = parser.parse_args(argv)
    from costmodel.measure.sharding import SHARDING_PARAM
    from costmodel.models import load_default
    from costmodel.models.predictor import Predictor

    rows = pd.read_parquet(args.rows)
    rows = rows[rows["status"] == "ok"].reset_index(drop=True)
    models = {"shipped": load_default("tpu", "v5e").predictor}
    for path in args.model:
        path = Path(path)
        models[str(path)] = Predictor.load(path / "model.npz" if path.is_dir() else path)
    result = {"rows": args.rows, "libraries": sorted(set(rows["library"].fillna(""))),
              "by_model": {}}
    for name, predictor in models.items():
        whole = score(rows, predictor)
        by_strategy = {s: score(part, predictor) for s, part in
                       rows.groupby(rows["params"].map(lambda p: json.loads(p)[SHARDING_PARAM]))}
        result["by_model"][name] = {"all": whole, "by_strategy": by_strategy}
        print(f"{name}: n={whole['n']} median fold {whole['median_fold']:.3f} p90 "
              f"{whole['p90_fold']:.2f} max {whole['max_fold']:.1f} measured/predicted "
              f"{whole['measured_over_predicted']:.3f} covered {whole['coverage']:.2f} "
              f"Spearman {whole['spearman']:.3f}; " + ", ".join(
                  f"{s} {m['median_fold']:.2f}" for s, m in by_strategy.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
