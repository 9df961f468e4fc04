"""A tiny corpus family for sweep tests (imported by path into measurement processes)."""

import jax
import jax.numpy as jnp

from costmodel.training import corpus


def _build(n: int):
    def f(x):
        for _ in range(n):
            x = jnp.sin(x) + 1.0
        return x
    return f, (jax.ShapeDtypeStruct((8,), jnp.float32),)


if "tiny_test" not in corpus.FAMILIES:
    corpus.register(corpus.Family(
        name="tiny_test", description="n sin+add steps on an 8-vector",
        build=_build, grid=tuple({"n": n} for n in (1, 2, 3, 4))))
