"""The on-chip half of `tpu_device.py`: compile exported programs on a real TPU and
deviceless on the same host, interleaved with the reference program.

It runs on the device machine, where costmodel is not installed: it needs only jax (with
libtpu), flatbuffers and the harness's reference program (read from this tree by path).
Each compile is a fresh `jax.jit` wrapper around the deserialized program, with the
compilation cache off, and must fire exactly one backend compile. Rows are written to
`--out` as they are measured, so a run cut by its time limit keeps what it finished.

    python bench/evaluations/tpu_device_run.py ARTIFACTS_DIR --out rows.jsonl [--budget-s 480] [--skip N]
        [--max-here-s S] [--fresh-rss-below-s S | --fresh-rss-only] [--stages]
        [--passes N --order-seed SEED] [--fresh-each]

With `--passes N` the process goes through the programs N times, each pass in its own
order shuffled from `--order-seed` (the first pass in manifest order without one), so each
program is compiled early and late in the process: the process warms for hundreds of
compiles (`training/fitting/device_labels.py` takes that out of the labels).

With `--fresh-each` each program compiles on the chip in a process of its own, measured as
the harness measures a sweep row (`measure/harness.py`): the reference program compiled
once untimed and once timed, then the program, then up to two more of the program each
after a timed reference (three under 2 s, two under 15 s), with the host RSS growth of its
first compile. That is the state of a fresh process a user's first compiles are in.

With `--deviceless-only` no chip is needed: each program compiles deviceless on this host
only (a machine without a TPU, for the deviceless half of a program's chip label).

With `--stages` each chip and deviceless compile also records libtpu's own stage seconds
(HLO passes, backend passes, code generation, end to end) from its INFO log, read by the
harness's `measure/tpu_phases.py` (loaded from this tree by path).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import threading
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """Peak RSS growth over the span, sampled every 5 ms in a thread. In a process that
    compiled before, freed memory is reused: a lower bound of a fresh process's growth."""

    def __enter__(self):
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss())
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def growth(self) -> int:
        return self.peak - self.base


def _reference():
    spec = importlib.util.spec_from_file_location(
        "reference", HERE.parents[1] / "measure" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_reference


def _stage_log():
    """The harness's libtpu log reader, importable without costmodel installed."""
    import sys

    sys.path.insert(0, str(HERE.parents[1]))
    from measure import tpu_phases

    return tpu_phases


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifacts")
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget-s", type=float, default=480.0)
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--deviceless-below-s", type=float, default=15.0)
    parser.add_argument("--max-here-s", type=float, default=None,
                        help="leave out programs whose deviceless sweep time was longer")
    parser.add_argument("--fresh-rss-below-s", type=float, default=0.0,
                        help="also compile deviceless in a fresh process, for its peak RSS "
                             "growth, when the chip's compile took less than this")
    parser.add_argument("--fresh-rss-only", action="store_true",
                        help="measure only each program's fresh-process deviceless RSS growth "
                             "(programs compiled on the chip before)")
    parser.add_argument("--stages", action="store_true",
                        help="record libtpu's stage seconds of every timed compile")
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--order-seed", type=int, default=None,
                        help="shuffle every pass's order (pass k from seed + k)")
    parser.add_argument("--deviceless-only", action="store_true",
                        help="compile deviceless only, on a host without a chip")
    parser.add_argument("--fresh-each", action="store_true",
                        help="each program on the chip in a fresh process, as sweeps measure")
    parser.add_argument("--rss-child", help=argparse.SUPPRESS)
    parser.add_argument("--fresh-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        print(json.dumps(_fresh_rss(Path(args.artifacts) / args.rss_child)))
        return
    if args.fresh_child:
        print(json.dumps(_fresh_compiles(Path(args.artifacts) / args.fresh_child,
                                         args.deviceless_only)))
        return
    started = time.monotonic()
    if args.fresh_rss_only:
        _fresh_rss_rows(args, started)
        return
    if args.fresh_each:
        _fresh_process_rows(args, started)
        return
    stages = _stage_log() if args.stages else None
    if stages is not None:  # libtpu reads its log level once, when it starts
        os.environ.update(stages.LOG_ENV)

    import jax
    from jax import export
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    jax.config.update("jax_enable_compilation_cache", False)
    fired: list[float] = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **_: fired.append(secs) if name == BACKEND_COMPILE_EVENT else None)
    compile_only = topologies.get_topology_desc(topology_name="v5e:2x2",
                                                platform="tpu").devices[0]
    chip = compile_only if args.deviceless_only else jax.devices()[0]
    places = {"deviceless": SingleDeviceSharding(compile_only)}
    if not args.deviceless_only:
        places["device"] = SingleDeviceSharding(chip)
    build_reference = _reference()

    staged: dict[str, list] = {}  # "device"/"deviceless" -> stage seconds of each compile

    def compile_seconds(fn, avals, where, rss=False, record=True):
        sharding = places[where]
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in avals]
        mark = len(fired)
        lowered = jax.jit(fn).trace(*specs).lower()
        log = (stages.TpuStageLog(stages.module_name(lowered)) if stages is not None
               else contextlib.nullcontext())
        with PeakRss() as peak, log:
            t0 = time.perf_counter()
            lowered.compile()
            seconds = time.perf_counter() - t0
        if len(fired) - mark != 1:
            raise RuntimeError(f"expected one backend compile, saw {len(fired) - mark}")
        if stages is not None and record:
            staged.setdefault(where, []).append(
                {p: log.seconds[p] for p in stages.STAGES} if not log.error else log.error)
        return seconds, (peak.growth if rss else None)

    def reference(where):
        fn, avals = build_reference()
        return compile_seconds(fn, avals, where, record=False)[0]

    manifest = json.loads((Path(args.artifacts) / "manifest.json").read_text())
    env = {"jax_version": jax.__version__, "libtpu_version": _version("libtpu"),
           "device_kind": chip.device_kind, "host_cpu_count": os.cpu_count(),
           "cpu_model": _cpu_model(), "hostname": platform.node()}
    for where in places:  # warm the compilers
        reference(where)
    with open(args.out, "a") as out:
        out.write(json.dumps({"environment": env}) + "\n")
        chosen = [e for e in manifest["programs"][args.skip:] if "file" in e and (
            args.max_here_s is None or e["here_s"] <= args.max_here_s)]
        for pass_index, entry in pass_order(chosen, args.passes, args.order_seed):
            if time.monotonic() - started > args.budget_s:
                break
            row = {"name": entry["name"], "key": entry["key"]}
            if args.passes > 1:
                row["pass"] = pass_index
            staged.clear()
            try:
                jax.config.update("jax_enable_x64", bool(entry["x64"]))
                exported = export.deserialize(
                    (Path(args.artifacts) / entry["file"]).read_bytes())
                avals = exported.in_avals

                def fresh():  # a new function object per compile: no tracing cache hit
                    return lambda *a: exported.call(*a)

                def deviceless():
                    row["ref_deviceless_s"] = [reference("deviceless")]
                    row["deviceless_s"] = [compile_seconds(fresh(), avals, "deviceless")[0]]

                if args.deviceless_only:
                    deviceless()
                else:
                    row["ref_device_s"] = [reference("device")]
                    first, rss = compile_seconds(fresh(), avals, "device", rss=True)
                    row["device_s"], row["device_rss_bytes"] = [first], rss
                    if first < 3.0:
                        row["ref_device_s"].append(reference("device"))
                        row["device_s"].append(compile_seconds(fresh(), avals, "device")[0])
                    if first < args.fresh_rss_below_s:
                        row["fresh_deviceless_rss_bytes"] = _fresh_rss_child(
                            args.artifacts, entry, timeout=max(60.0, 10 * first))
                    if first < args.deviceless_below_s:
                        deviceless()
                row.update({f"{where}_stages": got for where, got in staged.items()})
                row["status"] = "ok"
            except Exception as exc:  # a program that fails here is a row, not a stop
                row["status"], row["message"] = "error", f"{type(exc).__name__}: {exc}"[:400]
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)


