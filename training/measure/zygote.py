"""A pre-loaded parent that forks one fresh measurement process per program.

Importing jax costs about a second per measurement process; a zygote imports it once
(without starting any backend, so forking is safe) and forks a child for each spec. The
child starts its backend from scratch, so first-compile costs and RSS growth stay as in
a fresh interpreter. Protocol, one JSON object per line: the parent sends
{"spec": ..., "out": path}; the zygote answers {"pid": n} at once and {"exit": code}
when that child ends; the child writes its result line to `out`, and its stdout goes where
the zygote's stderr goes.
"""

from __future__ import annotations

import json
import os
import sys


def serve(backend: str) -> None:
    from .child import configure

    configure({"backend": backend})
    import jax  # noqa: F401 - the point of the zygote: imported once, before any fork

    import costmodel.features  # noqa: F401
    from costmodel.training import corpus  # noqa: F401

    from .child import RESULT_PREFIX, result_for

    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            # the child's stdout is the protocol pipe: what a library prints while the
            # program builds (brax and mujoco do) would reach the parent as a reply
            os.dup2(2, 1)
            try:
                result = result_for(request["spec"])
                with open(request["out"], "w") as out:
                    out.write(RESULT_PREFIX + json.dumps(result) + "\n")
            finally:
                os._exit(0)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        sys.stdout.write(json.dumps({"exit": code}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve(sys.argv[1] if len(sys.argv) > 1 else "cpu")
