"""`python reference_loop.py N CPU`: time N compiles of the reference program on CPU only
and print their median (seconds). The timing tests run two at once, on two CPUs, to see
how much two compiles side by side slow each other on this machine, sweep aside."""

import os
import statistics
import sys

if __name__ == "__main__":
    os.sched_setaffinity(0, {int(sys.argv[2])})  # before jax: XLA sizes its threads by it
    os.environ["JAX_PLATFORMS"] = "cpu"
    from costmodel.training.corpus.reference import build_reference
    from costmodel.training.measure.harness import CompileEvents, compile_once, placement

    events, place = CompileEvents(), placement("cpu", "")
    compile_once(build_reference, place, events)  # warm-up, as the harness does
    times = [compile_once(build_reference, place, events)[1] for _ in range(int(sys.argv[1]))]
    print(statistics.median(times))
