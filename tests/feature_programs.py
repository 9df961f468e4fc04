"""Small programs and argument shapes the feature tests share."""

import jax
import jax.numpy as jnp

X = jax.ShapeDtypeStruct((8, 8), jnp.float32)
VEC = jax.ShapeDtypeStruct((16,), jnp.float32)
MAT = jax.ShapeDtypeStruct((16, 16), jnp.float32)


def f32(*shape):
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def unrolled(steps):
    def f(x):
        for _ in range(steps):
            x = jnp.sin(x) * 2.0 + x
        return x
    return f
