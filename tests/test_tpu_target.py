"""The TPU backend's names and where its programs compile (no TPU or libtpu needed)."""

from __future__ import annotations

import pytest

from costmodel.cli.common import UsageError, backend_and_target
from costmodel.features import normalize_target
from costmodel.features.environment import UnknownTargetError
from costmodel.measure.tpu_target import (
    SMALLEST_TOPOLOGY,
    TpuTargetUnavailable,
    chip_of,
)


def test_tpu_defaults_to_one_v5e_chip():
    assert normalize_target("TPU", None) == ("tpu", "v5e")
    assert normalize_target("tpu", "v6e") == ("tpu", "v6e")


def test_an_unknown_tpu_chip_names_the_known_ones():
    with pytest.raises(UnknownTargetError, match="known targets: v5e, v5p, v6e"):
        normalize_target("tpu", "v4")


def test_a_target_alone_implies_the_backend_it_belongs_to():
    assert backend_and_target(None, "v5e") == ("tpu", "v5e")
    assert backend_and_target(None, "a100") == ("gpu", "a100")
    with pytest.raises(UsageError, match="v5e is a TPU target: use it with --backend tpu"):
        backend_and_target("cpu", "v5e")


def test_chip_of_a_topology():
    assert chip_of("v5e:4x4") == "v5e" and chip_of("v5p") == "v5p"
    assert SMALLEST_TOPOLOGY["v5e"] == "v5e:2x2"  # v5e:1x1 is refused deviceless
    with pytest.raises(TpuTargetUnavailable, match="unknown TPU chip 'v4'"):
        chip_of("v4:2x2x1")


def test_a_tpu_host_predicts_for_a_tpu(monkeypatch):
    import jax

    from costmodel._lowering import default_backend

    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert default_backend() == "tpu"  # not the CPU model's answer dressed as the TPU's



def _tpu_row(family: str, params: dict):
    """The shipped TPU dataset's row of one program (deviceless, measured by the sweep)."""
    import json
    from pathlib import Path

    import pandas as pd

    rows = pd.read_parquet(Path(__file__).resolve().parents[1] / "training/data/tpu-v5e/rows.parquet")
    return rows[rows["key"] == f"{family}|{json.dumps(params, sort_keys=True)}|tpu|v5e"].iloc[0]


def test_float64_on_a_tpu_is_predicted_far_slower_than_on_the_cpu():
    """XLA:TPU emulates float64: this program compiled in 8.7 s deviceless here for a v5e
    and in 28 s on the chip (its HLO passes, slow on the chip's host), against 0.05 s for
    the CPU. The TPU model answers for the chip's host and must say so, never the CPU's
    number."""
    import json
    from pathlib import Path

    import jax

    import costmodel
    from costmodel.training import corpus

    params = {"grad": False, "kind": "transcendental", "stages": 2, "width": 16}
    key = f"float64|{json.dumps(params, sort_keys=True)}|tpu|v5e"
    chip = [s for path in sorted(Path(__file__).resolve().parents[1].glob(
                "bench/data/tpu_device/call*.jsonl"))
            for r in map(json.loads, path.read_text().splitlines())
            if r.get("key") == key for s in r["device_s"]]
    measured = _tpu_row("float64", params)["compile_seconds"]
    spec = corpus.get_family("float64")
    with jax.enable_x64(True):
        fn, args = spec.build(**params)
        stage = costmodel.lower(fn, *args)
        tpu, cpu = stage.predict(backend="tpu"), stage.predict(backend="cpu")
    assert (tpu.backend, tpu.target) == ("tpu", "v5e")
    assert 5 < measured < 15 and chip and 20 < min(chip) < 40
    # the chip model has few float64 programs: 17.3 s predicted for 27.8 s on the chip
    assert min(chip) / 2 < tpu.compile_seconds < max(chip) * 2
    assert tpu.compile_seconds > 100 * cpu.compile_seconds
