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


WEB_WORKER = """
import json, sys
import jax, jax.numpy as jnp
from costmodel.api import create_app
app = create_app({"SAMPLES_DB": sys.argv[1], "RETRAIN_RUNNER": "worker",
                  "RETRAIN_TOKEN": "t" * 32, "MODEL_SYNC_SECONDS": 0.0})
client = app.test_client()
text = jax.jit(lambda x: jnp.tanh(x @ x)).lower(jnp.ones((8, 8))).as_text()
predicted = client.post("/v1/predict", json={"stablehlo": text, "backend": "cpu"})
auth = {"Authorization": "Bearer " + "t" * 32}
queued = client.post("/v1/retrain", headers=auth)
job = client.get("/v1/retrain/" + queued.json["job"], headers=auth)
print(json.dumps({"statuses": [predicted.status_code, queued.status_code, job.status_code],
                  "job": job.json["status"], "modules": sorted(sys.modules)}))
"""


def test_a_web_worker_that_leaves_retraining_to_workers_imports_no_scikit_learn(tmp_path):
    """With `RETRAIN_RUNNER=worker` a web worker predicts and enqueues retrain jobs without
    loading the training stack: scikit-learn and every training module come with the process
    that runs a job (the `costmodel.training` package itself only locates the shipped data)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", WEB_WORKER, str(tmp_path / "s.sqlite3")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["statuses"] == [200, 202, 200] and result["job"] == "queued"
    loaded = [name for name in result["modules"]
              if name.split(".")[0] == "sklearn" or name.startswith("costmodel.training.")]
    assert loaded == []
