"""How many of XLA:CPU's fused computations are distinct, per outside-libraries program,
and how well that count explains the backend seconds the run measured.

    python bench/archive/distinct_kernels.py [--out bench/data/outside_libraries/distinct_kernels.parquet]

Needs `pip install -e ".[outside]"`. Compiles each program of the committed
outside-libraries run once (not timed) and reads its optimized module: fusion instructions,
fused computations, and fused computations distinct once names and metadata are dropped.
Then fits the run's `phase_backend_seconds` with a constant plus seconds per count, least
squares relative to each program's seconds, and prints each fit's median fold.
`bench/archive/kernel_reuse.py` times the same question on made-up programs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "bench/data/outside_libraries/measured.parquet"
NAME = re.compile(r"%[\w.\-]+")
METADATA = re.compile(r", metadata=\{[^}]*\}")


def computations(module_text: str) -> dict[str, list[str]]:
    """Each computation of an HLO module's text: its instructions, names and metadata
    dropped, so that two computations doing the same thing read the same."""
    found, current, body = {}, None, []
    for line in module_text.splitlines():
        if line.startswith(("%", "ENTRY")) and line.rstrip().endswith("{"):
            current, body = ("ENTRY" if line.startswith("ENTRY") else line.split()[0]), []
        elif line.strip() == "}" and current:
            found[current] = body
            current = None
        elif current:
            body.append(NAME.sub("%v", METADATA.sub("", line.strip())))
    return found


def counts(module_text: str) -> dict[str, int]:
    every = computations(module_text)
    fused = [body for name, body in every.items() if "fus" in name]
    return {"fusion_instructions": module_text.count(" fusion("),
            "fused_computations": len(fused),
            "distinct_fused": len({hashlib.md5("\n".join(b).encode()).hexdigest()
                                   for b in fused})}


def fit(frame: pd.DataFrame, columns: list[str]) -> tuple[np.ndarray, float]:
    """Constant and seconds per count (relative least squares); the median fold."""
    seconds = frame["phase_backend_seconds"].to_numpy()
    design = np.c_[np.ones(len(frame)), frame[columns].to_numpy(float)]
    coef, *_ = np.linalg.lstsq(design / seconds[:, None], np.ones(len(frame)), rcond=None)
    fitted = np.maximum(design @ coef, 1e-3)
    return coef, float(np.exp(np.median(np.abs(np.log(fitted / seconds)))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path,
                        default=ROOT / "bench/data/outside_libraries/distinct_kernels.parquet")
    parser.add_argument("--reuse", action="store_true",
                        help="read the counts from --out instead of compiling again")
    args = parser.parse_args()
    run = pd.read_parquet(RUN)
    if not args.reuse:
        import jax

        sys.path.insert(0, str(ROOT / "bench" / "evaluations"))
        import outside_programs  # noqa: F401  (registers the families)

        from costmodel.training.corpus.registry import build

        jax.config.update("jax_enable_compilation_cache", False)
        rows = []
        for family, params in zip(run["family"], run["params"]):
            fn, arguments = build(family, json.loads(params))
            text = jax.jit(fn).lower(*arguments).compile().as_text()
            rows.append({"family": family, "params": params, **counts(text)})
            print(family, params, rows[-1], flush=True)
        pd.DataFrame(rows).to_parquet(args.out, index=False)
    frame = run.merge(pd.read_parquet(args.out), on=["family", "params"])
    for columns in (["fusion_instructions"], ["distinct_fused"],
                    ["distinct_fused", "fusion_instructions"]):
        coef, fold = fit(frame, columns)
        terms = ", ".join(f"{c} {v * 1e3:.2f} ms" for c, v in zip(columns, coef[1:]))
        print(f"backend seconds ~ {coef[0] * 1e3:.0f} ms + {terms}: median fold {fold:.3f}")


if __name__ == "__main__":
    main()
