"""Spline coupling flows by depth: the shipped CPU model against fresh-process compiles.

An outside suite's rational-quadratic spline coupling flows of 24 and 48 layers were
predicted 3.9-4.2x too long (issue 55). The corpus has FlowJAX's (`flowjax_mle_step`,
1-16 layers); this measures its spline flows deeper than that, each in a fresh process with
three repeats (`bench/evaluations/_fresh_runs.py`), and prints measured beside predicted.
`--distrax` measures instead the Distrax coupling flow of the outside bench
(`outside_programs.py`, a Python loop over its layers), which FlowJAX's (one layer scanned)
is not.

    python bench/archive/flow_depth.py --out bench/data/flow_depth [--layers 8 16 24 32 48]
    python bench/archive/flow_depth.py --distrax --out bench/data/flow_depth_distrax --layers 20 32 48
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evaluations"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", type=int, nargs="+", default=[8, 16, 24, 32, 48])
    parser.add_argument("--kinds", nargs="+", default=["coupling_spline", "maf_spline"])
    parser.add_argument("--distrax", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from _fresh_runs import measure_rows, read_measured

    import costmodel
    from costmodel.training import corpus

    modules: tuple[str, ...] = ()
    if args.distrax:
        modules = (str(Path(__file__).resolve().parents[1] / "evaluations" / "outside_programs.py"),)
        from costmodel.measure.user_modules import import_module_or_file

        import_module_or_file(modules[0])
        programs = [("outside_distrax_spline_flow_train_step",
                     {"dim": 16, "layers": layers, "hidden": 128, "bins": 8, "batch": 256})
                    for layers in args.layers]
    else:
        programs = [("flowjax_mle_step", {"kind": kind, "layers": layers})
                    for layers in args.layers for kind in args.kinds]
    args.out.mkdir(parents=True, exist_ok=True)
    measure_rows(args.out, programs, modules=modules)
    rows = read_measured(args.out).set_index("params")
    results = []
    for family, params in programs:
        key = json.dumps(params, sort_keys=True)
        if key not in rows.index:
            continue
        fn, fargs = corpus.get_family(family).build(**params)
        predicted = costmodel.predict(fn, *fargs)
        measured = float(rows.loc[key, "compile_seconds"])
        results.append({**params, "measured_s": measured,
                        "predicted_s": predicted.compile_seconds,
                        "ratio": predicted.compile_seconds / measured,
                        "measured_rss": float(rows.loc[key, "peak_rss_bytes"]),
                        "predicted_rss": predicted.peak_memory_bytes})
        print(f"{params.get('kind', 'distrax'):<16} {params['layers']:>3} layers: measured "
              f"{measured:7.2f} s, predicted {predicted.compile_seconds:7.2f} s "
              f"({results[-1]['ratio']:.2f}x)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
