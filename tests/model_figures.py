"""Figures of the shipped default models that the tests pin, and the snapshot they are
pinned to (`tests/model_figures.json`).

Each figure is computed from the committed bench runs (`bench/data/`, `bench/results/`)
and the shipped models, never compiled. `tests/test_model_figures.py` recomputes every
figure and fails on any drift from the snapshot. After a retrain (a new model in
`models/default/`), regenerate the snapshot with one command and review its diff beside
the models':

    python tests/model_figures.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = Path(__file__).with_name("model_figures.json")
DATA, RESULTS = ROOT / "bench" / "data", ROOT / "bench" / "results"
# the shipped models, by (backend, target)
MODELS = {"cpu": ("cpu", ""), "gpu-h100": ("gpu", "h100")}
# outside-libraries runs: name -> (folder under bench/data, target)
OUTSIDE_RUNS = {"first set": ("outside_libraries", ""), "first set h100": ("outside_libraries_h100", "h100"),
                "first set again": ("outside_libraries_pass2", ""),
                "top end": ("outside_top", ""), "top end's builders at the first set's sizes": (
                    "outside_top_baseline", ""),
                "simulators and RL": ("outside_libraries_b1", ""),
                "numerical": ("outside_libraries_b2", ""),
                "third set": ("outside_libraries_c", ""),
                "fourth set, first part": ("outside_libraries_d1", ""),
                "fourth set, second part": ("outside_libraries_d2", ""),
                "fifth set, first part": ("outside_libraries_e1", ""),
                "fifth set, second part": ("outside_libraries_e2", ""),
                "simulators and RL h100": ("outside_libraries_b1_h100", "h100"),
                "numerical h100": ("outside_libraries_b2_h100", "h100")}
FIGURES: dict[str, Callable[[], object]] = {}


def figure(fn: Callable[[], object]) -> Callable[[], object]:
    FIGURES[fn.__name__] = fn
    return fn


def bench_module(name: str):
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import bench_module as load

    return load(name)


def versions() -> dict[str, str]:
    """The shipped models' versions, by label."""
    from costmodel.models import load_default

    return {label: load_default(*where).version for label, where in MODELS.items()}


@figure
def outside_libraries() -> dict:
    """Each outside run scored by the shipped model of its target (`outside_libraries.py
    score`): compile time calibrated, against the leave-one-out power law, host memory,
    and the program missed most."""
    bench = bench_module("outside_libraries")
    out = {}
    for name, (folder, target) in OUTSIDE_RUNS.items():
        report = bench.score(DATA / folder, target)
        worst = max(report["rows"], key=lambda row: row["fold"])
        out[name] = {"programs": report["programs"],
                     "compile_seconds": report["compile_seconds"],
                     "peak_rss_bytes": report["peak_rss_bytes"],
                     "worst": {"family": worst["family"], "fold": worst["fold"]}}
    return out


@figure
def device_pairs() -> dict:
    """The H100 model against the H200 machine's deviceless and on-device compiles."""
    bench = bench_module("device_pairs")
    rows = [json.loads(line) for path in sorted((DATA / "device_pairs").glob("*.jsonl"))
            for line in path.read_text().splitlines()]
    report = bench.score(rows)
    return {key: report[key] for key in ("model_vs_deviceless_there", "model_vs_device")}


@figure
def stored_bench_runs() -> dict:
    """Each stored bench result of this schema rescored by the shipped model of its
    placement (`training.evaluation.outside.score`): median fold and coverage."""
    from costmodel.models import load_default
    from costmodel.training.evaluation import outside

    out = {}
    for backend, target in MODELS.values():
        artifact = load_default(backend, target)
        for name, data in outside.current_results(RESULTS, backend, target).items():
            scores = outside.score(artifact, data)
            out[name] = {key: value for key, value in scores.items() if key != "folds"}
    return out


@figure
def fusion_shapes() -> dict:
    """The CPU model's compile seconds for `bench/archive/fusion_shapes.py`'s one-fusion
    programs at 1024 terms (lowered, not compiled)."""
    import costmodel

    shapes = bench_module("fusion_shapes")
    out = {}
    for kind, build in shapes.FUSIONS.items():
        fn, args = build(1024)
        out[kind] = costmodel.predict(fn, *args).compile_seconds
    return out


def compute() -> dict:
    return {"models": versions(), "figures": {name: fn() for name, fn in FIGURES.items()}}


def main() -> None:
    snapshot = compute()
    SNAPSHOT.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT.relative_to(ROOT)} for {', '.join(snapshot['models'].values())}")


if __name__ == "__main__":
    main()
