"""bench/archive/fit_choice_transfer.py: the stored grid (`bench/results/fit_choice_transfer.json`)
of the trees' settings, each scored with the corpus's libraries held out and on the stored
benches, checked against the shipped model and against itself."""

import json
from pathlib import Path

import numpy as np
import pytest

from costmodel.models import load_default
from costmodel.training.evaluation import metrics
from costmodel.training.evaluation.outside import current_results

ROOT = Path(__file__).resolve().parents[1]
STORED = json.loads((ROOT / "bench/results/fit_choice_transfer.json").read_text())


@pytest.fixture(scope="module")
def bench():
    from conftest import bench_module

    return bench_module("fit_choice_transfer")


def shipped_record(bench) -> dict:
    (record,) = [r for r in STORED["settings"] if r["setting"] == bench.SHIPPED]
    return record


def test_the_grid_holds_the_shipped_setting_and_scores_it_as_the_shipped_model(bench):
    """The shipped setting's fit on all rows scores every bench as the shipped model does
    (so the other settings differ from it only in the trees)."""
    assert len(STORED["settings"]) == len(bench.settings()) == 54
    scores = bench.added_rows_effect.bench_scores(load_default("cpu"),
                                                 current_results(ROOT / "bench/results", "cpu"))
    record = shipped_record(bench)
    for name, entry in scores["benches"].items():
        assert record["benches"][name] == pytest.approx(entry["mean_abs_log"], abs=1e-3)
    assert record["all_benches"]["compile_seconds"] == pytest.approx(0.242, abs=0.001)


def test_the_library_held_out_score_barely_ranks_the_settings_for_other_libraries(bench):
    """Over 54 settings (schema 17), the library-held-out error of compile time ranges
    0.189-0.209 and the stored benches' 0.231-0.257, and the two rank the settings only a
    little alike (Spearman +0.26; schema 16: +0.03, when the benches of the corpus's own
    libraries agreed with it more than the outside runs did; now they do not)."""
    records = STORED["settings"]
    held = [r["library_held_out"]["compile_seconds"] for r in records]
    benches = [r["all_benches"]["compile_seconds"] for r in records]
    rho = metrics.spearman(held, benches)
    assert rho == pytest.approx(STORED["correlation"]["all_benches_compile_seconds"])
    assert 0.2 < rho < 0.3
    assert 0.185 < min(held) and max(held) < 0.21 and 0.23 < min(benches) and max(benches) < 0.26
    corpus_libraries = np.mean([STORED["correlation"][b]
                                for b in ("library_programs", "unseen_programs")])
    outside = np.mean([STORED["correlation"][b] for b in STORED["correlation"]
                       if b.startswith("outside_libraries")])
    assert corpus_libraries < outside


def test_the_best_held_out_setting_is_no_better_on_the_benches(bench):
    """Choosing the setting with the lowest library-held-out error would not have improved
    the benches over the shipped setting (0.249 against 0.242)."""
    best = min(STORED["settings"], key=lambda r: r["library_held_out"]["compile_seconds"])
    shipped = shipped_record(bench)
    assert best["library_held_out"]["compile_seconds"] < shipped["library_held_out"]["compile_seconds"]
    assert best["all_benches"]["compile_seconds"] >= shipped["all_benches"]["compile_seconds"]


def test_the_setting_the_benches_score_best_stays_a_little_better_under_noise(bench):
    """The benches' best setting (leaves of 20 rows and 50 rounds in place of 10 and 100:
    0.231 against the shipped 0.242) refitted six times with 31 random real rows left out scores 0.225-0.239
    (mean 0.232), the shipped setting 0.231-0.248 (mean 0.240): the ranges overlap, and the
    gap holds on average. Schema 16: 0.250 against 0.260 on all rows, but a mean gap under
    0.005 over the draws (one lucky fit). A lead, not shipped: it was chosen on the benches."""
    noise = STORED["noise"]
    best = min(STORED["settings"], key=lambda r: r["all_benches"]["compile_seconds"])
    assert noise["best_on_benches"] == best["setting"] != bench.SHIPPED
    assert best["all_benches"]["compile_seconds"] < 0.232
    assert noise["rows_left_out"] == 31 and len(noise["draws"]) == 6
    shipped = [d["shipped"]["compile_seconds"] for d in noise["draws"]]
    lucky = [d["best_on_benches"]["compile_seconds"] for d in noise["draws"]]
    assert min(lucky) <= max(shipped) and min(shipped) <= max(lucky)
    assert 0.005 < np.mean(shipped) - np.mean(lucky) < 0.012