def pass_order(entries: list, passes: int, seed: int | None):
    """(pass, entry) in the order a process compiles them: `passes` times through
    `entries`, pass k shuffled by `random.Random(seed + k)` (unshuffled with no seed)."""
    import random

    for k in range(passes):
        order = list(entries)
        if seed is not None:
            random.Random(seed + k).shuffle(order)
        for entry in order:
            yield k, entry


def _fresh_rss_rows(args, started: float) -> None:
    """One row per program with only its fresh-process RSS growth (and the child's wall
    seconds), for programs whose chip seconds earlier runs measured."""
    manifest = json.loads((Path(args.artifacts) / "manifest.json").read_text())
    with open(args.out, "a") as out:
        out.write(json.dumps({"environment": {
            "libtpu_version": _version("libtpu"), "host_cpu_count": os.cpu_count(),
            "cpu_model": _cpu_model(), "hostname": platform.node()}}) + "\n")
        for entry in manifest["programs"][args.skip:]:
            if time.monotonic() - started > args.budget_s:
                break
            if args.max_here_s is not None and entry["here_s"] > args.max_here_s:
                continue
            t0 = time.monotonic()
            growth = _fresh_rss_child(args.artifacts, entry,
                                      timeout=max(60.0, 6 * entry["here_s"]))
            row = {"name": entry["name"], "key": entry["key"],
                   "status": "ok" if growth is not None else "error",
                   "fresh_deviceless_rss_bytes": growth,
                   "child_s": round(time.monotonic() - t0, 2)}
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)


# compiles before each of a fresh-each row's program compiles (the references included)
FRESH_POSITIONS = (2, 4, 6)


def _repeats(first_s: float) -> int:
    """How many compiles of a program a sweep row takes (the harness's `repeats_for`)."""
    return 3 if first_s < 2.0 else 2 if first_s < 15.0 else 1


