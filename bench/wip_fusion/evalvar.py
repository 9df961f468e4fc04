import hashlib, sys, functools, os
import numpy as np, pandas as pd
sys.path.insert(0, "/tmp/dup")
import costmodel.features.stablehlo.walk as walk
from costmodel.features.stablehlo.fusion import Fusions
from costmodel.features.stablehlo.parse import parse_module, functions, entry_function
from costmodel.features.stablehlo.combine import combine
from variant import Variant

def total(module, cls):
    walk.Fusions = cls
    funcs = functions(module); entry = entry_function(funcs)
    w = walk.Walker(funcs); tallies = {n: w.function(n) for n in funcs}
    c = combine(entry, tallies, {})
    return sum(s for s, _, _ in c["fusions"]), sum(k * k for _, k, _ in c["fusions"])

variants = {"current": Fusions,
            "reduce+dup": functools.partial(Variant, resolve=False),
            "reduce+dup+resolve": Variant,
            "resolve only": functools.partial(Variant, reduce_root=False, dup_expensive=False),
            "reduce+resolve": functools.partial(Variant, dup_expensive=False),
            "all+paths": functools.partial(Variant, paths=True),
            "dup+resolve+paths": functools.partial(Variant, paths=True, reduce_root=False)}
rows = pd.concat([pd.read_parquet("/tmp/dup/sample.parquet")])
out = []
for _, r in rows.iterrows():
    path = f"/tmp/dup/mlir/{hashlib.sha1(r.key.encode()).hexdigest()[:12]}.mlir"
    if not os.path.exists(path): continue
    module = parse_module(open(path).read())
    rec = dict(family=r.family, params=r.params, instr=r.hlo_instructions, secs=r.compile_seconds, ops=r.f_hlo_ops_inlined)
    for name, cls in variants.items():
        rec[name] = total(module, cls)[0]
    out.append(rec)
d = pd.DataFrame(out)
L = np.log
for name in ["ops", *variants]:
    x = L(d[name].clip(lower=1)); y = L(d.instr); b = np.polyfit(x, y, 1); res = y - np.polyval(b, x)
    print(f"{name:20s} n={len(d)} slope {b[0]:.2f} corr {np.corrcoef(x, y)[0,1]:.3f} med {np.median(abs(res)):.3f} p90 {np.quantile(abs(res), .9):.3f}")
pd.set_option("display.width", 250)
print(d[d.family.str.startswith(("sympy", "eqx_deep", "nnx_res", "keras_tr"))].drop(columns=["secs"]).to_string())
d.to_csv("/tmp/dup/variants.csv", index=False)
