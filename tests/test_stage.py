"""`costmodel.lower` and the stage: every keyword goes to the user's function; costmodel's
options live on the stage's methods; one trace serves every placement."""

import jax
import jax.numpy as jnp
import pytest

import costmodel

X = jax.ShapeDtypeStruct((32, 64), jnp.float32)
W = jax.ShapeDtypeStruct((64, 64), jnp.float32)


def loss(x, w, model="linear", steps=1):
    for _ in range(steps):
        x = jnp.tanh(x @ w) if model == "mlp" else x @ w
    return jnp.sum(x)


def test_keyword_arguments_go_to_the_function_even_when_costmodel_had_that_name():
    linear = costmodel.predict(loss, X, W, steps=8)
    mlp = costmodel.predict(loss, X, W, model="mlp", steps=8)
    assert mlp.features["op_tanh"] == 8 and linear.features["op_tanh"] == 0
    assert mlp.model_version == linear.model_version  # the shipped model either way
    assert mlp.features["op_dot_general"] == linear.features["op_dot_general"] == 8


def test_array_keywords_are_traced_and_other_keywords_bound_as_values():
    stage = costmodel.lower(loss, X, w=W, model="mlp")
    assert stage.traced.jaxpr.in_avals[1].shape == (64, 64)  # w stayed an argument
    assert stage.features()["op_tanh"] == 1


def test_costmodel_options_passed_to_predict_get_a_hint_naming_the_stage():
    def f(x):
        return x * 2

    with pytest.raises(TypeError, match=r"costmodel.lower\(f, \*args\).predict\(backend=...\)"):
        costmodel.predict(f, X, backend="gpu")
    with pytest.raises(TypeError, match=r"\.advise\(budget_seconds=...\)"):
        costmodel.advise(f, X, budget_seconds=3)


def test_one_stage_predicts_for_each_placement_and_lowers_each_once():
    stage = costmodel.lower(loss, X, W, steps=4)
    cpu, gpu = stage.predict(), stage.predict(backend="gpu")
    assert (cpu.backend, gpu.backend, gpu.target) == ("cpu", "gpu", "h100")
    assert stage.features(jaxpr=False) is stage.features(jaxpr=False)  # cached
    assert cpu.compile_seconds == costmodel.predict(loss, X, W, steps=4).compile_seconds


def test_stage_advice_takes_its_budget():
    stage = costmodel.lower(loss, X, W, model="mlp", steps=300)
    roomy, tight = stage.advise(budget_seconds=1e6), stage.advise(budget_seconds=1e-3)
    assert not roomy.split and tight.split
    assert tight.alternatives[0].strategy == "scan"


def test_a_lowered_program_takes_no_more_arguments():
    lowered = jax.jit(loss).lower(X, W)
    assert costmodel.lower(lowered).predict().compile_seconds > 0
    with pytest.raises(TypeError, match="takes no arguments"):
        costmodel.lower(lowered, X)
