"""Sweeps on a dask cluster: one compile at a time per worker, GPU work on GPU workers,
the budget bounding what is in flight, and reference timings as clean as one process's."""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from costmodel.training.measure.cluster import (
    ClusterRefused,
    ConcurrentCompilesWarning,
    Worker,
    admit,
    split_cores,
)
from costmodel.training.measure.dask_pool import DaskPool
from costmodel.training.measure.sweep import SweepConfig, plan, run_sweep
from costmodel.training.store import dataset

distributed = pytest.importorskip("distributed")

TINY = str(Path(__file__).with_name("tiny_family.py"))
LOOP = str(Path(__file__).with_name("reference_loop.py"))


def in_process_cluster(**kwargs):
    return distributed.LocalCluster(processes=False, dashboard_address=":0", **kwargs)


# admission rules on declared workers -------------------------------------------------
def test_a_worker_with_threads_and_no_compile_resource_is_refused():
    workers = [Worker("tcp://a:1", 1, {}), Worker("tcp://b:1", 2, {})]
    with pytest.raises(ClusterRefused, match=r"tcp://b:1 \(2 at once\).*--resources compile=1"):
        admit(workers, needs_gpu=False)


def test_allow_concurrent_admits_it_with_a_warning():
    workers = [Worker("tcp://b:1", 2, {})]
    with pytest.warns(ConcurrentCompilesWarning, match="tcp://b:1"):
        admission = admit(workers, needs_gpu=False, allow_concurrent=True)
    assert admission.slots == 2 and admission.resources == {}


def test_a_compile_resource_above_one_is_concurrent_too():
    with pytest.raises(ClusterRefused, match=r"tcp://a:1 \(3 at once\)"):
        admit([Worker("tcp://a:1", 4, {"compile": 3})], needs_gpu=False)


def test_the_compile_resource_holds_a_many_thread_worker_to_one_measurement():
    workers = [Worker("tcp://a:1", 4, {"compile": 1}), Worker("tcp://b:1", 8, {"compile": 1})]
    admission = admit(workers, needs_gpu=False)
    assert admission.resources == {"compile": 1}
    assert admission.slots == 2


def test_one_thread_workers_need_no_resource():
    admission = admit([Worker("tcp://a:1", 1, {}), Worker("tcp://b:1", 1, {})], needs_gpu=False)
    assert admission.resources == {} and admission.slots == 2


def test_on_a_mixed_cluster_workers_without_the_resource_are_named_idle():
    workers = [Worker("tcp://a:1", 4, {"compile": 1}), Worker("tcp://b:1", 1, {})]
    with pytest.warns(UserWarning, match=r"no measurements: tcp://b:1"):
        admission = admit(workers, needs_gpu=False)
    assert admission.workers == ("tcp://a:1",) and admission.slots == 1


def test_gpu_work_goes_only_to_workers_that_declare_a_gpu():
    workers = [Worker("tcp://cpu:1", 1, {"compile": 1}),
               Worker("tcp://gpu:1", 8, {"compile": 1, "gpu": 1})]
    admission = admit(workers, needs_gpu=True)
    assert admission.resources == {"compile": 1, "gpu": 1}
    assert admission.workers == ("tcp://gpu:1",)
    assert admit(workers, needs_gpu=False).slots == 2


def test_gpu_work_without_a_gpu_worker_is_refused():
    with pytest.raises(ClusterRefused, match=r"none of the 1 dask workers declares the `gpu`"):
        admit([Worker("tcp://cpu:1", 1, {"compile": 1})], needs_gpu=True)


def test_workers_sharing_a_machines_cpus_get_a_slice_each():
    places = {"tcp://a:1": ("h", (0, 1, 2, 3)), "tcp://b:1": ("h", (0, 1, 2, 3)),
              "tcp://c:1": ("h", (4, 5)), "tcp://d:1": ("g", (0, 1, 2, 3))}
    assert split_cores(places) == {"tcp://a:1": (0, 1), "tcp://b:1": (2, 3)}


