"""The measurement process: `python -m costmodel.training.measure.child` reads one JSON spec on
stdin, measures, and prints one result line prefixed with `RESULT_PREFIX`.

It runs in a fresh interpreter so peak-RSS growth and first-compile costs are real.
Measurement processes may set global JAX flags; library code never does.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

RESULT_PREFIX = "COSTMODEL_RESULT "


def configure(spec: dict) -> None:
    """Environment switches a measurement process needs, set before jax is imported."""
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    if spec.get("cpus"):  # before the backend starts: XLA sizes its threads by them
        os.sched_setaffinity(0, spec["cpus"])
    backend = spec.get("backend", "cpu")
    # TPU sweeps compile deviceless (libtpu's topology needs no chip); only bench scripts
    # that ask for the chip (`on_device`) let JAX open it
    if backend == "cpu" or (backend == "tpu" and not spec.get("on_device")):
        os.environ["JAX_PLATFORMS"] = "cpu"
    elif backend == "tpu":  # the chip, whatever the caller's environment hid it with
        os.environ["JAX_PLATFORMS"] = "tpu,cpu"
    else:
        os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # libtpu reads its log levels once, at its start: its INFO log gives the TPU rows'
    # per-stage columns (`costmodel.measure.tpu_phases`); `--no-phases` turns it off, and
    # per-pass times (`PASS_LOG_ENV`) are logged only where the sweep's environment asks
    from costmodel.measure.tpu_phases import LOG_ENV, PASS_LOG_ENV

    if backend == "tpu" and spec.get("trace_phases", True):
        os.environ.update(LOG_ENV)
    else:
        for name in (*LOG_ENV, *PASS_LOG_ENV):
            os.environ.pop(name, None)


def run(spec: dict) -> dict:
    configure(spec)
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    from costmodel.measure.user_modules import import_module_or_file

    for module in spec.get("modules", ()):
        import_module_or_file(module)  # lets users' own corpus families register
    from costmodel.measure.harness import measure
    from costmodel.measure.sharding import split_params
    from costmodel.training import corpus

    family = corpus.get_family(spec["family"])
    if family.x64:
        jax.config.update("jax_enable_x64", True)
    # a sharded variant's strategy is one of its params (so it keys the row), not the family's
    params, sharding = split_params(spec.get("params", {}))

    def build():
        return family.build(**params)

    def warm(other: dict):
        return lambda: corpus.get_family(other["family"]).build(**other["params"])

    row = measure(build, backend=spec.get("backend", "cpu"), target=spec.get("target", ""),
                  max_repeats=int(spec.get("max_repeats", 3)),
                  trace_phases=bool(spec.get("trace_phases", True)), sharding=sharding,
                  warmup=[warm(other) for other in spec.get("warmup", ())])
    return {**row, "library": family.library}


def result_for(spec: dict) -> dict:
    """Measure `spec`; every fault becomes a result with a status, never an exception."""
    try:
        result = {"status": "ok", "message": "", **run(spec)}
    except MemoryError:
        result = {"status": "oom", "message": "MemoryError in the measurement process"}
    except Exception as exc:  # every fault becomes a row, never a crashed sweep
        status = "cache_hit" if type(exc).__name__ == "CacheHitError" else "error"
        tail = traceback.format_exc().strip().splitlines()[-1]
        result = {"status": status, "message": f"{type(exc).__name__}: {exc}"[:2000] or tail}
    return result


def main() -> int:
    result = result_for(json.loads(sys.stdin.read()))
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
