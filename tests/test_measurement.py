"""The measurement harness and sweeps: rows, faults as rows, resume, cache hits."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from costmodel.features import ALL_FEATURES
from costmodel.measure import phases
from costmodel.measure.harness import (
    CacheHitError,
    CompileEvents,
    Placement,
    compile_once,
    optimized_hlo_stats,
)
from costmodel.measure.rows import FEATURE_PREFIX, ShardWriter, make_row
from costmodel.training.measure.runner import run_child
from costmodel.training.measure.sweep import SweepConfig, run_sweep
from costmodel.training.store import dataset

TINY = str(Path(__file__).with_name("tiny_family.py"))
REQUIRED = ("family", "params", "backend", "target", "deviceless", "status", "lower_seconds",
            "compile_seconds", "compile_seconds_spread", "peak_rss_bytes",
            "executable_memory_bytes", "ref_seconds", "jax_version", "jaxlib_version",
            "cpu_model", "cpu_count", "xla_flags", "harness_version", "repeats",
            "hlo_instructions", "hlo_fusions", "hlo_largest_fusion")


def _spec(n=2, **extra):
    return {"family": "tiny_test", "params": {"n": n}, "modules": [TINY], **extra}


@pytest.fixture(scope="module")
def measured_row():
    from costmodel.measure.machine import environment

    result = run_child(_spec(3, max_repeats=2))
    return make_row("tiny_test", {"n": 3}, "cpu", "", result, environment())


def test_row_has_every_field(measured_row):
    row = measured_row
    assert row["status"] == "ok", row.get("message")
    missing = [k for k in REQUIRED if k not in row]
    assert not missing
    assert all(FEATURE_PREFIX + name in row for name in ALL_FEATURES)
    assert row["repeats"] == 2 and len(json.loads(row["compile_seconds_all"])) == 2
    assert 0 < row["compile_seconds"] < 5
    assert 0 < row["ref_seconds"] < 5
    assert row["deviceless"] is False
    # 3 steps of sin + add (+ constant, broadcast) = 12 StableHLO ops
    assert row["f_hlo_ops"] == 12
    assert row["executable_memory_bytes"] >= 2 * 8 * 4  # argument + output


def test_row_carries_phase_seconds_of_its_own_traced_compile(measured_row):
    row = measured_row
    assert row["phase_error"] == ""
    other = {phases.column(p) for p in (*phases.GPU_PHASES, *phases.TPU_PHASES)}
    cpu = [c for c in phases.SECONDS_COLUMNS if c not in other]
    assert all(row[c] > 0 for c in cpu), {c: row[c] for c in cpu}
    assert all(row[c] is None for c in other)
    explained = phases.explained_seconds({p: row[phases.column(p)] for p in phases.PHASES})
    assert explained <= row["phase_xla_seconds"] <= row[phases.WALL_COLUMN]
    # an extra compile: the timed ones stay two, and the traced one is as fast as they are
    assert 0.2 < row[phases.WALL_COLUMN] / row["compile_seconds"] < 5
    assert "layout-assignment" in json.loads(row[phases.PASSES_COLUMN])


def test_rows_without_phase_columns_still_load(tmp_path, measured_row):
    import pandas as pd

    old = {k: v for k, v in measured_row.items() if not k.startswith("phase_")}
    dataset.export_parquet(pd.DataFrame([{**old, "row_id": "old"}]), tmp_path / "old.parquet")
    with ShardWriter(tmp_path / "new.jsonl") as writer:
        writer.append(measured_row)
    with ShardWriter(tmp_path / "untraced.jsonl") as writer:  # phases all missing
        writer.append({**measured_row, "row_id": "untraced",
                       **dict.fromkeys(phases.SECONDS_COLUMNS)})
    rows = dataset.load([tmp_path / "old.parquet", tmp_path / "untraced.jsonl",
                         tmp_path / "new.jsonl"])
    assert len(rows) == 3
    backend = rows["phase_backend_seconds"]
    assert backend.dtype == float and backend.isna().sum() == 2
    new = rows["row_id"] == measured_row["row_id"]
    assert backend[new].item() == measured_row["phase_backend_seconds"]
    dataset.export_parquet(rows, tmp_path / "out" / "all.parquet")
    assert dataset.load(tmp_path / "out")["phase_wall_seconds"].notna().sum() == 1


def test_timeout_is_recorded_as_a_row():
    result = run_child(_spec(), timeout=0.2)
    assert result["status"] == "timeout"
    assert "killed after" in result["message"]


def test_memory_limit_is_recorded_as_oom():
    result = run_child(_spec(), memory_limit=1)
    assert result["status"] == "oom"


def test_unknown_family_is_an_error_row_not_a_crash():
    result = run_child({"family": "no_such_family", "params": {}})
    assert result["status"] == "error"
    assert "no_such_family" in result["message"]


def test_a_program_that_prints_to_stdout_is_measured():
    # the zygote's replies travel on its stdout; a forked child's prints must not
    result = run_child({"family": "tiny_chatty", "params": {"n": 2}, "modules": [TINY],
                        "max_repeats": 1})
    assert result["status"] == "ok"
    assert result["features"]["hlo_ops"] == 8


def test_warm_up_programs_compile_before_the_timed_one(tmp_path):
    marks = tmp_path / "builds"
    warm = [{"family": "tiny_marked", "params": {"path": str(marks), "tag": f"warm{i}"}}
            for i in range(2)]
    result = run_child({"family": "tiny_marked", "params": {"path": str(marks), "tag": "timed"},
                        "modules": [TINY], "max_repeats": 2, "trace_phases": False,
                        "warmup": warm}, use_zygote=False)
    assert result["status"] == "ok" and result["repeats"] == 2
    # each warm-up built once, then the timed program once per timed compile
    assert marks.read_text().split() == ["warm0", "warm1", "timed", "timed"]


def test_plain_subprocess_runner_matches_zygote_fields():
    a = run_child(_spec(1, max_repeats=1), use_zygote=False)
    assert a["status"] == "ok"
    assert a["features"]["hlo_ops"] == 4


def test_recompiling_the_same_function_object_is_flagged_as_cache_hit():
    events = CompileEvents()
    x = jax.ShapeDtypeStruct((4,), jnp.float32)

    def same_fn(v):
        return jnp.cos(v) * 3.0

    def build():
        return same_fn, (x,)

    place = Placement("cpu", "")
    compile_once(build, place, events)
    with pytest.raises(CacheHitError, match="saw 0"):
        compile_once(build, place, events)


def test_sweep_resume_neither_loses_nor_duplicates(tmp_path):
    config = SweepConfig(families=("tiny_test",), out=str(tmp_path), modules=(TINY,),
                         max_repeats=1, progress=False, limit=2)
    first = run_sweep(config)
    assert first.measured == 2
    config.limit = None
    second = run_sweep(config)
    assert second.skipped == 2 and second.measured == 2
    third = run_sweep(config)
    assert third.planned == 0
    rows = dataset.load(tmp_path)
    assert len(rows) == 4
    assert sorted(json.loads(p)["n"] for p in rows["params"]) == [1, 2, 3, 4]


def test_torn_last_line_from_a_kill_is_skipped(tmp_path):
    shard = tmp_path / "rows.jsonl"
    with ShardWriter(shard) as writer:
        writer.append({"key": "a", "row_id": "1", "status": "ok"})
    with open(shard, "a") as handle:
        handle.write('{"key": "b", "row_id": "2", "sta')  # killed mid-write
    assert dataset.done_keys([tmp_path]) == {"a"}
    assert list(dataset.load(tmp_path)["key"]) == ["a"]


def test_optimized_hlo_stats_counts_fusions():
    text = """HloModule m
fused_computation {
  p0 = f32[4] parameter(0)
  s = f32[4] sine(p0)
  ROOT a = f32[4] add(s, p0)
}
ENTRY main {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x), kind=kLoop, calls=fused_computation
}
"""
    stats = optimized_hlo_stats(text)
    assert stats == {"hlo_instructions": 5, "hlo_fusions": 1, "hlo_largest_fusion": 3}


def test_sweep_runs_on_a_dask_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        config = SweepConfig(families=("tiny_test",), out=str(tmp_path), modules=(TINY,),
                             max_repeats=1, progress=False, dask_address=cluster.scheduler_address)
        summary = run_sweep(config)
    assert summary.measured == 4
    assert summary.statuses["ok"] == 4
    assert len(dataset.load(tmp_path)) == 4
