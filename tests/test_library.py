"""predict, advise and the jit guard, on the shipped default CPU model (record: test_record_train.py)."""

from dataclasses import FrozenInstanceError

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import costmodel
from costmodel.features import from_stablehlo

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
X = jax.ShapeDtypeStruct((32, 64), jnp.float32)
W = jax.ShapeDtypeStruct((64, 64), jnp.float32)


class CompileCounter:
    def __init__(self):
        self.count = 0
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, name, secs, **kw):
        if name == BACKEND_COMPILE:
            self.count += 1


COUNTER = CompileCounter()


def unrolled(steps):
    def f(x, w):
        for _ in range(steps):
            x = jnp.tanh(x @ w) + 0.1 * x
        return x
    return f


def scanned(steps):
    def f(x, w):
        return lax.scan(lambda c, _: (jnp.tanh(c @ w) + 0.1 * c, None), x, None,
                        length=steps)[0]
    return f


def small_mlp(params, x):
    for w in params:
        x = jax.nn.relu(x @ w)
    return x.sum()


def test_predict_never_compiles_and_fills_every_field():
    before = COUNTER.count
    p = costmodel.predict(unrolled(50), X, W)
    assert COUNTER.count == before
    lo, hi = p.compile_seconds_interval
    assert 0 < lo <= p.compile_seconds <= hi
    assert p.peak_memory_bytes > 0 and p.executable_memory_bytes > 0
    assert p.backend == "cpu" and p.target == "" and p.model_version
    assert set(p.to_dict()) >= {"compile_seconds", "compile_seconds_interval",
                                "peak_memory_bytes", "executable_memory_bytes", "model_version"}
    assert "compile ≈" in repr(p) and "host memory ≈" in repr(p)


def test_predict_grows_with_unrolled_steps_and_not_with_scan_length():
    small, big = (costmodel.predict(unrolled(n), X, W).compile_seconds for n in (20, 400))
    assert big > 4 * small
    s_small, s_big = (costmodel.predict(scanned(n), X, W).compile_seconds for n in (20, 400))
    assert s_big < 1.5 * s_small


def test_predict_accepts_lowered_and_matches_stablehlo_path():
    lowered = jax.jit(unrolled(30)).lower(X, W)
    a = costmodel.predict(lowered)
    b = costmodel.predict_stablehlo(lowered.as_text(), backend="cpu")
    assert a.to_dict() == b.to_dict()
    c = costmodel.predict_features(from_stablehlo(lowered.as_text()))
    assert c.compile_seconds == a.compile_seconds


def test_explain_gives_records_of_what_halving_a_quantity_does():
    p = costmodel.predict(unrolled(100), X, W)
    top = p.explain(top=3)
    assert len(top) == 3 and all(isinstance(e, costmodel.Effect) for e in top)
    assert all(e.feature in costmodel.features.MODEL_FEATURES for e in top)
    assert [e.factor for e in top] == sorted(e.factor for e in top)  # largest effect first
    ops = next(e for e in p.explain(top=50) if e.feature == "hlo_ops_inlined")
    assert (ops.value, ops.changed_to) == (p.features["hlo_ops_inlined"],
                                          p.features["hlo_ops_inlined"] / 2)
    halved = {**p.features.model_inputs(), "hlo_ops_inlined": ops.changed_to}
    alone = p._artifact.predict([p.features.model_inputs(), halved])["compile_seconds"]["point"]
    assert ops.factor == pytest.approx(alone[1] / alone[0])
    assert str(ops) == (f"compile ×{ops.factor:.2f} from halving ops once every call is "
                        f"inlined (an unrolled Python loop repeats them): {ops.value:g} → "
                        f"{ops.changed_to:g} [hlo_ops_inlined]")
    assert repr(ops).startswith("Effect(halving hlo_ops_inlined ")
    with pytest.raises(FrozenInstanceError):
        ops.factor = 0.5


