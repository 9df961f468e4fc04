"""The rewrites behind advice compute what the original program computes."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel import _rewrite
from costmodel.features import extract


def unrolled(steps):
    def f(x, w):
        for _ in range(steps):
            x = jnp.tanh(x @ w) + 0.1 * x
        return x.sum()
    return f


X = jnp.linspace(0.1, 1, 32).reshape(4, 8)
W = jnp.eye(8) * 0.5 + 0.01


def test_unrolled_loop_as_scan_is_numerically_identical_and_has_one_loop():
    f = unrolled(20)
    traced = jax.jit(f).trace(X, W)
    block = extract(f, X, W).info["repeated_block"]
    assert (block["size"], block["repeats"]) == (4, 20)
    fn, shapes = _rewrite.as_scan(traced.jaxpr, block["start"], block["size"], block["repeats"])
    np.testing.assert_allclose(jax.jit(fn)(X, W)[0], f(X, W), rtol=1e-6)
    rewritten = extract(fn, *shapes)
    assert rewritten["while_count"] == 1
    assert rewritten["while_trip_max"] == 20
    assert rewritten["hlo_ops"] < extract(f, X, W)["hlo_ops"] / 5


def test_stacked_layers_with_distinct_weights_become_scanned_xs():
    def f(x, ws):
        for w in ws:
            x = jnp.sin(x @ w)
        return x
    ws = [W * (i + 1) / 10 for i in range(6)]
    traced = jax.jit(f).trace(X, ws)
    block = extract(f, X, ws).info["repeated_block"]
    plan = _rewrite.plan_scan(traced.jaxpr.jaxpr.eqns, block["start"], block["size"],
                              block["repeats"])
    assert sorted(plan.kinds) == ["carry", "xs"]
    fn, _ = _rewrite.as_scan(traced.jaxpr, block["start"], block["size"], block["repeats"])
    np.testing.assert_allclose(jax.jit(fn)(X, *ws)[0], f(X, ws), rtol=1e-6)


def test_constants_as_arguments_computes_the_same():
    table = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    def g(x):
        return jnp.tanh(x @ table).sum()
    traced = jax.jit(g).trace(X)
    fn, shapes = _rewrite.constants_as_arguments(traced.jaxpr)
    assert [s.shape for s in shapes] == [(8, 8), (4, 8)]
    np.testing.assert_allclose(jax.jit(fn)(table, X)[0], g(X), rtol=1e-6)
    assert extract(fn, *shapes)["dense_constant_bytes"] == 0
    assert extract(g, X)["dense_constant_bytes"] == 64 * 4


def test_inner_jit_parts_dedupe_identical_calls():
    inner = jax.jit(lambda a: jnp.sin(a) * 2)
    other = jax.jit(lambda a: jnp.cos(a))
    def h(a):
        return other(inner(inner(a))) + 1
    parts, (glue, shapes, _) = _rewrite.inner_jit_parts(jax.jit(h).trace(X).jaxpr)
    assert len(parts) == 2  # inner (called twice, compiled once) and other
    assert jax.jit(glue)(X)[0].shape == X.shape
    assert extract(glue, *shapes)["op_sine"] == 0


def test_inner_jit_parts_without_glue_when_only_calls_remain():
    layer = jax.jit(lambda a: jnp.tanh(a) * 2)
    def stack(a):
        for _ in range(4):
            a = layer(a)
        return a
    parts, glue = _rewrite.inner_jit_parts(jax.jit(stack).trace(X).jaxpr)
    assert len(parts) == 1 and glue is None


def test_advice_on_inner_jits_in_a_fresh_process():
    """`advise` splits a program's inner jits in a process that has imported nothing but
    costmodel and jax (it once read `jax.extend` as an attribute, which exists only after
    something imports it, so the first advice in a new process failed)."""
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp, costmodel
        inner = jax.jit(lambda a: jnp.tanh(a @ a))
        advice = costmodel.advise(lambda a: inner(inner(a)) + 1, jnp.ones((8, 8)))
        print(sorted(alt.strategy for alt in advice.alternatives))
    """)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "split_inner_jits" in done.stdout


