"""How `costmodel.jit` sits in jax's call path: the compile reuses the lowering the
prediction read, a warm call runs nothing of ours, and the fallback (a trace hook, for a
jax whose internals differ) guards the same way."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import costmodel
from costmodel import _guard

LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE = "/jax/core/compile/backend_compile_duration"


class Events:
    """Lowerings and backend compiles jax reports (its monitoring events)."""

    def __init__(self):
        self.counts = {LOWER: 0, COMPILE: 0}
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, name, secs, **kw):
        if name in self.counts:
            self.counts[name] += 1

    def during(self, call):
        before = dict(self.counts)
        result = call()
        return result, {k: self.counts[k] - before[k] for k in self.counts}


EVENTS = Events()
X, W = jnp.ones((16, 32)), jnp.full((32, 32), 0.01)


def layers(x, w):
    for _ in range(20):
        x = jnp.tanh(x @ w) + 0.1 * x
    return x


@pytest.fixture(params=["call path", "trace hook"])
def path(request, monkeypatch):
    if request.param == "trace hook":  # as where jax's internals differ
        monkeypatch.setattr(_guard, "_jit_with_miss", lambda *_: None)
    return request.param


def test_the_first_call_lowers_and_compiles_once_as_jax_jit_does(path):
    def f(x, w):  # new functions: nothing of them is in jax's caches
        return layers(x, w)

    def g(x, w):
        return layers(x, w)

    _, plain = EVENTS.during(lambda: jax.block_until_ready(jax.jit(f)(X, W)))
    out, guarded = EVENTS.during(
        lambda: jax.block_until_ready(costmodel.jit(g, budget_seconds=60)(X, W)))
    assert plain == {LOWER: 1, COMPILE: 1}
    # the call path compiles the lowering the prediction read; the trace hook predicts
    # from a lowering of its own
    assert guarded == {LOWER: 1 if path == "call path" else 2, COMPILE: 1}
    np.testing.assert_allclose(out, jax.jit(f)(X, W), rtol=1e-6)


def test_warm_calls_and_known_signatures_run_nothing_of_ours(monkeypatch):
    misses = []
    real = _guard.GuardedJit._on_miss
    monkeypatch.setattr(_guard.GuardedJit, "_on_miss",
                        lambda self, *a: misses.append(1) or real(self, *a))

    def f(x, w):
        return layers(x, w)

    guarded = costmodel.jit(f, budget_seconds=60)
    assert type(guarded) is type(jax.jit(f))
    for _ in range(3):
        guarded(X, W)
    assert len(misses) == 1
    guarded(X[:8], W)  # a new shape is a new program
    assert len(misses) == 2


@pytest.mark.usefixtures("path")
def test_both_paths_warn_over_budget_once_and_compute_the_program():
    def f(x, w):
        return layers(x, w)

    guarded = costmodel.jit(f, budget_seconds=1e-6)
    with pytest.warns(costmodel.CompileBudgetWarning, match="exceeds your budget"):
        out = guarded(X, W)
    np.testing.assert_allclose(out, jax.jit(f)(X, W), rtol=1e-6)
    guarded(X, W)  # no second warning: pytest's filterwarnings makes one an error

    def g(x, w):  # a new function: jax has compiled nothing of it
        return layers(x, w)

    raising = costmodel.jit(g, budget_seconds=1e-6, on_exceed="raise")
    _, counts = EVENTS.during(lambda: pytest.raises(
        costmodel.CompileBudgetExceeded, raising, X, W))
    assert counts[COMPILE] == 0


def test_the_path_in_use_is_the_call_path(path):
    guarded = costmodel.jit(layers, budget_seconds=60)
    assert (guarded.guard._jitted._fun is layers) == (path == "call path")


@pytest.mark.usefixtures("path")
def test_both_paths_guard_a_call_inside_another_jit_and_its_static_arguments():
    traced = []

    def f(x, n, scale=1.0):
        traced.append(n)
        for _ in range(n):
            x = jnp.tanh(x) * scale
        return x

    guarded = costmodel.jit(f, budget_seconds=1e-6, static_argnums=1,
                            static_argnames="scale")
    outer = jax.jit(lambda x: guarded(x, 2, scale=0.5) + 1.0)
    with pytest.warns(costmodel.CompileBudgetWarning):
        out = outer(jnp.ones(3))
    np.testing.assert_allclose(out, np.tanh(np.tanh(np.ones(3)) * 0.5) * 0.5 + 1.0,
                               rtol=1e-6)
    assert traced == [2]  # the prediction's trace is the one jax stages
    with pytest.warns(costmodel.CompileBudgetWarning):
        guarded(jnp.ones(3), 3)
    assert traced == [2, 3]


@pytest.mark.usefixtures("path")
def test_a_signature_within_budget_is_predicted_once(monkeypatch):
    lowered = []
    real = _guard.lower
    monkeypatch.setattr(_guard, "lower", lambda *a, **k: lowered.append(1) or real(*a, **k))

    def f(x):
        return jnp.sin(x) * 2.0

    guarded = costmodel.jit(f, budget_seconds=60)
    for scale in (1.0, 3.0):  # two programs staging the same call of f
        np.testing.assert_allclose(jax.jit(lambda x, s=scale: guarded(x) * s)(jnp.ones(3)),
                                   np.sin(np.ones(3)) * 2.0 * scale, rtol=1e-6)
    guarded(jnp.ones(3))
    assert len(lowered) == 1


def test_a_function_jax_calls_through_python_each_time_is_predicted_once(monkeypatch, capfd):
    # an effect (a debug print) keeps jax off its C++ fast path: every call is a miss
    lowered = []
    real = _guard.lower
    monkeypatch.setattr(_guard, "lower", lambda *a, **k: lowered.append(1) or real(*a, **k))

    def f(x):
        jax.debug.print("first {}", x[0])
        return x * 2.0

    guarded = costmodel.jit(f, budget_seconds=60)
    for _ in range(3):
        np.testing.assert_allclose(guarded(jnp.ones(3)), 2.0 * np.ones(3))
    assert capfd.readouterr().out.count("first 1.0") == 3
    assert len(lowered) == 1
