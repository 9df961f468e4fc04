"""The reference program timed in every measurement batch to normalize drift and machines.

It is small (tens of milliseconds to compile on a laptop core), fixed forever, and mixes
the op kinds most programs have: matmuls, elementwise chains, a reduction and a scan.
Changing it changes `harness_version` and invalidates normalization across versions.
"""

from __future__ import annotations


def build_reference():
    """A fresh (fn, args) pair for the reference program; a new function object each call."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def reference(x, w):
        for _ in range(2):
            x = jnp.tanh(x @ w) + 0.5 * x
        def body(carry, _):
            return jnp.sin(carry) * 1.5 + carry, None
        x, _ = lax.scan(body, x, None, length=4)
        return jnp.sum(x * x)

    args = (jax.ShapeDtypeStruct((32, 64), jnp.float32),
            jax.ShapeDtypeStruct((64, 64), jnp.float32))
    return reference, args
