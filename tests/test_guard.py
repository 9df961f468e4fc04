"""The jit guard never breaks the program it guards, and advice handles layer stacks
whose weights differ in shape (issue 58), on the shipped default CPU model."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import costmodel
from costmodel import _advise, _rewrite, _stage
from costmodel.models import NoModelError


def mlp(ws, x):
    for w in ws:
        x = jax.nn.relu(x @ w)
    return x


MLP_ARGS = ([jnp.full((128, 256), 0.01), jnp.full((256, 256), 0.01),
             jnp.full((256, 256), 0.01)], jnp.ones((8, 128)))


def cnn(kernels, x):
    for k in kernels:
        x = jax.nn.relu(lax.conv(x, k, (1, 1), "SAME"))
    return x.mean(axis=(2, 3))


def _kernels(channels):
    return [jnp.full((out, inp, 3, 3), 0.01) for inp, out in zip(channels, channels[1:])]


CNN_ARGS = (_kernels([3, 8, 16, 16, 16]), jnp.ones((2, 3, 8, 8)))


def transformer(params, tokens):
    x = params["embed"][tokens]
    for block in params["blocks"]:
        q, k, v = x @ block["q"], x @ block["k"], x @ block["v"]
        att = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1]))
        x = x + (att @ v) @ block["o"]
        x = x + jax.nn.gelu(x @ block["up"]) @ block["down"]
    return x @ params["head"]


def _transformer_params(vocab=50, d=16, layers=3):
    block = {"q": (d, d), "k": (d, d), "v": (d, d), "o": (d, d), "up": (d, 4 * d),
             "down": (4 * d, d)}
    return {"embed": jnp.full((vocab, d), 0.02), "head": jnp.full((d, vocab), 0.02),
            "blocks": [{name: jnp.full(shape, 0.02) for name, shape in block.items()}
                       for _ in range(layers)]}


TRANSFORMER_ARGS = (_transformer_params(), jnp.arange(16, dtype=jnp.int32).reshape(2, 8))
STACKS = [(mlp, MLP_ARGS), (cnn, CNN_ARGS), (transformer, TRANSFORMER_ARGS)]


@pytest.mark.parametrize(("fn", "args"), STACKS, ids=["mlp", "cnn", "transformer"])
def test_mixed_shape_stacks_are_advised_and_guarded(fn, args):
    advice = costmodel.lower(fn, *args).advise(budget_seconds=1e-9)
    assert advice.alternatives and advice.prediction.compile_seconds > 0
    assert advice.split == (advice.alternatives[0].strategy != "keep")
    expected = jax.jit(fn)(*args)
    # within budget: no warning at all (pytest turns warnings into errors)
    np.testing.assert_allclose(costmodel.jit(fn, budget_seconds=60)(*args), expected,
                               rtol=1e-6)
    with pytest.warns(costmodel.CompileBudgetWarning):
        out = costmodel.jit(fn, budget_seconds=1e-9)(*args)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_the_issue_mlp_is_not_scanned_across_its_first_layer():
    # weights (128,256),(256,256),(256,256): three blocks repeat, but only two share
    # shapes, too few for a loop; the first layer never joins the scan
    advice = costmodel.lower(mlp, *MLP_ARGS).advise(budget_seconds=1e-9)
    assert [a.strategy for a in advice.alternatives] == ["keep"]
    eqns = jax.jit(mlp).trace(*MLP_ARGS).jaxpr.jaxpr.eqns
    assert _rewrite.same_shaped_run(eqns, 0, 2, 3) == (2, 2)


def test_a_same_shaped_run_after_a_different_layer_is_scanned_and_computes_the_same():
    ws = [jnp.full((4, 8), 0.1)] + [jnp.full((8, 8), 0.1 + 0.01 * i) for i in range(5)]
    x = jnp.linspace(-1, 1, 24).reshape(3, 8)[:, :4]
    advice = costmodel.lower(mlp, ws, x).advise(budget_seconds=1e-9)
    scan = next(a for a in advice.alternatives if a.strategy == "scan")
    assert "Run the 5 identical blocks" in scan.description
    traced = jax.jit(mlp).trace(ws, x)
    fn, _ = _rewrite.as_scan(traced.jaxpr, 0, 2, 6)
    np.testing.assert_allclose(fn(*ws, x)[0], mlp(ws, x), rtol=1e-6)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(widths=st.lists(st.sampled_from([2, 4, 8]), min_size=2, max_size=7),
       activation=st.sampled_from([jax.nn.relu, jnp.tanh]))
def test_random_layer_stacks_advise_without_error(widths, activation):
    def stack(ws, x):
        for w in ws:
            x = activation(x @ w)
        return x

    ws = [jnp.full((a, b), 0.3, jnp.float32) for a, b in zip(widths, widths[1:])]
    x = jnp.ones((2, widths[0]), jnp.float32)
    stage = costmodel.lower(stack, ws, x)
    advice = stage.advise(budget_seconds=1e-9)
    assert {a.strategy for a in advice.alternatives} <= {"keep", "scan"}
    block = stage.features().info["repeated_block"]
    if block["repeats"] >= 2:  # any scan the rewrite builds computes the program
        rewritten = _rewrite.as_scan(stage.traced.jaxpr, block["start"], block["size"],
                                     block["repeats"])
        if rewritten is not None:
            np.testing.assert_allclose(rewritten[0](*ws, x)[0], stack(ws, x), rtol=1e-5)


def test_guard_within_budget_does_no_advice_work(monkeypatch):
    calls = []
    real = _stage.advise_program
    monkeypatch.setattr(_stage, "advise_program",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    costmodel.jit(mlp, budget_seconds=60)(*MLP_ARGS)
    assert calls == []
    with pytest.warns(costmodel.CompileBudgetWarning):
        costmodel.jit(mlp, budget_seconds=1e-9)(*MLP_ARGS)
    assert calls == [1]


def test_a_first_call_within_budget_traces_the_function_once_as_jax_jit_does():
    """The prediction traces the function; jax's own cache miss then reuses that trace
    (its trace cache), so the user's code runs once and the compiled program is the one
    jax.jit(f) compiles."""
    traced = []

    def f(x, w):
        traced.append(1)
        return jnp.tanh(x @ w) + 0.1 * x

    x, w = jnp.ones((4, 8)), jnp.full((8, 8), 0.1)
    guarded = costmodel.jit(f, budget_seconds=60)
    out = guarded(x, w)
    assert len(traced) == 1
    np.testing.assert_allclose(out, jax.jit(f)(x, w), rtol=1e-6)
    assert guarded.lower(x, w).as_text() == jax.jit(f).lower(x, w).as_text()


def test_guard_degrades_to_a_warning_when_it_cannot_predict():
    # no model ships for gpu/a100: the guard cannot predict, the program still runs
    guarded = costmodel.jit(mlp, budget_seconds=1e-9, on_exceed="raise", backend="gpu",
                            target="a100")
    with pytest.warns(costmodel.CompileGuardWarning, match="no model ships for gpu/a100"):
        out = guarded(*MLP_ARGS)
    np.testing.assert_allclose(out, jax.jit(mlp)(*MLP_ARGS), rtol=1e-6)


def test_guard_over_budget_when_advice_fails_still_raises_only_budget_exceeded(monkeypatch):
    def broken(*_):
        raise RuntimeError("rewrite broke")

    monkeypatch.setattr(_advise, "_scan_alternative", broken)
    guarded = costmodel.jit(mlp, budget_seconds=1e-9, on_exceed="raise")
    with pytest.warns(costmodel.CompileGuardWarning, match="rewrite broke"):
        with pytest.raises(costmodel.CompileBudgetExceeded) as info:
            guarded(*MLP_ARGS)
    assert "(no advice: it failed)" in str(info.value)
    assert info.value.advice.prediction.compile_seconds > 1e-9
    warned = costmodel.jit(mlp, budget_seconds=1e-9)
    with pytest.warns(costmodel.CompileGuardWarning), \
            pytest.warns(costmodel.CompileBudgetWarning, match="no advice: it failed"):
        out = warned(*MLP_ARGS)
    np.testing.assert_allclose(out, jax.jit(mlp)(*MLP_ARGS), rtol=1e-6)


def test_guard_passes_the_users_own_error_through_unchanged():
    def wrong(x, w):
        return x @ w

    x, w = jnp.ones((2, 3)), jnp.ones((4, 5))
    with pytest.raises(TypeError) as plain:
        jax.jit(wrong)(x, w)
    with pytest.raises(TypeError) as guarded:  # and no warning of ours before it
        costmodel.jit(wrong)(x, w)
    assert str(guarded.value) == str(plain.value)


BAD_BUDGETS = [-1, 0, 0.0, math.nan, math.inf, -math.inf, "5", None, True]


@pytest.mark.parametrize("budget", BAD_BUDGETS, ids=repr)
def test_budgets_must_be_positive_finite_numbers(budget):
    with pytest.raises(ValueError, match=r"^budget_seconds must be a positive finite number"):
        costmodel.jit(mlp, budget_seconds=budget)
    with pytest.raises(ValueError, match=r"^budget_seconds must be a positive finite number"):
        costmodel.lower(mlp, *MLP_ARGS).advise(budget_seconds=budget)


def test_a_positive_budget_of_any_number_type_is_accepted():
    assert costmodel.lower(mlp, *MLP_ARGS).advise(budget_seconds=np.float32(2)).budget_seconds == 2
    assert costmodel.lower(mlp, *MLP_ARGS).advise(budget_seconds=3).budget_seconds == 3.0


def test_no_shipped_model_is_the_clis_error_not_a_missing_manifest():
    stage = costmodel.lower(mlp, *MLP_ARGS)
    with pytest.raises(NoModelError, match=r"^no model ships for gpu/a100 \(shipped: cpu, "
                                           r"gpu/h100.*\); measure it with `costmodel sweep "
                                           r"--backend gpu --target a100`") as info:
        stage.predict(backend="gpu", target="a100")
    assert "manifest.json" not in str(info.value)
    assert isinstance(info.value, costmodel.models.ArtifactError)  # caught as before
