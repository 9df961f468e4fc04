import json, sys, hashlib
import pandas as pd
from costmodel.training.measure.harness import placement
rows = pd.read_parquet(sys.argv[1]); place = placement("cpu", "")
import os; os.makedirs("/tmp/dup/mlir", exist_ok=True)
for i, r in rows.iterrows():
    name = hashlib.sha1(r.key.encode()).hexdigest()[:12]
    if os.path.exists(f"/tmp/dup/mlir/{name}.mlir"): continue
    try:
        traced, lowered = place.lower_corpus(r.family, json.loads(r.params))
        open(f"/tmp/dup/mlir/{name}.mlir", "w").write(lowered.as_text())
    except Exception as e:
        print("fail", r.key, e, file=sys.stderr)
