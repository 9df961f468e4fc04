"""Do the programs the CPU model under-predicts carry more state through while loops? For
each program of the second outside set (`bench/evaluations/outside_programs_b1.py`, `_b2.py`) and of
the JaxSim corpus families (measured, kept out of training:
`bench/data/cpu_unshipped_real.parquet`), the shipped model's miss (measured / predicted,
calibrated as the stored runs are) beside its while loops and the values they carry
(results of every `stablehlo.while`), counted in its lowered module. Lowering only.

Why ask: brax's and JaxSim's physics steps compile 1.5-2.4x longer than predicted while
the emulated fusions match XLA's, and JaxSim's top HLO passes are while-loop ones
(simplify-while-loops, copy-insertion, while-loop-invariant-code-motion); copying and
simplifying a loop is work per carried value. No feature counts carried values (schema 16);
tried as one (fit-only, 2026-12-04, `bench/FINDINGS.md`), it did not improve the benches' scores.

    python bench/archive/while_state.py [--json bench/results/while_state.json]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import _rooms  # noqa: E402,F401  (the outside programs' folder on sys.path)
import jax
import numpy as np
import outside_programs_b1  # noqa: E402,F401  (registers the outside families)
import outside_programs_b2  # noqa: E402,F401
from added_rows_effect import row_predictions  # noqa: E402

from costmodel.models import load_default  # noqa: E402
from costmodel.training import corpus  # noqa: E402
from costmodel.training.evaluation.outside import current_results, scaled_predictions  # noqa: E402
from costmodel.training.fitting.fit import select_rows  # noqa: E402
from costmodel.training.store import dataset  # noqa: E402

RUNS = ("outside_libraries_b1", "outside_libraries_b2")
ROOT = Path(__file__).resolve().parents[2]
UNSHIPPED = ROOT / "bench/data/cpu_unshipped_real.parquet"
# `%r:12 = stablehlo.while(...)` carries 12 values; `%r = stablehlo.while` one
WHILE = re.compile(r"%[\w.#]+(?::(\d+))? = stablehlo\.while")


def carried_values(text: str) -> tuple[int, int]:
    """(while loops, values they carry in all) in a StableHLO module's text."""
    counts = [int(m.group(1) or 1) for m in WHILE.finditer(text)]
    return len(counts), sum(counts)


def while_state(family: str, params: dict) -> tuple[int, int]:
    """`carried_values` of one corpus program's lowered module."""
    fn, args = corpus.build(family, params)
    with jax.enable_x64(corpus.get_family(family).x64):
        return carried_values(jax.jit(fn).trace(*args).lower().as_text())


def _outside_programs(model) -> list[dict]:
    found = []
    for run, data in current_results(ROOT / "bench/results", "cpu").items():
        if run not in RUNS:
            continue
        point, _, _, measured = scaled_predictions(model, data)
        for row, predicted, actual in zip(data["results"], point, measured):
            family, _, params = row["program"].partition(" ")
            found.append({"set": run, "family": family, "params": json.loads(params),
                          "ops": row["model_inputs"]["hlo_ops_inlined"],
                          "measured_over_predicted": float(actual / predicted)})
    return found


def _jaxsim_programs(model) -> list[dict]:
    rows = select_rows(dataset.load([UNSHIPPED]), "cpu", "")
    rows = rows[rows["library"] == "jaxsim"].reset_index(drop=True)
    point, _, _ = row_predictions(model, rows)
    return [{"set": "jaxsim", "family": row["family"], "params": json.loads(row["params"]),
             "ops": float(row["f_hlo_ops_inlined"]),
             "measured_over_predicted": float(row["compile_seconds"] / predicted)}
            for (_, row), predicted in zip(rows.iterrows(), point)]


def run() -> dict:
    model = load_default("cpu")
    programs = _outside_programs(model) + _jaxsim_programs(model)
    for program in programs:
        program["whiles"], program["carried"] = while_state(program["family"], program["params"])
        print(f"{program['set'].replace('outside_libraries_', ''):6s} {program['family'][:34]:34s} "
              f"measured / predicted "
              f"{program['measured_over_predicted']:5.2f}, {program['whiles']:3d} while loops "
              f"carrying {program['carried']:5d} values, {program['ops']:7.0f} ops", flush=True)
    miss = np.log([p["measured_over_predicted"] for p in programs])
    carried = np.log1p([p["carried"] for p in programs])
    per_op = carried - np.log([p["ops"] for p in programs])
    report = {"programs": programs,
              "correlation_log_miss_log_carried": float(np.corrcoef(miss, carried)[0, 1]),
              "correlation_log_miss_log_carried_per_op": float(np.corrcoef(miss, per_op)[0, 1])}
    print(f"correlation of log(measured / predicted) with log(1 + carried values): "
          f"{report['correlation_log_miss_log_carried']:.2f}; with carried values per op: "
          f"{report['correlation_log_miss_log_carried_per_op']:.2f} ({len(programs)} programs)")
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    report = run()
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
