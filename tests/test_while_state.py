"""bench/archive/while_state.py: counting while loops and the values they carry."""

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    from conftest import bench_module

    return bench_module("while_state")


def test_a_loop_carrying_three_arrays_and_its_counter_carries_four(bench):
    def three(a, b, c):
        return jax.lax.fori_loop(0, 5, lambda i, s: (s[0] + 1, s[1] * 2, s[2] - s[0]), (a, b, c))

    def nested(x):
        inner = lambda i, y: jax.lax.fori_loop(0, 3, lambda j, z: z + j, y)  # noqa: E731
        return jax.lax.fori_loop(0, 4, inner, x)

    vector = jax.ShapeDtypeStruct((8,), jnp.float32)
    assert bench.carried_values(jax.jit(three).lower(vector, vector, vector).as_text()) == (1, 4)
    # the outer loop carries its counter and x; the inner one its counter, the outer
    # counter (its body reads it) and x
    assert bench.carried_values(jax.jit(nested).lower(vector).as_text()) == (2, 5)
    assert bench.carried_values(jax.jit(jnp.sin).lower(vector).as_text()) == (0, 0)


