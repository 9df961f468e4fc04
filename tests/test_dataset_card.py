"""The dataset card (training/store/card.py) names every machine its rows came from."""

from __future__ import annotations

from importlib.resources import files

import pandas as pd

from costmodel.training.store import card, dataset


def _shipped_rows(n: int) -> pd.DataFrame:
    path = files("costmodel.training") / "data" / "cpu" / "rows.parquet"
    return dataset.load([str(path)]).head(n).reset_index(drop=True)


def test_machine_line_counts_rows_of_each_cpu_kind():
    rows = _shipped_rows(12)
    rows.loc[:2, "cpu_model"] = "AMD EPYC"  # three rows from a second machine
    text = card.render({"cpu": rows})
    line = next(line for line in text.splitlines() if line.startswith("- Machines"))
    xeon = rows["cpu_model"].iloc[-1]
    assert f"cpu: {xeon} × 2 cores (9 rows), AMD EPYC × 2 cores (3 rows)" in line
    assert "| cpu | 12 | 12 |" in text  # the dataset table counts all of them
