"""`python reference_loop.py N CPUS`: time N compiles of the reference program on the
comma-separated CPUS only and print their median (seconds). The timing tests run one on
every CPU, then two at once on half the CPUs each, to see what this machine does to two
compiles side by side, sweep aside."""

import os
import statistics
import sys

if __name__ == "__main__":
    # before jax starts: XLA sizes its thread pools by the CPUs it may use
    os.sched_setaffinity(0, {int(cpu) for cpu in sys.argv[2].split(",")})
    os.environ["JAX_PLATFORMS"] = "cpu"
    from costmodel.measure.harness import CompileEvents, compile_once, placement
    from costmodel.measure.reference import build_reference

    events, place = CompileEvents(), placement("cpu", "")
    compile_once(build_reference, place, events)  # warm-up, as the harness does
    times = [compile_once(build_reference, place, events)[1] for _ in range(int(sys.argv[1]))]
    print(statistics.median(times))