def _fresh_compiles(artifact: Path, deviceless: bool = False) -> dict:
    """One program on the chip (or deviceless) in this fresh process, as
    `measure/harness.py` orders a sweep row's compiles; the seconds jax took to open it."""
    import jax
    from jax import export
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    started = time.monotonic()
    jax.config.update("jax_enable_compilation_cache", False)
    fired: list[float] = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda name, secs, **_: fired.append(secs) if name == BACKEND_COMPILE_EVENT else None)
    device = (topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu").devices[0]
              if deviceless else jax.devices()[0])
    sharding = SingleDeviceSharding(device)
    opened_s = time.monotonic() - started
    exported = export.deserialize(artifact.read_bytes())

    def seconds(fn, avals, rss=False):
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in avals]
        lowered = jax.jit(fn).trace(*specs).lower()
        mark = len(fired)
        with PeakRss() as peak:
            t0 = time.perf_counter()
            lowered.compile()
            took = time.perf_counter() - t0
        if len(fired) - mark != 1:
            raise RuntimeError(f"expected one backend compile, saw {len(fired) - mark}")
        return took, peak.growth

    build_reference = _reference()
    seconds(*build_reference())  # the compiler's start-up, untimed
    refs = [seconds(*build_reference())[0]]
    first, growth = seconds(lambda *a: exported.call(*a), exported.in_avals, rss=True)
    times = [first]
    for _ in range(_repeats(first) - 1):
        refs.append(seconds(*build_reference())[0])
        times.append(seconds(lambda *a: exported.call(*a), exported.in_avals)[0])
    return {"device_s": times, "ref_device_s": refs, "device_rss_bytes": growth,
            "positions": list(FRESH_POSITIONS[:len(times)]), "jax_open_s": opened_s,
            "libtpu_version": _version("libtpu"), "device_kind": device.device_kind}


def _fresh_process_rows(args, started: float) -> None:
    """`--fresh-each`: a row per program, each measured by a child process of its own."""
    import subprocess
    import sys

    manifest = json.loads((Path(args.artifacts) / "manifest.json").read_text())
    chosen = [e for e in manifest["programs"][args.skip:] if "file" in e and (
        args.max_here_s is None or e["here_s"] <= args.max_here_s)]
    with open(args.out, "a") as out:
        out.write(json.dumps({"environment": {
            "host_cpu_count": os.cpu_count(), "cpu_model": _cpu_model(),
            "hostname": platform.node(), "fresh_each": True,
            "deviceless_only": args.deviceless_only}}) + "\n")
        for _, entry in pass_order(chosen, args.passes, args.order_seed):
            if time.monotonic() - started > args.budget_s:
                break
            env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
            if args.deviceless_only:
                env.update(JAX_PLATFORMS="cpu", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
            if entry.get("x64"):
                env["JAX_ENABLE_X64"] = "1"
            row = {"name": entry["name"], "key": entry["key"], "fresh_process": True}
            t0 = time.monotonic()
            try:
                done = subprocess.run(
                    [sys.executable, __file__, args.artifacts, "--out", os.devnull,
                     "--fresh-child", entry["file"]]
                    + (["--deviceless-only"] if args.deviceless_only else []),
                    capture_output=True, text=True,
                    timeout=max(120.0, 12 * entry["here_s"]), env=env)
                row.update(json.loads(done.stdout.strip().splitlines()[-1]))
                row["status"] = "ok"
            except subprocess.TimeoutExpired:
                row["status"], row["message"] = "timeout", "the child ran past its limit"
            except (ValueError, IndexError):
                row["status"] = "error"
                row["message"] = (done.stderr.strip().splitlines() or ["no output"])[-1][:400]
            row["child_s"] = round(time.monotonic() - t0, 2)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)


def _fresh_rss(artifact: Path) -> dict:
    """Peak RSS growth of one deviceless compile of `artifact` in this process, fresh but
    for the reference program compiled twice first (the compiler's start-up), as the
    sweeps record it; a process that compiled many programs before understates it."""
    import jax
    from jax import export
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    jax.config.update("jax_enable_compilation_cache", False)
    exported = export.deserialize(artifact.read_bytes())
    sharding = SingleDeviceSharding(
        topologies.get_topology_desc(topology_name="v5e:2x2", platform="tpu").devices[0])

    def lower(fn, avals):
        specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in avals]
        return jax.jit(fn).trace(*specs).lower()

    for _ in range(2):
        lower(*_reference()()).compile()
    lowered = lower(lambda *a: exported.call(*a), exported.in_avals)
    with PeakRss() as peak:
        lowered.compile()
    return {"rss_growth_bytes": peak.growth}


def _fresh_rss_child(artifacts: str, entry: dict, timeout: float) -> int | None:
    import subprocess
    import sys

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    if entry.get("x64"):
        env["JAX_ENABLE_X64"] = "1"
    try:
        done = subprocess.run(
            [sys.executable, __file__, artifacts, "--out", os.devnull, "--rss-child",
             entry["file"]], capture_output=True, text=True, timeout=timeout, env=env)
        return int(json.loads(done.stdout.strip().splitlines()[-1])["rss_growth_bytes"])
    except (subprocess.TimeoutExpired, ValueError, IndexError, KeyError):
        return None  # the row keeps its warm-process figure only


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
