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

