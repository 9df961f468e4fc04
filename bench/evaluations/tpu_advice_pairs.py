"""Does `advise(..., backend="tpu")` pick the option that really compiles faster on a TPU?

The pairs of `advice_validation.py` (a loop unrolled or as `lax.scan`, inner per-layer jits
compiled whole or one layer alone, constants captured or passed, and the Flax, Haiku,
Equinox and Optax pairs of `advice_library_pairs.py`), each asked for advice for a v5e
with a budget below every prediction, then both options compiled on the chip and judged
as `advice_validation.verdicts` judges them on CPU (pick, recommended, split; ties within
10%), with each pair's predicted saving over its measured one.

`export` asks for the advice here and writes both options of each pair as `jax.export`
artifacts, with the advice beside them (`advice.json`); `tpu_device_run.py` compiles them
on the chip (`--passes 2` or more: every option compiled in each pass, in shuffled order);
`score` reads its rows.

    python bench/evaluations/tpu_advice_pairs.py export --out .tpu-advice-pairs [--max-predicted-s 20]
    # on the device machine: python bench/evaluations/tpu_device_run.py .tpu-advice-pairs \\
    #     --out $OUT/pairs.jsonl --passes 2 --order-seed 11 --deviceless-below-s 0
    python bench/evaluations/tpu_advice_pairs.py score bench/data/tpu_advice/pairs*.jsonl \\
        --advice bench/data/tpu_advice/pairs_advice.json [--json bench/results/tpu_advice_pairs.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _rooms  # noqa: E402,F401  (the other benches' folders on sys.path)

# an artifact embeds its captured constants; the device tool carries 64 MiB in all
MAX_ARTIFACT_BYTES = 12 * 2**20


def form_key(pair: str, form: str) -> str:
    return f"advice_pair|{pair}|{form}"


def export(out: Path, max_predicted_s: float) -> dict:
    """Advice for a v5e on every pair, and both options of those under `max_predicted_s`
    as artifacts in `out` (manifest, `advice.json`)."""
    from advice_validation import all_pairs

    import costmodel
    from costmodel.measure.tpu_export import MANIFEST, serialize_for_tpu

    out.mkdir(parents=True, exist_ok=True)
    advice_rows, entries = [], []
    for library, (name, original, args, strategy, build_alt) in all_pairs(quick=False):
        advice = costmodel.lower(original, *args).advise(budget_seconds=1e-9, backend="tpu",
                                                         target="v5e")
        predicted = {a.strategy: a.predicted_compile_seconds for a in advice.alternatives}
        row = {"pair": name, "library": library, "strategy": strategy,
               "split": advice.split, "predicted": predicted}
        if strategy not in predicted:
            row["skipped"] = f"advice offered no {strategy}"
        elif max(predicted["keep"], predicted[strategy]) > max_predicted_s:
            row["skipped"] = f"predicted over {max_predicted_s:g} s"
        else:
            blobs = {"keep": serialize_for_tpu(original, args),
                     strategy: serialize_for_tpu(*build_alt())}
            if max(len(b) for b in blobs.values()) > MAX_ARTIFACT_BYTES:
                row["skipped"] = "artifact over the carry limit"
            for i, (form, blob) in enumerate(blobs.items()):
                if "skipped" in row:
                    break
                file = f"a{len(advice_rows):02d}_{i}.bin"
                (out / file).write_bytes(blob)
                entries.append({"name": file[:-4], "file": file, "key": form_key(name, form),
                                "x64": False, "here_s": predicted[form],
                                "family": "advice_pair", "library": library or "synthetic"})
        advice_rows.append(row)
        print(f"{name:<45} {row.get('skipped', 'exported')}", file=sys.stderr, flush=True)
    (out / MANIFEST).write_text(json.dumps({"programs": entries}, indent=1))
    result = {"backend": "tpu", "target": "v5e", "model": costmodel.models.load_default(
        "tpu", "v5e").version, "pairs": advice_rows}
    (out / "advice.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def labels_state(version: str):
    """Fresh-process seconds of the shipped TPU model's advice brought to its labels'
    state (as they are when `version` is another model's or predates the factor)."""
    from costmodel.models import load_default

    model = load_default("tpu", "v5e")
    fresh = getattr(model.device_correction, "fresh", None)
    if fresh is None or model.version != version:
        return lambda seconds: seconds
    return fresh.at_labels_state


def chip_medians(paths) -> tuple[dict[str, float], dict[str, int], list[float]]:
    """Each option's median chip seconds over every compile of it in the rows, how many
    compiles, and the reference program's seconds."""
    seconds: dict[str, list[float]] = {}
    refs: list[float] = []
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if row.get("status") == "ok" and row.get("device_s"):
                seconds.setdefault(row["key"], []).extend(row["device_s"])
                refs.extend(row.get("ref_device_s", []))
    return ({k: statistics.median(v) for k, v in seconds.items()},
            {k: len(v) for k, v in seconds.items()}, refs)


def score(paths, advice_path: Path) -> dict:
    """Each exported pair judged on the chip's seconds (`advice_validation.verdicts`)."""
    from advice_validation import TIE, verdicts
    from advice_validation import score as tally

    from costmodel._advise import MIN_SAVING

    advice = json.loads(advice_path.read_text())
    medians, compiles, refs = chip_medians(paths)
    warm = labels_state(advice["model"])
    results = []
    for row in advice["pairs"]:
        keys = {form: form_key(row["pair"], form) for form in ("keep", row["strategy"])}
        if "skipped" in row or not all(k in medians for k in keys.values()):
            results.append({**row, "skipped": row.get("skipped", "not compiled on the chip")})
            continue
        measured = {form: medians[k] for form, k in keys.items()}
        predicted = {form: row["predicted"][form] for form in keys}
        saving_measured = measured["keep"] - measured[row["strategy"]]
        saving_predicted = predicted["keep"] - predicted[row["strategy"]]
        # the chip's seconds are of long processes: the advice's saving at their state too
        saving_warm = float(warm(predicted["keep"]) - warm(predicted[row["strategy"]]))
        results.append({**row, "measured": measured,
                        "compiles": {form: compiles[k] for form, k in keys.items()},
                        "saving_ratio": (saving_predicted / saving_measured
                                         if saving_measured else None),
                        "saving_ratio_warm": (saving_warm / saving_measured
                                              if saving_measured else None),
                        **verdicts(predicted, measured, row["split"], row["strategy"])})
    judged = [r for r in results if "measured" in r]
    saves = [r for r in judged if r["saving_ratio"] is not None and r["measured"]["keep"] > 0
             and r["measured"][r["strategy"]] <= (1 - MIN_SAVING) * r["measured"]["keep"]]
    ratios = [r["saving_ratio"] for r in saves]
    warm_ratios = [r["saving_ratio_warm"] for r in saves]
    return {"model": advice["model"], "tie": TIE, **tally(judged),
            "library": tally([r for r in judged if r["library"]]),
            "skipped": sum("skipped" in r for r in results),
            # pairs whose alternative really saved 30% or more: predicted saving / measured
            "saving_ratio_where_it_saves": {
                "n": len(ratios), "median": statistics.median(ratios) if ratios else None,
                "min": min(ratios, default=None), "max": max(ratios, default=None)},
            # the same with the advice's predictions brought to the labels' state
            "saving_ratio_where_it_saves_warm": {
                "n": len(warm_ratios),
                "median": statistics.median(warm_ratios) if warm_ratios else None},
            "reference_device_s": ({"min": min(refs), "median": statistics.median(refs),
                                    "max": max(refs)} if refs else None),
            "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("export")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--max-predicted-s", type=float, default=20.0)
    p = sub.add_parser("score")
    p.add_argument("rows", nargs="+", type=Path)
    p.add_argument("--advice", type=Path, required=True)
    p.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.command == "export":
        export(args.out, args.max_predicted_s)
        return
    result = score(args.rows, args.advice)
    print(json.dumps({k: v for k, v in result.items() if k != "results"}, indent=1))
    for r in result["results"]:
        if "measured" in r:
            print(f"{r['pair']:<45} pick {r['pick']:<18} faster {r['really_faster']:<18}"
                  f"{' tie' if r['tie'] else ''} split={r['split']} "
                  f"{'OK' if r['correct'] else 'WRONG'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
