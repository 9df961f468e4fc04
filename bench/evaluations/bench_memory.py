"""Peak host memory of the library and unseen benches' programs, measured as sweeps measure it.

`bench/evaluations/library_programs.py` and `bench/evaluations/unseen_programs.py` time
their programs interleaved in one process (`_scoring.py`), where a compile's host-RSS growth
depends on what ran before it in that process. This measures each of their programs in a
fresh process, the way `bench/evaluations/outside_libraries.py` and the sweeps do
(`costmodel.measure.harness`: a warm-up compile of the reference program, then RSS sampled
over the program's first compile), and writes each one's growth into the bench's stored
result as `measured_peak_rss_bytes`. The host-memory interval widening
(`training.evaluation.interval_widening`) is then fitted on those programs too, and `merge`
scores the shipped model's host memory on them beside an op-count power law fitted
leave-one-out on the same programs.

Two steps, so the measuring runs alone on the machine:

    python bench/evaluations/bench_memory.py measure --out DIR [--target h100]   # resumable
    python bench/evaluations/bench_memory.py merge --out DIR [--target h100] --json RESULT.json [...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # measurement processes import this file by its path
    sys.path.insert(0, str(HERE))

import library_programs  # noqa: E402
import unseen_programs  # noqa: E402
from _fresh_runs import measure_rows, read_measured  # noqa: E402
from outside_libraries import power_law_leave_one_out, scores  # noqa: E402

from costmodel.training.corpus.registry import Family, register  # noqa: E402
from costmodel.training.evaluation.outside import stored_inputs  # noqa: E402

BENCHES = {"library_programs": library_programs, "unseen_programs": unseen_programs}


def _family(bench: str, programs: dict) -> Family:
    def build(program: str):
        return programs[program]()

    return Family(f"bench_{bench}", f"the programs of bench/{bench}.py, by name", build,
                  tuple({"program": name} for name in programs), tags=("bench", bench))


FAMILIES = tuple(register(_family(name, module.PROGRAMS)) for name, module in BENCHES.items())


def measure(out: Path, target: str = "", only: list[str] | None = None) -> None:
    programs = [(family.name, params) for family in FAMILIES for params in family.grid
                if not only or params["program"] in only]
    print(f"{len(programs)} programs of {len(FAMILIES)} benches", flush=True)
    measure_rows(out, programs, "gpu" if target else "cpu", target, modules=(__file__,))


def measured_memory(out: Path, target: str = "") -> dict[str, dict]:
    """Each measured program's row fields that `merge` uses, by program name."""
    rows = read_measured(out, "gpu" if target else "cpu", target)
    return {json.loads(params)["program"]: {"peak_rss_bytes": float(rss), "cpu_model": cpu,
                                            "f_hlo_ops": ops}
            for params, rss, cpu, ops in zip(rows["params"], rows["peak_rss_bytes"],
                                             rows["cpu_model"], rows["f_hlo_ops"])}


def merge(out: Path, result_path: Path, target: str = "") -> dict:
    """Write the measured host memory into each program of one stored bench result (every
    program must have been measured), and score the shipped model's memory on them."""
    from costmodel.models import load_default
    from costmodel.models.predictor import LOG_OFFSETS

    result = json.loads(result_path.read_text())
    if (result["backend"], result.get("target", "")) != ("gpu" if target else "cpu", target):
        raise SystemExit(f"{result_path} was measured for {result['backend']} "
                         f"{result.get('target', '')}, not for target {target or 'cpu'!r}")
    measured = measured_memory(out, target)
    missing = [row["program"] for row in result["results"] if row["program"] not in measured]
    if missing:
        raise SystemExit(f"not measured in {out}: {', '.join(missing)}")
    for row in result["results"]:
        row["measured_peak_rss_bytes"] = measured[row["program"]]["peak_rss_bytes"]
    machines = sorted({measured[row["program"]]["cpu_model"] for row in result["results"]})
    result["peak_rss_measured"] = {"how": "bench/evaluations/bench_memory.py: a fresh process each",
                                   "cpu_model": ", ".join(machines)}
    result_path.write_text(json.dumps(result, indent=1))

    artifact = load_default(result["backend"], result.get("target", ""))
    predicted = artifact.predict(stored_inputs(result))
    rss = np.array([row["measured_peak_rss_bytes"] for row in result["results"]])
    ops = np.array([measured[row["program"]]["f_hlo_ops"] for row in result["results"]], float)
    offset = LOG_OFFSETS["peak_rss_bytes"]
    point = predicted["peak_rss_bytes"]
    return {"model": artifact.version, "programs": len(rss),
            "model_scores": scores(point["point"], rss, point["lo"], point["hi"], offset),
            "power_law_leave_one_out": scores(power_law_leave_one_out(ops, rss, offset), rss,
                                              offset=offset)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("measure", "merge"))
    parser.add_argument("--out", type=Path, required=True, help="working folder")
    parser.add_argument("--target", default="", help="a GPU target (h100) instead of CPU")
    parser.add_argument("--only", nargs="*", default=None, help="measure: these programs")
    parser.add_argument("--json", type=Path, nargs="*", default=(),
                        help="merge: the stored bench results to write the memory into")
    args = parser.parse_args()
    if args.step == "measure":
        args.out.mkdir(parents=True, exist_ok=True)
        measure(args.out, args.target, args.only)
        return
    for path in args.json:
        print(path, json.dumps(merge(args.out, path, args.target), indent=1))


if __name__ == "__main__":
    main()