def test_workers_on_disjoint_cpus_keep_them():  # two batch jobs on one node
    assert split_cores({"tcp://a:1": ("h", (0, 1)), "tcp://b:1": ("h", (2, 3))}) == {}


def test_more_workers_than_cpus_on_a_machine_is_refused():
    places = {f"tcp://{name}:1": ("h", (0, 1)) for name in "abc"}
    with pytest.raises(ClusterRefused, match=r"3 dask workers on h share 2 CPUs"):
        split_cores(places)
    with pytest.warns(ConcurrentCompilesWarning, match="share 2 CPUs"):
        assert split_cores(places, allow_concurrent=True) == {}


# the same rules on a real (in-process) cluster ----------------------------------------
def test_a_sweep_on_two_thread_workers_is_refused_before_measuring(tmp_path):
    with in_process_cluster(n_workers=1, threads_per_worker=2) as cluster:
        config = SweepConfig(families=("tiny_test",), out=str(tmp_path), modules=(TINY,),
                             progress=False, dask_address=cluster.scheduler_address)
        with pytest.raises(ClusterRefused, match=r"\(2 at once\)"):
            run_sweep(config)
    assert not list(tmp_path.glob("*.jsonl"))


def test_the_command_line_refuses_such_a_cluster_in_one_line(tmp_path, capsys):
    from costmodel.cli import main

    with in_process_cluster(n_workers=1, threads_per_worker=2) as cluster:
        code = main(["sweep", "--families", "tiny_test", "--module", TINY, "--json",
                     "--out", str(tmp_path), "--dask", cluster.scheduler_address])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("costmodel sweep: dask workers would measure several compiles")
    assert err.count("\n") == 1 and "--allow-concurrent" in err


def test_measurements_of_workers_on_one_machine_run_on_their_own_cpus(tmp_path):
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        pytest.skip("needs two CPUs to split")
    with in_process_cluster(n_workers=2, threads_per_worker=1) as cluster:
        config = SweepConfig(families=("tiny_test",), out=str(tmp_path), modules=(TINY,),
                             max_repeats=1, progress=False,
                             dask_address=cluster.scheduler_address)
        assert run_sweep(config).statuses["ok"] == 4
    rows = dataset.load(tmp_path)
    assert set(rows["cpu_count"]) == {cpus // 2}
    assert set(rows["f_host_cpu_count"]) == {cpus // 2}  # what XLA saw in the measurement


def test_the_scheduler_routes_gpu_work_to_the_gpu_worker_one_at_a_time():
    worker = distributed.Worker
    spec = {name: {"cls": worker, "options": {"nthreads": 4, "resources": resources}}
            for name, resources in (("cpu", {"compile": 1}), ("gpu", {"compile": 1, "gpu": 1}))}
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": ":0"}}
    with distributed.SpecCluster(workers=spec, scheduler=scheduler) as cluster:
        pool = DaskPool(cluster.scheduler_address, needs_gpu=True)
        try:
            assert pool.slots() == 1
            stamps = [f.result(timeout=30) for f in [pool.submit(_stamp, 0.3) for _ in range(3)]]
        finally:
            pool.close()
    assert {name for name, _, _ in stamps} == {"gpu"}
    spans = sorted((begin, end) for _, begin, end in stamps)
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:]))


def _stamp(seconds: float, cpus=None) -> tuple[str, float, float]:
    assert cpus is None  # alone among the admitted workers: its CPUs are not split
    begin = time.monotonic()
    time.sleep(seconds)
    return distributed.get_worker().name, begin, time.monotonic()


# the budget ------------------------------------------------------------------------
def test_the_budget_kills_a_measurement_in_flight_and_writes_no_row(tmp_path):
    config = SweepConfig(families=("tiny_slow",), out=str(tmp_path), modules=(TINY,),
                         budget_minutes=0.1, progress=False)  # 6 s; the program takes 60
    started = time.monotonic()
    summary = run_sweep(config)
    assert time.monotonic() - started < 30
    assert summary.cut_by_budget == 1 and summary.measured == 0
    assert not any(dataset.read_jsonl(f) for f in tmp_path.glob("*.jsonl"))
    assert len(plan(config)[0]) == 1  # the next run measures it


