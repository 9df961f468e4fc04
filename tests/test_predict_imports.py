"""The predict path is runtime code only: no training package, scikit-learn, pandas,
flask or matplotlib gets imported by `import costmodel; costmodel.predict(...)`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

FORBIDDEN = ("costmodel.training", "sklearn", "pandas", "flask", "matplotlib", "joblib")

SCRIPT = """
import json, sys
import jax.numpy as jnp
import costmodel
p = costmodel.predict(lambda x: jnp.tanh(x @ x), jnp.ones((16, 16)))
print(json.dumps({"seconds": p.compile_seconds, "modules": sorted(sys.modules)}))
"""


def test_predict_imports_no_training_or_fitting_libraries():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    loaded = [name for name in result["modules"]
              if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)]
    assert loaded == []
    assert 0 < result["seconds"] < 10
    assert "costmodel.models.predictor" in result["modules"]
