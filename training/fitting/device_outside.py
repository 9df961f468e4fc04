"""Outside programs in the device correction's pairs: programs of libraries no TPU sweep
row holds, compiled on the chip (`bench/evaluations/tpu_outside.py`)."""

from __future__ import annotations

import math
import statistics

import pandas as pd

from costmodel.features import MODEL_FEATURES


def with_outside(p, programs: pd.DataFrame, device: list[dict]):
    """`p` with the outside programs compiled on the chip added: programs of libraries no
    sweep row holds (`bench/evaluations/tpu_outside.py features`: key, library, model
    inputs `f_<name>`, the base model's own prediction `base` and `rss_pred`, measured
    CPU seconds `cpu`), whose base prediction never saw them."""
    seconds: dict[str, list[float]] = {}
    fresh: dict[str, float] = {}
    for r in device:
        if r.get("status") == "ok" and r.get("device_s"):
            seconds.setdefault(r["key"], []).extend(r["device_s"])
        if r.get("fresh_deviceless_rss_bytes"):
            fresh[r["key"]] = max(fresh.get(r["key"], 0), r["fresh_deviceless_rss_bytes"])
    programs = programs[programs["key"].isin(seconds)].drop_duplicates("key").set_index("key")
    keys = list(programs.index)
    frame = pd.DataFrame({name: programs[f"f_{name}"].to_numpy(float)
                          for name in MODEL_FEATURES}, index=keys)
    frame["base"] = programs["base"].to_numpy(float)
    frame["law"] = math.nan
    frame["rss_pred"] = programs["rss_pred"].to_numpy(float)
    frame["device"] = [statistics.median(seconds[k]) for k in keys]
    frame["rss"] = frame["fresh_rss"] = [fresh.get(k, math.nan) for k in keys]
    frame["library"] = programs["library"].to_numpy()
    frame["here"] = math.nan
    frame["cpu"] = programs["cpu"].to_numpy(float) if "cpu" in programs else math.nan
    frame["outside"] = True
    return type(p)(pd.concat([p.frame.assign(outside=False), frame]))  # a Pairs
