"""`POST /v1/advise` on a program's StableHLO text gives the advice `lower(...).advise`
gives on its trace (issue 58), on small versions of `bench/advice_validation.py`'s
programs, both with the shipped CPU model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_api_support import config

import costmodel
from costmodel._hlo_rewrite import scan_text
from costmodel._hlo_split import inner_jit_texts
from costmodel.api import create_app
from costmodel.models import default_path

F32 = jnp.float32


def unrolled(steps: int):
    def f(x, w):
        for _ in range(steps):
            x = jnp.tanh(x @ w) + 0.1 * x
        return x
    return f, (jax.ShapeDtypeStruct((16, 32), F32), jax.ShapeDtypeStruct((32, 32), F32))


def multi_stage(steps: int, stages: int = 4):
    def f(x, ws):
        for _ in range(steps):
            for w in ws:
                x = jnp.tanh(x @ w)
        return x
    return f, (jax.ShapeDtypeStruct((8, 16), F32), [jax.ShapeDtypeStruct((16, 16), F32)] * stages)


def layered(depth: int):
    layer = jax.jit(lambda x, w: jax.nn.gelu(x @ w) + x)

    def f(x, ws):
        for w in ws:
            x = layer(x, w)
        return x
    return f, (jax.ShapeDtypeStruct((32, 128), F32), [jax.ShapeDtypeStruct((128, 128), F32)] * depth)


def captured_constants():
    table = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)  # 1 MB

    def f(x):
        return jnp.tanh(x @ table) @ table.T
    return f, (jax.ShapeDtypeStruct((8, 512), F32),)


def with_gradient(steps: int):
    f, args = unrolled(steps)
    return jax.grad(lambda x, w: f(x, w).sum(), argnums=1), args


# (program, budget, the strategy the library recommends there): the loop first
PROGRAMS = {
    "loop 300 steps": (unrolled(300), 0.05, "scan"),
    "loop 10 steps": (unrolled(10), 0.05, "keep"),
    "4 stages x 40": (multi_stage(40), 0.05, "scan"),
    "8 inner jits": (layered(8), 0.01, "split_inner_jits"),
    "captured 1 MB": (captured_constants(), 0.01, "constants_as_arguments"),
    "loop 60 steps, gradient": (with_gradient(60), 0.05, "scan"),
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    app = create_app(config(tmp_path_factory.mktemp("agree"), default_path("cpu")))
    return app.test_client()


@pytest.mark.parametrize("name", PROGRAMS)
def test_service_advises_as_the_library_does(client, name):
    (fn, args), budget, recommended = PROGRAMS[name]
    library = costmodel.lower(fn, *args).advise(budget_seconds=budget)
    response = client.post("/v1/advise", json={"stablehlo": jax.jit(fn).lower(*args).as_text(),
                                                "budget_seconds": budget})
    assert response.status_code == 200
    served = response.json["advice"][0]
    best = library.alternatives[0].strategy if library.split else "keep"
    assert best == recommended
    assert served["split"] == library.split
    assert [a["strategy"] for a in served["alternatives"]] == [
        a.strategy for a in library.alternatives]
    assert served["prediction"]["compile_seconds"] == pytest.approx(
        library.prediction.compile_seconds, rel=1e-9)
    for mine, theirs in zip(served["alternatives"], library.alternatives):
        assert mine["predicted_compile_seconds"] == pytest.approx(
            theirs.predicted_compile_seconds, rel=0.2)


def test_scan_on_text_computes_the_loop_it_replaces():
    fn, _ = unrolled(6)
    x = jnp.linspace(-1, 1, 16 * 32, dtype=F32).reshape(16, 32)
    w = jnp.linspace(-0.1, 0.1, 32 * 32, dtype=F32).reshape(32, 32)
    scanned = scan_text(jax.jit(fn).lower(x, w).as_text(), min_repeats=3)
    assert (scanned.repeats, scanned.size) == (6, 6)
    assert scanned.text.count("stablehlo.while") == 1
    assert scanned.text.count("stablehlo.dot_general") == 1
    np.testing.assert_allclose(_run_text(scanned.text, x, w), jax.jit(fn)(x, w),
                               rtol=1e-5, atol=1e-6)


def _run_text(text: str, *args):
    """The first result of compiling and running module `text` on the CPU."""
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client

    compiled = jax.devices("cpu")[0].client.compile_and_load(
        mlir.module_to_bytecode(_parsed(text)), xla_client.DeviceList(
            tuple(jax.devices("cpu")[:1])), xla_client.CompileOptions())
    out = compiled.execute_sharded([jax.device_put(a) for a in args])
    return np.asarray(out.disassemble_into_single_device_arrays()[0][0])


def _parsed(text: str):
    from costmodel.features.stablehlo import parse_module

    return parse_module(text)


def test_split_on_text_names_the_users_jits_only():
    fn, args = layered(3)

    def with_library_jits(x, ws):
        return jnp.where(fn(x, ws) > 0, jnp.clip(x, 0, 1), 0.0)

    parts, glue = inner_jit_texts(jax.jit(with_library_jits).lower(*args).as_text())
    assert [name for name, _ in parts] == ["<lambda>"]
    assert "@main(%arg0: tensor<32x128xf32>, %arg1: tensor<128x128xf32>)" in parts[0][1]
    assert glue is not None and "<lambda>" not in glue and "@_where" in glue
    assert inner_jit_texts(jax.jit(fn).lower(*args).as_text())[1] is None  # calls only


def test_a_feature_vector_says_why_it_cannot_be_split(client):
    from test_api_support import feature_vector

    fn, args = unrolled(300)
    text = jax.jit(fn).lower(*args).as_text()
    response = client.post("/v1/advise", json={"features": feature_vector(text),
                                               "backend": "cpu", "budget_seconds": 0.05})
    advice = response.json["advice"][0]
    assert advice["split"] is False
    assert advice["reason"].endswith("a feature vector holds no program to look for repeated "
                                     "blocks or inner jits in: send its StableHLO text for "
                                     "those).")


def test_scan_on_text_hands_the_forward_rows_to_the_backward_loop():
    fn, _ = with_gradient(12)
    x = jnp.linspace(-1, 1, 16 * 32, dtype=F32).reshape(16, 32)
    w = jnp.linspace(-0.1, 0.1, 32 * 32, dtype=F32).reshape(32, 32)
    scanned = scan_text(jax.jit(fn).lower(x, w).as_text(), min_repeats=3)
    assert scanned.text.count("stablehlo.while") == 2
    main = scanned.text[scanned.text.index("@main"):]
    main = main[:main.index("\n  }\n")]
    # no step's value is sliced out of one loop's stack to be concatenated for the next
    assert main.count("stablehlo.slice") + main.count("stablehlo.concatenate") <= 6
    np.testing.assert_allclose(_run_text(scanned.text, x, w), jax.jit(fn)(x, w),
                               rtol=1e-5, atol=1e-6)
