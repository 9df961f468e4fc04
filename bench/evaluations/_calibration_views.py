"""The factor a calibration record gives each program, for each way of calibrating that
the benches compare:

- `reference_only`: the reference program's compile here over the training machine's (the
  first `costmodel calibrate`: one tiny program, one factor);
- `per_part`: the calibration set's part factors weighted by each program's predicted
  phase shares (what `costmodel calibrate` applied with the schema-10 model);
- `reference_speed`: the reference timings beside the set's programs over the model's
  median reference, to its reference power (what `costmodel calibrate` applied until it
  took the set's ratio to the model's own predictions, `bench/evaluations/calibration_choice.py`).

Every record holds what all three need, so older records are scored each way too.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from costmodel.training.measure.calibrate import median_reference, reference_speed_scale

VIEWS = ("reference_only", "per_part", "reference_speed")


def here_reference(record: Mapping) -> float | None:
    """The reference's seconds in the calibration's processes on the machine it ran on."""
    return median_reference({name: p["here"] for name, p in record["programs"].items()})


def factors(record: Mapping, shares: Mapping[str, np.ndarray] | None,
            manifest: Mapping) -> dict[str, np.ndarray | float]:
    """Each view's factor: one number, or one per program where it weighs the shares."""
    reference = record["programs"]["reference"]
    parts = record.get("part_scales")
    set_scale = record.get("set_scale", record["scale"])  # older records: the set's median
    return {"reference_only": (reference["here"]["compile_seconds"]
                               / reference["training"]["compile_seconds"]),
            "per_part": set_scale if not parts or shares is None
            else sum(np.asarray(shares[part]) * factor for part, factor in parts.items()),
            # a model without a reference power: the set's median, as calibrate fell back
            "reference_speed": reference_speed_scale(
                here_reference(record), manifest.get("reference_seconds"),
                manifest.get("reference_power")) or set_scale}
