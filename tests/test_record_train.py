"""record -> train -> predict end to end, on a tiny dataset (seconds, not minutes)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

import costmodel
from costmodel import cli
from costmodel.cli.training_commands import shipped_data
from costmodel.training.build import retrain
from costmodel.training.evaluation import metrics
from costmodel.training.fitting.fit import train
from costmodel.training.store import dataset

SHIPPED_CPU = shipped_data("cpu", "")
FAMILIES = ("loop", "mlp", "while_loop")  # a slice of the shipped rows to train beside ours
# Small estimator settings: plain least-squares power laws (the shipped fixed-cost form is
# a nonlinear fit, 20 s on these 41 rows) and few trees.
FAST = {"baseline": {"compile_seconds": "within", "peak_rss_bytes": "within"}, "max_iter": 20}


def unrolled(steps):
    def f(x):
        for _ in range(steps):
            x = jnp.tanh(x) * 1.5
        return x
    return f


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "my.jsonl"
    x = jnp.ones((16,))  # made outside: its eager compile is not ours anyway
    with costmodel.record(path) as rec:
        for steps in (2, 8, 32, 64):
            jax.jit(unrolled(steps))(x)
        jnp.sum(x)                               # an eager jax function: not the user's
        _ = x + 1                                # an eager operation: not the user's
        jax.jit(lambda a: a @ a)(jnp.ones((8, 8)))  # jnp.ones compiles eagerly, this one not
    return path, rec


def test_record_keeps_only_user_compiles_keyed_by_their_stablehlo(recorded):
    path, rec = recorded
    rows = dataset.load(path)
    assert len(rows) == len(rec.rows) == 5
    assert rows["key"].is_unique  # four programs are all `jit_f`; their hashes differ
    params = [json.loads(p) for p in rows["params"]]
    assert [p["module"] for p in params] == ["jit_f"] * 4 + ["jit__lambda"]
    assert all(len(p["stablehlo_sha256"]) == 64 for p in params)
    assert (rows["compile_seconds"] > 0).all()
    assert (rows["ref_seconds"] > 0).all() and rows["ref_seconds"].nunique() == 1
    assert (rows["peak_rss_bytes"] >= 0).all()
    assert (rows["executable_memory_bytes"] > 0).all()
    assert rows["f_hlo_ops"].iloc[3] > rows["f_hlo_ops"].iloc[0]


def test_the_same_program_gets_the_same_key(tmp_path):
    with costmodel.record(tmp_path / "a.jsonl") as first:
        jax.jit(unrolled(3))(jnp.ones(4))
    with costmodel.record(tmp_path / "b.jsonl") as second:
        jax.jit(unrolled(3))(jnp.ones(4))   # a new function object: compiled again
        jax.jit(unrolled(4))(jnp.ones(4))
    assert first.rows[0]["key"] == second.rows[0]["key"] != second.rows[1]["key"]


def test_record_captures_exactly_the_user_compiles_in_its_block(tmp_path):
    jax.jit(lambda a: a - 1)(jnp.ones(3))  # outside: not recorded
    with costmodel.record(tmp_path / "rec.jsonl") as rec:
        jax.jit(lambda a: jnp.sin(a) * 2)(jnp.ones(4))
        jax.jit(lambda a: jnp.cos(a) * 2).lower(jnp.ones(4)).compile()  # ahead of time
    jax.jit(lambda a: a + 1)(jnp.ones(3))  # after: not recorded
    assert [json.loads(r["params"])["module"] for r in rec.rows] == ["jit__lambda"] * 2


def tiny_shipped(tmp_path, per_family=12):
    rows = pd.read_parquet(SHIPPED_CPU)
    rows = rows[rows["family"].isin(FAMILIES)].groupby("family").head(per_family)
    return dataset.export_parquet(rows, tmp_path / "tiny.parquet")


def test_record_train_predict_end_to_end(recorded, tmp_path):
    path, _ = recorded
    shipped = tiny_shipped(tmp_path)
    without_repeats = pd.DataFrame(dataset.read_jsonl(path)).drop(columns="compile_seconds_all")
    without_repeats.to_json(tmp_path / "mine.jsonl", orient="records", lines=True)
    data = dataset.load([shipped, tmp_path / "mine.jsonl"])  # parquet rows have repeats
    assert data["compile_seconds_all"].tail(5).isna().all()
    assert metrics.noise_floor(data["compile_seconds_all"])["n"] == 3 * 3 * 12
    artifact = retrain(data, "cpu", "", tmp_path / "m", name="mine", params=FAST)
    assert artifact.manifest["training_data"]["rows"] == 3 * 12 + 5
    x = jax.ShapeDtypeStruct((16,), jnp.float32)
    small = costmodel.lower(unrolled(4), x).predict(model=str(tmp_path / "m"))
    large = costmodel.lower(unrolled(400), x).predict(model=tmp_path / "m")
    assert small.model_version == artifact.version != costmodel.predict(unrolled(4), x).model_version
    assert 0 < small.compile_seconds < large.compile_seconds < 600
    assert np.isfinite(small.peak_memory_bytes)


def test_train_on_rows_lacking_a_label_leaves_that_target_out(recorded, tmp_path, capsys):
    path, _ = recorded
    rows = pd.DataFrame(dataset.read_jsonl(path))
    rows["peak_rss_bytes"] = None   # e.g. recorded where RSS was not sampled
    rows.to_json(tmp_path / "no_rss.jsonl", orient="records", lines=True)
    model = train(dataset.load(tmp_path / "no_rss.jsonl"), "cpu", max_iter=5)
    assert model.targets_ == ("compile_seconds", "executable_memory_bytes")
    out = tmp_path / "m"
    assert cli.main(["train", "--data", str(tmp_path / "no_rss.jsonl"),
                     "--out", str(out)]) == 0
    assert "not trained: peak_rss_bytes (0 rows with that label" in capsys.readouterr().out
    p = costmodel.lower(unrolled(4), jax.ShapeDtypeStruct((16,), jnp.float32)).predict(model=out)
    assert p.compile_seconds > 0 and np.isnan(p.peak_memory_bytes)
    assert "host memory ≈ unknown" in repr(p)


def test_train_without_compile_times_is_a_clear_error(recorded, tmp_path, capsys):
    path, _ = recorded
    rows = pd.DataFrame(dataset.read_jsonl(path))
    rows["compile_seconds"] = None
    rows.to_json(tmp_path / "bad.jsonl", orient="records", lines=True)
    assert cli.main(["train", "--data", str(tmp_path / "bad.jsonl"),
                     "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "too few rows with a compile_seconds label (0" in err
