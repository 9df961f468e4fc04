"""costmodel as a user runs it on a TPU VM: the core install (jax, jaxlib and numpy, which
the VM has), `costmodel.predict` before each of the demo's programs is compiled on the
chip, twice through the set in one process, and the reference program last.

Each row: the prediction and its interval, the chip compile (a fresh function, the
compilation cache off), and what `predict` cost beside jax's own trace and lower.

    # here: pip wheel --no-deps -w .whl-cm . ; then on the device machine, from /tmp:
    python3 -m pip install --no-index --no-deps --target /tmp/site .whl-cm/*.whl
    REPO=$PWD python3 bench/evaluations/tpu_vm_user.py > $OUT/rows.jsonl
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    import jax

    import costmodel
    from costmodel._demo import examples

    jax.config.update("jax_enable_compilation_cache", False)
    print(json.dumps({"costmodel": costmodel.__file__, "jax": jax.__version__,
                      "backend": jax.default_backend(),
                      "device": jax.devices()[0].device_kind}), flush=True)
    for round_ in range(2):
        for name, build in examples():
            fn, args = build()
            start = time.perf_counter()
            jax.jit(fn).trace(*args).lower()
            lower_s = time.perf_counter() - start
            fn, args = build()
            start = time.perf_counter()
            predicted = costmodel.predict(fn, *args)
            predict_s = time.perf_counter() - start
            fn, args = build()
            lowered = jax.jit(fn).trace(*args).lower()
            start = time.perf_counter()
            lowered.compile()
            compile_s = time.perf_counter() - start
            print(json.dumps({"round": round_, "program": name,
                              "predicted": predicted.compile_seconds,
                              "interval": list(predicted.compile_seconds_interval),
                              "measured": compile_s, "predict_s": predict_s,
                              "trace_lower_s": lower_s}), flush=True)
    # the host's speed: the harness's reference program, read from the repository's tree
    sys.path.insert(0, os.environ.get("REPO", "."))
    from measure.reference import build_reference

    seconds = []
    for _ in range(5):
        fn, args = build_reference()
        lowered = jax.jit(fn).trace(*args).lower()
        start = time.perf_counter()
        lowered.compile()
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"reference_s": seconds}))


if __name__ == "__main__":
    main()