def test_explain_leaves_out_what_the_model_cannot_justify():
    p = costmodel.predict(unrolled(100), X, W)
    inputs = p.features.model_inputs()
    names = [n for n in costmodel.features.MODEL_FEATURES if inputs[n] != 0]
    rows = [inputs] + [{**inputs, n: inputs[n] / 2} for n in names]
    points = p._artifact.predict(rows)["compile_seconds"]["point"]
    raw = {n: points[i + 1] / points[0] for i, n in enumerate(names)}
    slower = {n for n, f in raw.items() if f > 1.0}
    assert "op_tanh" in slower  # fewer tanh ops, as many ops: the model predicts slower
    fractional = {n for n in names if inputs[n] < 2}  # halved, no whole op or kernel left
    assert fractional
    shown = {e.feature for e in p.explain(top=len(names))}
    assert shown and not shown & (slower | fractional)
    assert all(raw[n] <= 0.99 for n in shown)
    assert shown == {n for n, f in raw.items() if f <= 0.99} - fractional


def test_advice_on_unrolled_500_step_loop_recommends_scan_far_cheaper():
    # the shipped model, trained on a quiet 2-core machine, puts this at ~0.6 s
    advice = costmodel.lower(unrolled(500), X, W).advise(budget_seconds=0.25)
    assert advice.split
    best = advice.alternatives[0]
    assert best.strategy == "scan"
    assert best.predicted_compile_seconds < 0.2 * advice.prediction.compile_seconds
    assert "lax.scan" in advice.reason and "test_library.py" in best.description


def test_advice_on_small_mlp_says_keep():
    params = [jax.ShapeDtypeStruct((32, 32), jnp.float32)] * 2
    advice = costmodel.advise(jax.grad(small_mlp), params,
                              jax.ShapeDtypeStruct((8, 32), jnp.float32))
    assert not advice.split
    assert "keep it as one jit" in advice.reason
    assert advice.to_dict()["split"] is False


def test_guard_raises_before_compiling():
    guarded = costmodel.jit(unrolled(200), budget_seconds=1e-4, on_exceed="raise")
    x, w = np.ones((32, 64), np.float32), np.ones((64, 64), np.float32)
    before = COUNTER.count
    with pytest.raises(costmodel.CompileBudgetExceeded) as info:
        guarded(x, w)
    assert COUNTER.count == before
    assert info.value.advice.prediction.compile_seconds > 1e-4


def test_guard_warns_once_per_signature_and_still_runs():
    guarded = costmodel.jit(lambda a: a * 2, budget_seconds=1e-4)
    with pytest.warns(costmodel.CompileBudgetWarning):
        out = guarded(jnp.ones(3))
    np.testing.assert_allclose(out, 2 * np.ones(3))
    guarded(jnp.ones(3))  # same signature: checked already, no second warning
    with pytest.warns(costmodel.CompileBudgetWarning):
        guarded(jnp.ones(5))


def test_gpu_prediction_uses_the_gpu_model():
    p = costmodel.lower(unrolled(20), X, W).predict(backend="gpu")
    assert (p.backend, p.target) == ("gpu", "h100")
    assert p.model_version != costmodel.predict(unrolled(20), X, W).model_version


def test_guard_advises_only_on_jax_cache_misses(monkeypatch):
    from costmodel import _guard

    calls = []
    real = _guard.lower
    monkeypatch.setattr(_guard, "lower", lambda *a, **k: calls.append(a) or real(*a, **k))

    def f(x, n, scale=1.0):
        for _ in range(n):
            x = jnp.tanh(x) * scale
        return x

    guarded = costmodel.jit(f, budget_seconds=60, static_argnums=1, static_argnames="scale")
    assert type(guarded) is type(jax.jit(f))  # jax's own call path, nothing around it
    for _ in range(3):
        np.testing.assert_allclose(guarded(jnp.ones(3), 2), np.tanh(np.tanh(np.ones(3))),
                                   rtol=1e-6)
    assert len(calls) == 1
    guarded(jnp.ones(3), 3)                # a new static value is a new program
    guarded(jnp.ones(3), 3, scale=2.0)
    guarded(jnp.ones(4), 3, scale=2.0)     # and a new shape
    assert len(calls) == 4
    assert guarded.check(jnp.ones(4), 3, scale=2.0).prediction.compile_seconds > 0