def test_non_chained_blocks_are_not_rewritten():
    def f(x, y):
        a = jnp.sin(x)
        b = jnp.sin(y)
        c = jnp.sin(x + 1)
        return a + b + c
    traced = jax.jit(f).trace(X, X)
    eqns = traced.jaxpr.jaxpr.eqns
    assert _rewrite.as_scan(traced.jaxpr, 0, 1, 2) is None or \
        _rewrite.plan_scan(eqns, 0, 1, 2).kinds.count("carry") == 0


@pytest.mark.parametrize("steps", [3, 7])
def test_repeated_block_detection_counts_steps(steps):
    info = extract(unrolled(steps), X, W).info["repeated_block"]
    assert info["repeats"] == steps


def multi_stage(steps):
    def f(x, ws):
        for _ in range(steps):
            for w in ws:
                x = jnp.tanh(x @ w)
        return x
    return f


STAGES = [jnp.eye(16) * (0.5 + 0.1 * i) for i in range(4)]
X16 = jnp.linspace(0.1, 1, 128).reshape(8, 16)


def test_a_body_cycling_through_weights_repeats_whole():
    # Each stage alone repeats 4 x 50 times, but reads another weight each time; the
    # period that reads the same weights is the 4-stage body (8 equations), 50 times.
    f = multi_stage(50)
    block = extract(f, X16, STAGES).info["repeated_block"]
    assert (block["size"], block["repeats"]) == (8, 50)
    traced = jax.jit(f).trace(X16, STAGES)
    plan = _rewrite.plan_scan(traced.jaxpr.jaxpr.eqns, block["start"], block["size"],
                              block["repeats"])
    assert sorted(plan.kinds) == ["carry", "const", "const", "const", "const"]
    fn, _ = _rewrite.as_scan(traced.jaxpr, block["start"], block["size"], block["repeats"])
    np.testing.assert_allclose(jax.jit(fn)(X16, *STAGES)[0], f(X16, STAGES), rtol=1e-6)


def test_advice_on_the_multi_stage_loop_names_its_block_and_line():
    from costmodel import lower

    # Before: "2000 identical blocks of 2 operations", a scan predicted slower than keeping.
    advice = lower(multi_stage(500), X16, STAGES).advise(budget_seconds=0.05)
    best = advice.alternatives[0]
    assert advice.split and best.strategy == "scan"
    assert "500 identical blocks of 8 operations starting at " in advice.reason
    assert "tests/test_rewrite.py:" in advice.reason  # the user's line
    assert best.predicted_compile_seconds < advice.prediction.compile_seconds / 3


def test_only_jits_the_user_wrote_are_split_out():
    # jnp.take and jnp.where call jits of jax's own (_take, _where); jnp.clip is one.
    inner = jax.jit(lambda a: jnp.sin(a) * 2.0)

    def f(x, i):
        picked = jnp.take(x, i, axis=0)
        return (inner(picked).sum() + jnp.clip(x, 0, 1).sum()
                + jnp.where(x > 0, x, 0.0).sum())

    i = jnp.array([1, 2])
    traced = jax.jit(f).trace(X, i)
    jits = {str(e.params["name"]): _rewrite.is_user_jit(e) for e in traced.jaxpr.jaxpr.eqns
            if e.primitive.name in ("jit", "pjit")}
    assert jits == {"_take": False, "clip": False, "_where": False, "<lambda>": True}
    parts, (glue, shapes, _) = _rewrite.inner_jit_parts(traced.jaxpr)
    assert [name for _, _, name in parts] == ["<lambda>"]
    # jax's own jits stay in the glue, which still computes everything but the part
    assert float(jax.jit(glue)(X, i)[0]) == pytest.approx(
        float(jnp.clip(X, 0, 1).sum() + jnp.where(X > 0, X, 0.0).sum()), rel=1e-6)
