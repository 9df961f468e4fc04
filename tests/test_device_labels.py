"""Chip labels at one process state (`device_labels`): a compile's position in its process
and its call are taken out of each program's label."""

from __future__ import annotations

import json

import numpy as np
import pytest

from costmodel.training.fitting import device_labels as dl


def _call(path, order, seconds, slow_first, call_factor):
    """A device-row file: one process compiling `order`'s programs after the reference
    program each (two compiles a row), the first five rows `slow_first` times slower."""
    lines = [json.dumps({"environment": {"device_kind": "TPU v5 lite"}})]
    for i, k in enumerate(order):
        s = seconds[k] * call_factor * (slow_first if i < 5 else 1.0)
        lines.append(json.dumps({"key": f"k{k}", "ref_device_s": [0.08],
                                 "device_s": [s], "status": "ok"}))
    lines.append(json.dumps({"key": "kx", "status": "error", "message": "not a compile"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_programs_label_leaves_out_its_place_in_the_process_and_its_call(tmp_path):
    rng = np.random.default_rng(0)
    seconds = np.exp(rng.normal(0, 1, 40))
    a = _call(tmp_path / "a.jsonl", range(40), seconds, slow_first=2.0, call_factor=1.0)
    b = _call(tmp_path / "b.jsonl", range(39, -1, -1), seconds, slow_first=2.0, call_factor=1.3)
    obs = dl.observations([a, b])
    assert len(obs) == 80 and [o.position for o in obs[:3]] == [0, 2, 4]
    labels = dl.fit_labels(obs)
    ratio = labels.seconds[[f"k{i}" for i in range(40)]].to_numpy() / seconds
    # one scale for every program, though each was slow in one call's first five rows
    assert ratio.max() / ratio.min() == pytest.approx(1.0, abs=0.01)
    # positions 0-2 and 4-8 hold the slow rows; 10 onward none
    f = labels.position_factor
    assert f[0] / f[2] == pytest.approx(2.0, rel=0.01) and f[1] / f[2] == pytest.approx(2.0, rel=0.01)
    assert f[2] == pytest.approx(f[3], rel=0.01)
    calls = sorted(labels.call_factor.values())
    assert calls[1] / calls[0] == pytest.approx(1.3, rel=0.03)
    assert labels.residual_fold == pytest.approx(1.0, abs=0.01)


def test_labels_replace_the_chip_seconds_and_keep_the_raw_median(tmp_path):
    import pandas as pd

    from costmodel.training.fitting.device_correction import Pairs

    p = Pairs(pd.DataFrame({"device": [2.0, 3.0]}, index=["k0", "unlabelled"]))
    labels = dl.Labels(pd.Series([1.5], index=["k0"]), np.ones(8), {}, 1.0)
    out = dl.with_labels(p, labels).frame
    assert out["device"].tolist() == [1.5, 3.0] and out["device_raw"].tolist() == [2.0, 3.0]


def test_no_observation_is_an_error():
    with pytest.raises(ValueError, match="no chip observation"):
        dl.fit_labels([])


def test_programs_seen_once_cannot_separate_position_from_program(tmp_path):
    seconds = np.ones(40)
    once = _call(tmp_path / "a.jsonl", range(40), seconds, slow_first=2.0, call_factor=1.0)
    with pytest.raises(ValueError, match="0 programs compiled in two processes"):
        dl.fit_labels(dl.observations([once]))
    # a second process repeating 19 of them is still too few
    again = _call(tmp_path / "b.jsonl", range(19), seconds, slow_first=1.0, call_factor=1.0)
    with pytest.raises(ValueError, match="19 programs"):
        dl.fit_labels(dl.observations([once, again]))
