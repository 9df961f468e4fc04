"""bench/fit_choice_transfer.py: the stored grid (`bench/results/fit_choice_transfer.json`)
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
    assert record["all_benches"]["compile_seconds"] == pytest.approx(0.260, abs=0.001)


def test_the_library_held_out_score_does_not_rank_the_settings_for_other_libraries(bench):
    """The finding: over 54 settings, the library-held-out error of compile time ranges
    0.198-0.214 and the stored benches' 0.250-0.279, and the two do not rank the settings
    alike (|Spearman| under 0.2); the benches of the corpus's own libraries agree with it
    more (library and unseen programs) than the outside-libraries runs do."""
    records = STORED["settings"]
    held = [r["library_held_out"]["compile_seconds"] for r in records]
    benches = [r["all_benches"]["compile_seconds"] for r in records]
    rho = metrics.spearman(held, benches)
    assert rho == pytest.approx(STORED["correlation"]["all_benches_compile_seconds"])
    assert abs(rho) < 0.2
    assert 0.19 < min(held) and max(held) < 0.22 and 0.24 < min(benches) and max(benches) < 0.29
    corpus_libraries = np.mean([STORED["correlation"][b]
                                for b in ("library_programs", "unseen_programs")])
    outside = np.mean([STORED["correlation"][b] for b in STORED["correlation"]
                       if b.startswith("outside_libraries")])
    assert corpus_libraries > outside + 0.2


def test_the_best_held_out_setting_is_no_better_on_the_benches(bench):
    """Choosing the setting with the lowest library-held-out error would not have improved
    the benches over the shipped setting."""
    best = min(STORED["settings"], key=lambda r: r["library_held_out"]["compile_seconds"])
    shipped = shipped_record(bench)
    assert best["library_held_out"]["compile_seconds"] < shipped["library_held_out"]["compile_seconds"]
    assert best["all_benches"]["compile_seconds"] >= shipped["all_benches"]["compile_seconds"]


def test_the_setting_the_benches_score_best_is_one_lucky_fit(bench):
    """The benches' best setting (0.250 against the shipped 0.260) refitted six times with
    31 random real rows left out scores as the shipped setting does under the same draws:
    the two ranges overlap and their means differ by under 0.005."""
    noise = STORED["noise"]
    best = min(STORED["settings"], key=lambda r: r["all_benches"]["compile_seconds"])
    assert noise["best_on_benches"] == best["setting"] != bench.SHIPPED
    assert best["all_benches"]["compile_seconds"] < 0.252
    assert noise["rows_left_out"] == 31 and len(noise["draws"]) == 6
    shipped = [d["shipped"]["compile_seconds"] for d in noise["draws"]]
    lucky = [d["best_on_benches"]["compile_seconds"] for d in noise["draws"]]
    assert min(lucky) <= max(shipped) and min(shipped) <= max(lucky)
    assert abs(np.mean(lucky) - np.mean(shipped)) < 0.005
    assert np.mean(lucky) > best["all_benches"]["compile_seconds"] + 0.008
