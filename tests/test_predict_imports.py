"""The predict path is runtime code only: `import costmodel; costmodel.predict(...)`
imports no training package and nothing of the optional extras (scikit-learn, pandas,
flask, matplotlib, ...), so the core install predicts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from costmodel._extras import EXTRA_OF

FORBIDDEN = ("costmodel.training", "costmodel.api", *EXTRA_OF)

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
