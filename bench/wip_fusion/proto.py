"""Prototype: CPU-rule fusion emulation vs measured hlo_instructions."""
import json, sys, time
import pandas as pd
import costmodel.features.stablehlo.walk as walk
from costmodel.features.stablehlo.fusion import Fusions
from costmodel.features.categories import EXPENSIVE_HLO, INDEXING_HLO
from costmodel.training.measure.harness import placement

class CpuFusions(Fusions):
    def visit(self, operands, results, name, weight, rank):
        if name == "reduce":
            weight = 1.0
        super().visit(operands, results, name, weight, rank)
        if name == "reduce":
            self._roots = getattr(self, "_roots", set()); self._roots.add(self._count - 1)

    def groups(self):
        roots = getattr(self, "_roots", set())
        fusion_of, groups = {}, []
        def new():
            groups.append([0, 0.0, 0]); return len(groups) - 1
        for position in sorted(self._fusible, reverse=True):
            weight, cheap, indexing, unary = self._fusible[position]
            users = self._users.get(position, set())
            fused = [u for u in users if u in fusion_of]
            joined = set().union(*(fusion_of[u] for u in fused))
            if position in roots:
                targets = {new()}
            elif users and len(fused) == len(users):
                targets = joined
            elif unary and joined:
                targets = joined | {new()}
            else:
                targets = {new()}
            fusion_of[position] = targets
            for f in targets:
                groups[f][0] += 1; groups[f][1] += weight; groups[f][2] += indexing
        return groups

def stats(module):
    from costmodel.features.stablehlo.assemble import stablehlo_features
    from costmodel.features.stablehlo.parse import functions, entry_function
    from costmodel.features.stablehlo.combine import combine
    funcs = functions(module); entry = entry_function(funcs)
    w = walk.Walker(funcs); tallies = {n: w.function(n) for n in funcs}
    c = combine(entry, tallies, {})
    sizes = [s for s, _, _ in c["fusions"]]; costs = [k for _, k, _ in c["fusions"]]
    return sum(sizes), sum(k*k for k in costs), max(sizes, default=0)

rows = pd.read_parquet(sys.argv[1])
out = []
place = placement("cpu", "")
for i, r in rows.iterrows():
    try:
        traced, lowered = place.lower_corpus(r.family, json.loads(r.params))
        module = lowered.compiler_ir("stablehlo")
        walk.Fusions = Fusions; old = stats(module)
        walk.Fusions = CpuFusions; new = stats(module)
    except Exception as e:
        print("fail", r.key, e, file=sys.stderr); continue
    out.append(dict(key=r.key, family=r.family, params=r.params, secs=r.compile_seconds,
                    instr=r.hlo_instructions, ops=r.f_hlo_ops_inlined,
                    old_sum=old[0], old_sq=old[1], old_max=old[2], new_sum=new[0], new_sq=new[1], new_max=new[2]))
    print(len(out), r.family, r.params, r.hlo_instructions, old[0], new[0], flush=True)
pd.DataFrame(out).to_csv(sys.argv[2], index=False)