# timings ---------------------------------------------------------------------------
def side_by_side_slowdown(cpus: list[int], compiles: int = 15) -> float:
    """How much slower two bare reference-compile loops run, each on half of `cpus`, than
    one loop on all of them: what this machine does to two compiles at once on the
    slices a 2-worker sweep pins them to, against one process with the whole machine (a
    one-process sweep). 1.0 only where a compile gains nothing from more cores."""
    def loops(slices: list[list[int]]) -> list[float]:
        procs = [subprocess.Popen([sys.executable, LOOP, str(compiles),
                                   ",".join(map(str, on))], stdout=subprocess.PIPE, text=True)
                 for on in slices]
        return [float(proc.communicate(timeout=300)[0]) for proc in procs]

    half = len(cpus) // 2
    alone = loops([cpus])[0]
    return statistics.median(loops([cpus[:half], cpus[half:2 * half]])) / alone


@pytest.mark.slow
def test_two_worker_processes_time_the_reference_as_one_process_does(tmp_path):
    """The issue's set-up (2 workers x 2 threads on 2 cores inflated the reference 3x)
    with the compile resource: each worker process measures one program at a time, on
    CPUs of its own. Held to 1.3x of one process, times what the machine itself does to
    two bare compiles side by side on those slices against one compile on every CPU (on
    a 2-core machine each worker has one core where a one-process sweep's compile has
    two, which no sweep can make up). Without the compile resource it measured 2.4x.
    Without the CPU split the ratio is no higher (1.41x, 0.98x: the workers' compiles
    overlap only part of the time, and alone one has both cores), so the split is
    checked on the rows: each cluster measurement had its worker's half of the CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")

    def reference_seconds(out, **extra) -> list[float]:
        config = SweepConfig(families=("tiny_many",), out=str(out), modules=(TINY,),
                             limit=6, max_repeats=3, progress=False, **extra)
        assert run_sweep(config).statuses["ok"] == 6
        rows = dataset.load(out)
        assert set(rows["cpu_count"]) == {len(cpus) // 2 if extra else len(cpus)}
        return list(rows["ref_seconds"])

    seconds = {"alone": [], "cluster": []}
    slowdowns = [side_by_side_slowdown(cpus)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                  resources={"compile": 1}, dashboard_address=":0") as cluster:
        # A B B A: the machine drifts between minutes, and a linear drift cancels
        for block, where in enumerate(("alone", "cluster", "cluster", "alone")):
            extra = {"dask_address": cluster.scheduler_address} if where == "cluster" else {}
            seconds[where] += reference_seconds(tmp_path / f"{block}", **extra)
    slowdowns.append(side_by_side_slowdown(cpus))
    alone, clustered = seconds["alone"], seconds["cluster"]
    ratio = statistics.median(clustered) / statistics.median(alone)
    # what the machine did to two compiles at once, the geometric mean of the probes
    # before and after: one probe alone moved 1.29-1.94x within a quiet run, and the
    # smaller of the two failed correct code (1.92 against 1.3 x 1.29) while a sweep
    # without the compile resource measures 2.4x
    machine = max(1.0, statistics.geometric_mean(slowdowns))
    print(f"median reference compile: one process {statistics.median(alone):.3f} s, two "
          f"worker processes {statistics.median(clustered):.3f} s, ratio {ratio:.2f}; two "
          f"bare compile loops side by side {', '.join(f'{s:.2f}' for s in slowdowns)}")
    if len(cpus) < 4:
        # Two cores give each worker one: on this project's 2-core machine, with nothing
        # else running, the ratio moved 1.54-2.07x and the bare probe 1.01-1.94x from run
        # to run, so no bound told a correct sweep from a broken one (#23 is blocked on
        # this). The split and the measurements were checked above.
        pytest.skip(f"ratio {ratio:.2f} not judged on {len(cpus)} CPUs (needs 4 or more)")
    assert ratio < 1.3 * machine, (ratio, slowdowns, alone, clustered)
