"""The StableHLO extractor gives exactly the features and info it gave before the walk was
made faster: 102 programs (one or two of each of 52 built-in corpus families, three of
them off their grids to keep captured constants small, and a call fan-out past the
inlining budget), for XLA:CPU and XLA:GPU, recorded by `walk_golden.py` with the
extractor of commit 9eeda5b."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from costmodel.features import from_stablehlo

GOLDEN = Path(__file__).parent / "data" / "walk_golden.json.gz"


def _golden() -> dict:
    with gzip.open(GOLDEN, "rt") as handle:
        return json.load(handle)


PROGRAMS = _golden()


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))  # jaxpr features: NaN from text


def test_the_recorded_programs_cover_the_walks_kinds_of_op():
    cpu = [program["cpu"]["values"] for program in PROGRAMS.values()]
    assert len(cpu) == 109
    for feature in ("while_count", "case_count", "hlo_calls", "conv_flops", "dot_flops",
                    "custom_call_count", "fold_ops", "dense_constant_bytes", "complex_ops",
                    "f64_ops", "layout_transposes"):
        assert sum(values[feature] > 0 for values in cpu) >= 2, feature
    assert any(not p["cpu"]["info"]["calls_fused_in_place"] for p in PROGRAMS.values())


@pytest.mark.parametrize("key", sorted(PROGRAMS))
def test_features_and_info_equal_the_recorded_ones(key):
    program = PROGRAMS[key]
    for backend in ("cpu", "gpu"):
        got = from_stablehlo(program["stablehlo"], backend=backend)
        expected = program[backend]
        differ = {name: (value, got.values[name]) for name, value in expected["values"].items()
                  if not _same(got.values[name], value)}
        assert not differ, (backend, differ)
        # what was recorded (features or info added since are not part of the record)
        info = json.loads(json.dumps(got.info))
        assert {key: info.get(key) for key in expected["info"]} == expected["info"], backend
