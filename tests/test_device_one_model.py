"""The device correction's chip model: the recipe fitted on sweep rows and chip rows
together with the host as an input, held out by library, blended and saved."""

from __future__ import annotations

import io

import numpy as np
import pytest
from test_device_correction import _pairs

from costmodel.models.device_correction import CHIP_HOST_INPUT, DeviceCorrection
from costmodel.training.fitting import device_correction as dc
from costmodel.training.fitting import device_one_model as one


@pytest.fixture(scope="module")
def chip_pairs():
    rows, predictions, chip, conv = _pairs()
    rows["backend"], rows["target"] = "tpu", "v5e"
    return rows, dc.pairs(rows, predictions, chip), conv


def test_held_out_the_chip_model_learns_the_hosts_ratio_from_its_input(chip_pairs):
    rows, p, conv = chip_pairs
    X, y, ref, groups, weight, lib = one.training_set(rows, p.frame)
    assert len(y) == 2 * 72  # 72 sweep rows and the 72 programs compiled on the chip
    assert set(X[CHIP_HOST_INPUT]) == {0.0, 1.0} and np.isnan(ref[72:]).all()
    assert weight[72:] == pytest.approx(weight[:72] / 3 * one.CHIP_ROW_WEIGHT)
    held = one.held_out_log_seconds(rows, p.frame)
    device = np.log(p.frame["device"].to_numpy(float))
    # the chip's host is 3x faster on the convolution programs, 1.5x slower on the rest
    assert np.median(np.abs(held - device)) < np.log(1.25)
    by_conv = conv[[int(k[1:]) for k in p.frame.index]]
    ratio = held - np.log(p.frame["base"].to_numpy(float))
    assert np.median(ratio[by_conv]) < np.log(0.6) < np.log(1.2) < np.median(ratio[~by_conv])


def test_a_chip_model_is_blended_saved_and_read_back(chip_pairs):
    rows, p, _ = chip_pairs
    model = one.fit_chip_model(*one.training_set(rows, p.frame))
    plain = dc.fit(p, {"programs": len(p.frame)})
    blended = dc.fit(p, {"programs": len(p.frame)}, chip_model=model)
    assert blended.chip_model_weight == one.WEIGHT and plain.chip_model is None
    assert blended.about["chip_model_weight"] == one.WEIGHT
    assert "chip_model_weight" not in plain.about
    from costmodel.training.fitting.device_card import card_section

    section = card_section(dc.score(p), blended.about)
    assert "(weight 0.5) with a chip model" in section
    assert "chip model" not in card_section(dc.score(p), plain.about)
    inputs = p.frame.assign(chips=1.0, sharded_args=0.0, sharded_input_share=0.0)
    inputs = inputs.to_dict("records")
    base = p.frame["base"].to_numpy(float)
    chip = np.log(model.predict([{**r, CHIP_HOST_INPUT: 1.0} for r in inputs])[
        "compile_seconds"]["point"])
    expected = (1 - one.WEIGHT) * plain.log_factor(inputs, base) + one.WEIGHT * (chip - np.log(base))
    assert blended.log_factor(inputs, base) == pytest.approx(expected)
    handle = io.BytesIO()
    blended.save(handle)
    handle.seek(0)
    back = DeviceCorrection.load(handle)
    assert back.chip_model_weight == one.WEIGHT
    assert back.log_factor(inputs, base) == pytest.approx(expected)
