"""FFT programs on the chip (`bench/evaluations/tpu_thin_conv.py --family spectral`): twelve
`spectral` programs off the family's grid (lengths between its powers of two, lengths with
odd factors, a field beyond its largest), compiled on a TPU v5e, against the shipped TPU
model's chip prediction (before the family joined its rows: 3.4x under, covering 3 of 12)."""

import json
from pathlib import Path

import pytest
from conftest import bench_json

from costmodel.features.stablehlo.ops import odd_part

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "bench/data/tpu_spectral/check1.jsonl"


def test_fft_programs_off_the_grid_are_predicted_within_a_fold_and_a_half():
    got = bench_json("tpu_thin_conv", "score", "--check", "spectral", str(CHECK))
    assert len(got["programs"]) == 12
    chip = {json.dumps(p["params"], sort_keys=True): p["chip_s"] for p in got["programs"]}
    assert min(chip.values()) == pytest.approx(0.53, abs=0.01)
    # an FFT of 6000 points (a 3000-sample convolution; not a power of two) costs the
    # compiler more than one of 65536 (3.8 s) and 11x one of 4096
    assert chip['{"kind": "conv1d", "n": 3000, "transforms": 1}'] == pytest.approx(6.11, abs=0.01)
    assert chip['{"kind": "conv1d", "n": 2048, "transforms": 2}'] == pytest.approx(0.56, abs=0.01)
    assert chip['{"kind": "conv1d", "n": 32768, "transforms": 1}'] == pytest.approx(3.81, abs=0.01)
    assert got["median_fold"] == pytest.approx(1.47, abs=0.01)
    assert got["measured_over_predicted"] == pytest.approx(0.81, abs=0.01)
    # 10 of 12 inside the interval as the held-out residuals set it; the widening for
    # libraries no fit has seen (`device_widening`) takes in one more
    assert got["covered"] == pytest.approx(11 / 12)
    stored = json.loads((ROOT / "bench/results/tpu_spectral.json").read_text())
    assert stored["median_fold"] == pytest.approx(got["median_fold"], abs=1e-9)


def test_before_the_family_the_model_read_fft_programs_three_fold_under():
    before = json.loads((ROOT / "bench/results/tpu_spectral_before.json").read_text())
    assert before["model"] == "tpu-v5e-c9ad912c-d5f813+chip-58473d"
    assert before["median_fold"] == pytest.approx(3.38, abs=0.01)
    assert before["measured_over_predicted"] == pytest.approx(3.65, abs=0.01)
    assert before["covered"] == pytest.approx(3 / 12)


def test_the_chip_rows_of_the_grid_train_the_correction_and_the_check_rows_do_not():
    grid = [json.loads(line) for line in (ROOT / "bench/data/tpu_device/spectral1.jsonl")
            .read_text().splitlines()]
    check = [json.loads(line) for line in CHECK.read_text().splitlines()]
    keys = {row["key"] for row in grid if "key" in row and row["key"].startswith("spectral|")}
    assert len(keys) == 20
    assert not keys & {row["key"] for row in check if "key" in row}
    assert all(row["status"] == "ok" for row in grid + check if "key" in row)


def test_a_transforms_compile_on_the_chip_follows_the_odd_part_of_its_length():
    got = bench_json("tpu_thin_conv", "score", "--check", "fft_lengths",
                     str(ROOT / "bench/data/tpu_spectral/lengths1.jsonl"))
    assert len(got["programs"]) == 11
    chip = {2 * p["params"]["n"]: p["chip_s"] for p in got["programs"]}  # transform points
    cheap = [points for points in chip if odd_part(points) < 200]
    dear = [points for points in chip if odd_part(points) > 10000]
    assert sorted(dear) == [20014, 22050, 22562]  # 2 x a prime, 2 x 3^2 5^2 7^2, 2 x 29 x 389
    assert max(chip[p] for p in cheap) == pytest.approx(2.43, abs=0.01)  # 32768 points
    assert min(chip[p] for p in dear) == pytest.approx(40.83, abs=0.01)
    assert chip[6000] == pytest.approx(6.84, abs=0.01)  # odd part 375
    # the model cannot tell 22528 (2^11 x 11) from 22562: both predicted alike
    predicted = {2 * p["params"]["n"]: p["predicted_s"] for p in got["programs"]}
    assert predicted[22562] / predicted[22528] == pytest.approx(1.0, abs=0.02)
    assert got["measured_over_predicted"] == pytest.approx(1.96, abs=0.01)
    stored = json.loads((ROOT / "bench/results/tpu_fft_lengths.json").read_text())
    assert stored["median_fold"] == pytest.approx(got["median_fold"], abs=1e-9)
