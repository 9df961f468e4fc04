"""Deviceless v5e compile seconds of one convolution at a time, each in a fresh process
(libtpu caches a convolution's kernel within one), the reference program compiled first
in each: how the TPU compiler's time follows a convolution's spatial rank, window, feature
counts, groups, batch and layout at one op (bench/FINDINGS.md, "Thin convolutions probed
one at a time").

    python bench/archive/tpu_single_convs.py PROBES.jsonl OUT.jsonl

Each line of PROBES: {"nd": 2, "n": 256, "w": 3, "cin": 1, "cout": 1} and optionally "b"
(batch), "fg" (feature groups), "layout" ("last": channels last), "stride", "lhs_dil"
(a transposed convolution), "win" (a window other than w in every dimension).
"""

import json
import os
import subprocess
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")

CHILD = r'''
import json, os, sys, time
sys.path.insert(0, os.environ["COSTMODEL_ROOT"])
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import SingleDeviceSharding
from measure.tpu_target import deviceless_devices
from measure.reference import build_reference

p = json.loads(sys.argv[1])
sharding = SingleDeviceSharding(deviceless_devices("v5e")[0])


def timed(fn, args):
    args = [jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding) for a in args]
    t = time.perf_counter()
    jax.jit(fn).lower(*args).compile()
    return time.perf_counter() - t


ref = timed(*build_reference())
nd, n, w, cin, cout = p["nd"], p["n"], p["w"], p["cin"], p["cout"]
b, fg, stride, dil = p.get("b", 1), p.get("fg", 1), p.get("stride", 1), p.get("lhs_dil", 1)
spatial, win = (n,) * nd, tuple(p.get("win", (w,) * nd))
letters = "HWD"[:nd] if nd < 3 else "DHW"
if p.get("layout", "first") == "first":
    dn = ("NC" + letters, "OI" + letters, "NC" + letters)
    x, k = (b, cin, *spatial), (cout, cin // fg, *win)
else:
    dn = ("N" + letters + "C", letters + "IO", "N" + letters + "C")
    x, k = (b, *spatial, cin), (*win, cin // fg, cout)
padding = "SAME" if dil == 1 else [(w - 1, w - 1)] * nd


def f(x, k):
    return lax.conv_general_dilated(x, k, (stride,) * nd, padding, lhs_dilation=(dil,) * nd,
                                    dimension_numbers=dn, feature_group_count=fg)


s = timed(f, (jax.ShapeDtypeStruct(x, jnp.float32), jax.ShapeDtypeStruct(k, jnp.float32)))
print(json.dumps({**p, "seconds": s, "ref": ref}))
'''


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "COSTMODEL_ROOT": root}
    probes = [json.loads(line) for line in open(sys.argv[1])]
    with open(sys.argv[2], "a") as out:
        for p in probes:
            r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(p)], capture_output=True,
                               text=True, timeout=300, env=env)
            line = (r.stdout.strip().splitlines()[-1] if r.returncode == 0
                    else json.dumps({**p, "error": r.stderr[-300:]}))
            print(line, flush=True)
            out.write(line + "\n")
            out.flush()


if __name__ == "__main__":
    main()
