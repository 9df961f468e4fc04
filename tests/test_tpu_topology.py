"""TPU topology targets (`v5e:2x2`, `v5e:4x4`) and sharded programs: names, the sharding
strategies on CPU devices, the chip count the TPU model reads (no TPU or libtpu needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from costmodel.cli.common import backend_and_target
from costmodel.features import Placement, normalize_target
from costmodel.features.environment import UnknownTargetError, chips, model_target
from costmodel.features.sharding import PLACEMENT_INPUTS, is_sharded, placement_inputs
from costmodel.measure.sharding import (
    NotSharded,
    collective_count,
    leaf_spec,
    mesh_axes,
    split_params,
)
from costmodel.models import default_path
from costmodel.training.fitting.fit import features_frame, select_rows


def test_a_topology_of_a_known_chip_is_a_tpu_target():
    assert normalize_target("TPU", "V5E:4x4") == ("tpu", "v5e:4x4")
    assert normalize_target("tpu", "v5p:2x2x1") == ("tpu", "v5p:2x2x1")
    assert backend_and_target(None, "v5e:2x2") == ("tpu", "v5e:2x2")
    for wrong in ("v4:2x2", "v5e:0x2", "v5e:4", "v5e:2x2x2x2"):
        with pytest.raises(UnknownTargetError, match="v5e:2x2, v5e:4x4"):
            normalize_target("tpu", wrong)
    with pytest.raises(UnknownTargetError):
        normalize_target("gpu", "h100:2x2")  # only TPU targets name topologies


def test_a_topology_counts_its_chips_and_is_served_by_its_chips_model():
    assert (chips("v5e:2x2"), chips("v5e:4x4"), chips("v5p:2x2x1"), chips("v5e")) == (4, 16, 4, 1)
    assert model_target("tpu", "v5e:4x4") == "v5e" and model_target("gpu", "h100") == "h100"
    assert Placement("tpu", "v5e:4x4").label == "tpu-v5e-4x4"
    assert Placement("tpu", "v5e:4x4").model == Placement("tpu", "v5e")
    assert default_path("tpu", "v5e:4x4") == default_path("tpu", "v5e")


def test_sharding_annotations_are_told_from_replicated_ones():
    assert is_sharded('#sdy.sharding<@mesh, [{"data"}, {}]>')
    assert not is_sharded("#sdy.sharding<@mesh, [{}, {}]>")
    assert is_sharded('"{devices=[4,1]<=[4]}"')
    assert not is_sharded('"{devices=[1,1,4]<=[4] last_tile_dim_replicate}"')
    assert not is_sharded('"{replicated}"')


def test_each_strategy_shards_the_dims_it_names():
    data = mesh_axes("dp", 16)
    assert data == {"data": 16} and mesh_axes("tp", 4) == {"data": 2, "model": 2}
    assert mesh_axes("tp", 16) == {"data": 4, "model": 4}
    # inputs: the leading dim, when the data axis divides it
    assert leaf_spec((32, 8), "inputs", "dp", data) == ["data", None]
    assert leaf_spec((8, 32), "inputs", "dp", data) == [None, None]
    # params: replicated under dp, their largest divisible dim under fsdp
    assert leaf_spec((64, 256), "params", "dp", data) == [None, None]
    assert leaf_spec((64, 256), "params", "fsdp", data) == [None, "data"]
    assert leaf_spec((64, 250), "params", "fsdp", data) == ["data", None]
    # tensor parallel: a weight's last dim over the model axis, biases replicated
    tp = mesh_axes("tp", 16)
    assert leaf_spec((64, 256), "params", "tp", tp) == [None, "model"]
    assert leaf_spec((256,), "params", "tp", tp) == [None]
    assert split_params({"n": 3, "sharding": "tp"}) == ({"n": 3}, "tp")
    with pytest.raises(ValueError, match="unknown sharding strategy 'pp'"):
        split_params({"sharding": "pp"})


_ON_CPU_DEVICES = textwrap.dedent("""
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax, jax.numpy as jnp
    from costmodel.features import from_lowered
    from costmodel.measure.sharding import NotSharded, collective_count, shard_args

    def step(params, x):
        def loss(p):
            return jnp.mean(jnp.tanh(x @ p["w1"]) @ p["w2"])
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, jax.grad(loss)(params))

    f32 = jnp.float32
    params = {"w1": jax.ShapeDtypeStruct((64, 128), f32),
              "w2": jax.ShapeDtypeStruct((128, 16), f32)}
    x = jax.ShapeDtypeStruct((32, 64), f32)
    out = {}
    for strategy in ("dp", "fsdp", "tp"):
        placed, stats = shard_args((params, x), strategy, jax.devices())
        traced = jax.jit(step).trace(*placed)
        lowered = traced.lower()
        features = from_lowered(traced, lowered, backend="tpu", target="v5e:2x2", jaxpr=False)
        specs = {k: list(v.sharding.spec) for k, v in placed[0].items()}
        out[strategy] = {"stats": stats, "specs": specs, "x": list(placed[1].sharding.spec),
                         "collectives": collective_count(lowered.compile().as_text()),
                         "inputs": {k: features.model_inputs()[k]
                                    for k in ("chips", "sharded_args", "sharded_input_share")},
                         "text": lowered.as_text()}
    try:
        shard_args(({"b": jax.ShapeDtypeStruct((3,), f32)}, jax.ShapeDtypeStruct((3,), f32)),
                   "dp", jax.devices())
    except NotSharded as exc:
        out["refused"] = str(exc)
    print("RESULT", json.dumps(out))
