"""The TPU backend's names and where its programs compile (no TPU or libtpu needed)."""

from __future__ import annotations

import pytest

from costmodel.cli.common import UsageError, backend_and_target
from costmodel.features import normalize_target
from costmodel.features.environment import UnknownTargetError
from costmodel.training.measure.tpu_target import (
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
