"""bench/evaluations/bench_memory.py on its committed runs: the library and unseen benches' programs
measured once more, each in a fresh process, for the host memory their interleaved timing
cannot give; the stored bench results carry it, and the widening of the host-memory
interval is fitted on them too."""

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench/results"
# target -> (measured run, the bench results it fills)
RUNS = {"": (ROOT / "bench/data/bench_memory",
             ("library_programs.json", "unseen_programs.json")),
        "h100": (ROOT / "bench/data/bench_memory_h100",
                 ("library_programs_h100.json", "unseen_programs_h100.json"))}


@pytest.fixture(scope="module")
def bench():
    from conftest import bench_module

    return bench_module("bench_memory")


@pytest.mark.parametrize("target", RUNS)
def test_every_stored_program_has_its_fresh_process_memory(bench, target):
    run, results = RUNS[target]
    measured = bench.measured_memory(run, target)
    for name in results:
        stored = json.loads((RESULTS / name).read_text())
        assert stored["peak_rss_measured"]["cpu_model"] == "AMD EPYC"
        for row in stored["results"]:
            assert row["measured_peak_rss_bytes"] == measured[row["program"]]["peak_rss_bytes"]


def test_merge_writes_the_memory_and_scores_it_against_the_power_law(bench, tmp_path):
    run, results = RUNS[""]
    copy = tmp_path / "library_programs.json"
    stored = json.loads((RESULTS / results[0]).read_text())
    for row in stored["results"]:
        row.pop("measured_peak_rss_bytes")
    copy.write_text(json.dumps(stored))
    report = bench.merge(run, copy)
    merged = json.loads(copy.read_text())["results"]
    assert [row["measured_peak_rss_bytes"] for row in merged] == [
        row["measured_peak_rss_bytes"] for row in json.loads((RESULTS / results[0]).read_text())[
            "results"]]
    assert report["programs"] == 19
    # the shipped model's host memory on these 19 programs against a power law in op
    # count fitted on the 18 others each time (1.265 before host memory's ceiling from
    # compile time, 1.249 with the ceiling on its line)
    assert report["model_scores"]["median_fold"] == pytest.approx(1.220, abs=1e-3)
    assert report["power_law_leave_one_out"]["median_fold"] == pytest.approx(1.627, abs=1e-3)


def test_merge_refuses_an_unmeasured_program_and_another_target(bench, tmp_path):
    run, results = RUNS[""]
    stored = json.loads((RESULTS / results[0]).read_text())
    stored["results"][0]["program"] = "a program nobody measured"
    copy = tmp_path / "result.json"
    copy.write_text(json.dumps(stored))
    with pytest.raises(SystemExit, match="not measured in .*: a program nobody measured"):
        bench.merge(run, copy)
    shutil.copy(RESULTS / results[0], copy)
    with pytest.raises(SystemExit, match="measured for cpu"):
        bench.merge(run, copy, target="h100")