""")


@pytest.fixture(scope="module")
def on_cpu_devices():
    """The three strategies applied to a train step on 4 CPU devices (a subprocess: the
    device count is fixed when JAX starts)."""
    done = subprocess.run([sys.executable, "-c", _ON_CPU_DEVICES], capture_output=True,
                          text=True, timeout=300)
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, done.stderr[-2000:]
    return json.loads(line[0][len("RESULT "):])


def test_strategies_shard_a_train_step_and_the_compiler_adds_collectives(on_cpu_devices):
    dp, fsdp, tp = (on_cpu_devices[s] for s in ("dp", "fsdp", "tp"))
    assert dp["x"] == ["data", None]
    assert dp["specs"] == {"w1": [None, None], "w2": [None, None]}
    assert fsdp["specs"] == {"w1": [None, "data"], "w2": ["data", None]}
    assert tp["specs"] == {"w1": [None, "model"], "w2": [None, "model"]}
    assert tp["x"] == ["data", None]  # over the 2x2 mesh's data axis of 2
    assert (dp["stats"]["sharded_leaves"], fsdp["stats"]["sharded_leaves"]) == (1, 3)
    # gradients of replicated params over sharded data are all-reduced: the sharding is real
    for strategy in (dp, fsdp, tp):
        assert strategy["collectives"] >= 1
    assert "shards none of the 2 argument leaves" in on_cpu_devices["refused"]


def test_sharded_programs_carry_their_sharding_into_the_model_inputs(on_cpu_devices):
    dp, fsdp = on_cpu_devices["dp"]["inputs"], on_cpu_devices["fsdp"]["inputs"]
    assert dp["chips"] == fsdp["chips"] == 4.0
    assert (dp["sharded_args"], fsdp["sharded_args"]) == (1.0, 3.0)
    x_share = 32 * 64 / (32 * 64 + 64 * 128 + 128 * 16)
    assert dp["sharded_input_share"] == pytest.approx(x_share)
    assert fsdp["sharded_input_share"] == pytest.approx(1.0)
    assert placement_inputs("v5e:4x4", {}) == {"chips": 16.0, "sharded_args": 0.0,
                                               "sharded_input_share": 0.0}


def test_topology_rows_train_their_chips_model_with_the_placement_inputs():
    from costmodel.features import MODEL_FEATURES

    base = {"status": "ok", "backend": "tpu", **{"f_" + name: 1.0 for name in MODEL_FEATURES}}
    data = pd.DataFrame([{**base, "target": "v5e"},
                         {**base, "target": "v5e:4x4", "sharded_args": 3.0,
                          "sharded_input_share": 0.5},
                         {**base, "target": "v6e:2x2"}, {**base, "target": "v5e:2x2",
                                                        "status": "error"}])
    rows = select_rows(data, "tpu", "v5e")
    assert list(rows["target"]) == ["v5e", "v5e:4x4"]
    frame = features_frame(rows)
    assert list(frame.columns[-3:]) == list(PLACEMENT_INPUTS)
    assert frame["chips"].tolist() == [1.0, 16.0]
    assert frame["sharded_args"].tolist() == [0.0, 3.0]
    cpu = rows.assign(backend="cpu")
    assert "chips" not in features_frame(cpu)  # other backends' models are unchanged
    assert np.isfinite(frame.to_numpy(float)).all()


def test_no_sharding_refused_before_a_topology(monkeypatch):
    from costmodel.measure.harness import Placement as Where
    from costmodel.measure.sharding import sharded_placement

    with pytest.raises(ValueError, match="needs a TPU topology target"):
        sharded_placement(Where("tpu", "v5e"), "dp")
    assert collective_count("%a = f32[4] all-reduce(%b)\n%c = all-gather-start(%d)") == 2
    assert issubclass(NotSharded, ValueError)


def _served_tpu_app(tmp_path):
    from test_api_support import config

    from costmodel.api import create_app

    paths = {("tpu", "v5e"): default_path("tpu", "v5e")}
    return create_app(config(tmp_path, None, MODEL_PATHS=paths))


def test_a_topology_target_is_answered_by_the_chips_model_from_the_chip_count(on_cpu_devices):
    import costmodel

    text = on_cpu_devices["fsdp"]["text"]
    one = costmodel.predict_stablehlo(text, backend="tpu", target="v5e")
    many = costmodel.predict_stablehlo(text, backend="tpu", target="v5e:4x4")
    assert (many.backend, many.target) == ("tpu", "v5e:4x4")
    assert many.model_version == one.model_version  # the shipped v5e model serves both
    assert "chips" in many._artifact.predictor.feature_names
    inputs = many.features.model_inputs()
    assert (inputs["chips"], inputs["sharded_args"]) == (16.0, 3.0)
    assert many.compile_seconds != one.compile_seconds  # the chip count is read
    assert 0.01 < many.compile_seconds < 100.0


def test_http_predicts_for_a_topology_target(tmp_path, on_cpu_devices):
    import costmodel

    text = on_cpu_devices["dp"]["text"]
    client = _served_tpu_app(tmp_path).test_client()
    response = client.post("/v1/predict", json={"stablehlo": text, "backend": "tpu",
                                                "target": "v5e:2x2"})
    assert response.status_code == 200, response.json
    (served,) = response.json["predictions"]
    assert served["target"] == "v5e:2x2"
    in_process = costmodel.predict_stablehlo(text, backend="tpu", target="v5e:2x2")
    assert served["compile_seconds"] == pytest.approx(in_process.compile_seconds)
    wrong = client.post("/v1/predict", json={"stablehlo": text, "backend": "tpu",
                                             "target": "v4:2x2"})
    assert wrong.status_code == 400


def test_held_out_scores_are_split_by_chips_and_strategy():
    from costmodel.training.evaluation.by_placement import card_section, scores

    rows = pd.DataFrame({"key": ["a", "b", "c", "d"],
                         "target": ["v5e", "v5e", "v5e:2x2", "v5e:4x4"],
                         "sharding": [None, None, "dp", "tp"]})
    actual = [1.0, 2.0, 4.0, 8.0]
    point = [1.0, 3.0, 2.0, 8.0]  # folds 1, 1.5, 2, 1
    predictions = pd.DataFrame({"split": "leave_library_out", "target": "compile_seconds",
                                "model": "costmodel", "key": rows["key"], "actual": actual,
                                "point": point, "lo": [0.5] * 4, "hi": [3.0] * 4})
    result = scores(predictions, rows)
    assert list(result) == ["single chip", "sharded, 4-16 chips", "sharded, 4 chips",
                            "sharded, 16 chips", "sharded, dp", "sharded, tp"]
    assert result["single chip"]["costmodel"]["median_fold"] == pytest.approx(1.25)
    assert result["sharded, 4-16 chips"]["costmodel"]["median_fold"] == pytest.approx(1.5)
    assert result["sharded, 4 chips"]["costmodel"]["coverage"] == 0.0  # 4 s above [0.5, 3]
    assert result["sharded, tp"]["costmodel"]["n"] == 1
    assert "| sharded, 16 chips | costmodel | 1 | 1 |" in "\n".join(card_section(result))
    assert scores(predictions, rows.assign(target="v5e")) == {}  # no sharded rows: no split


def test_cli_predicts_for_a_topology_target(capsys, tmp_path):
    from costmodel import cli

    path = tmp_path / "prog.py"
    path.write_text("import jax.numpy as jnp\ndef f(x):\n    return jnp.tanh(x @ x)\n")
    answers = {}
    for target in ("v5e", "v5e:4x4"):
        assert cli.main(["predict", f"{path}:f", "--arg", "f32[64,64]", "--target", target,
                         "--json"]) == 0
        answers[target] = json.loads(capsys.readouterr().out)
    assert answers["v5e:4x4"]["target"] == "v5e:4x4"
    assert answers["v5e:4x4"]["model_version"] == answers["v5e"]["model_version"]
    # the same replicated program on 16 chips: the model reads the chip count
    assert answers["v5e:4x4"]["compile_seconds"] != answers["v5e"]["compile_seconds"]


def test_the_api_schema_documents_topology_targets():
    import re

    from costmodel.api.schemas import Program

    documented = Program.model_json_schema()["properties"]["target"]["anyOf"][0]["anyOf"]
    pattern = re.compile(documented[1]["pattern"])
    assert pattern.match("v5e:4x4") and pattern.match("v5p:2x2x1")
    assert not pattern.match("h100:2x2") and not pattern.match("v5e:0x2")
    assert "v5e" in documented[0]["enum"]
