"""The shipped models on programs in no corpus family (stored bench measurements).

`bench/evaluations/unseen_programs.py`, `bench/evaluations/library_programs.py` and
`bench/evaluations/outside_libraries.py` keep each program's model inputs next to its
measured compile seconds, so a retrained default model is scored here on the same programs
without compiling them (or installing the libraries).
"""

from pathlib import Path

import numpy as np
import pytest

from costmodel.models import load_default
from costmodel.training.evaluation import outside

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
BENCHES = {"unseen_programs": ("cpu", ""), "library_programs": ("cpu", ""),
           "unseen_programs_h100": ("gpu", "h100"), "library_programs_h100": ("gpu", "h100"),
           "outside_libraries": ("cpu", ""), "outside_libraries_h100": ("gpu", "h100")}


@pytest.mark.parametrize("bench", BENCHES)
def test_default_model_predicts_programs_outside_the_corpus(bench):
    backend, target = BENCHES[bench]
    data = outside.stored_results(RESULTS, backend, target)[bench]
    artifact = load_default(backend, target)
    scores = outside.score(artifact, data)
    assert scores["n"] >= 17
    # the bar a shipped model must keep on each bench (its figures: `tests/model_figures.json`)
    assert scores["median_fold"] <= 1.3
    assert np.mean(scores["folds"] <= 2.5) >= 0.9


def test_stored_inputs_of_another_schema_are_refused():
    data = dict(outside.stored_results(RESULTS, "cpu")["unseen_programs"], schema_version=-1)
    with pytest.raises(ValueError, match="re-run the bench"):
        outside.score(load_default("cpu"), data)


def test_model_card_section_scores_each_bench_of_the_backend():
    lines = outside.card_section(load_default("gpu", "h100"), RESULTS, "gpu", "h100")
    rows = [line for line in lines if line.startswith("| library_programs_h100 |")]
    assert len(rows) == 2  # compile time, then host memory (`bench/evaluations/bench_memory.py`)
    assert all("17 (2 did not lower)" in row for row in rows)
    # each row's median fold is the bench's score by this model: compile time scaled as
    # `costmodel calibrate` scales it, host memory unscaled on bytes + 1 MiB
    data = outside.stored_results(RESULTS, "gpu", "h100")["library_programs_h100"]
    model = load_default("gpu", "h100")
    time = outside.score(model, data)["median_fold"]
    memory = outside.score(model, data, "peak_rss_bytes")["median_fold"]
    assert rows[0].split("|")[3].strip() == f"{time:.2f}"
    assert rows[1].split("|")[3].strip() == f"{memory:.2f}"
    assert lines.index(rows[0]) < lines.index(next(
        line for line in lines if line.startswith("Peak host memory"))) < lines.index(rows[1])
    assert not any("| unseen_programs |" in line for line in lines)  # CPU results stay out


def test_a_bench_run_scales_by_the_scored_models_own_reference():
    from types import SimpleNamespace

    def model(reference, power):
        return SimpleNamespace(manifest={"reference_seconds": reference},
                               predictor=SimpleNamespace(reference_power=power))

    # what calibrate applies: the run's reference over the model's, to the model's power
    assert outside.speed_scale(model(0.10, 0.8), 0.12) == pytest.approx(1.2 ** 0.8)
    # a model trained where the reference ran slower gets a smaller factor for the same run
    assert outside.speed_scale(model(0.15, 0.8), 0.12) == pytest.approx(0.8 ** 0.8)
    assert outside.speed_scale(model(0.10, 0.0), 0.12) == pytest.approx(1.2)  # no power
    assert outside.speed_scale(model(None, 0.8), 0.12) == 1.0


@pytest.mark.parametrize("backend, target", [("cpu", ""), ("gpu", "h100")])
def test_shipped_host_memory_held_out_by_library_beats_the_power_law(backend, target):
    """A shipped model's host memory, with each corpus library held out (its manifest), is
    well under the power law fitted on the same folds."""
    metrics = load_default(backend, target).manifest["metrics"]["leave_library_out"]
    scores = next(iter(metrics.values()))["peak_rss_bytes"]
    assert scores["costmodel"]["median_fold"] < 1.3
    assert scores["power_law"]["median_fold"] > 1.45
