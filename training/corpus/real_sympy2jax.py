"""sympy2jax programs as its users write them: SymPy expressions turned into an Equinox
``SymbolicModule`` whose floating-point constants are trainable, fitted to data with
optax (symbolic regression's constant-fitting step).

The expressions are sums of ``terms`` damped, phase-shifted trigonometric and rational
terms in two variables, ``outputs`` of them at once; every term contributes its own
constants, so the program widens with the expression.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .real_support import real_family, uses
from .registry import param_grid, sds


def _expressions(terms: int, outputs: int):
    import sympy

    x, y = sympy.symbols("x y")
    shapes = (lambda a, b: sympy.sin(a * x + b * y), lambda a, b: sympy.exp(-a * x**2) * sympy.cos(b * y),
              lambda a, b: a * x * y / (1 + b * x**2), lambda a, b: sympy.tanh(a * x - b) * y)
    exprs = []
    for o in range(outputs):
        total = sympy.Float(0.1 * (o + 1))
        for k in range(terms):
            a, b, c = (sympy.Float(round(0.3 + 0.07 * (k + o + i), 3)) for i in range(3))
            total += c * shapes[(k + o) % len(shapes)](a, b)
        exprs.append(total)
    return exprs


def build_sympy2jax_fit_step(terms: int, outputs: int, points: int = 512):
    """Adam step fitting the constants of ``outputs`` symbolic expressions (``terms``
    terms each) to targets at ``points`` samples by mean squared error."""
    import equinox as eqx
    import optax
    import sympy2jax

    module = sympy2jax.SymbolicModule(_expressions(terms, outputs))
    params, static = eqx.partition(module, eqx.is_inexact_array)
    params = jax.tree.map(lambda a: sds(a.shape, a.dtype), params)
    optimizer = optax.adam(1e-2)

    def fn(params, opt_state, x, y, target):
        def loss(params):
            pred = jnp.stack(eqx.combine(params, static)(x=x, y=y), axis=-1)  # one per expression
            return jnp.mean((pred - target) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return fn, (params, jax.eval_shape(optimizer.init, params), sds((points,)), sds((points,)),
                sds((points, outputs)))


if uses("sympy2jax", "sympy2jax", "sympy", "equinox", "optax"):
    real_family("sympy2jax", "sympy2jax_fit_step",
                "sympy2jax SymbolicModule constant fitting (symbolic regression step) with Adam.",
                build_sympy2jax_fit_step,
                param_grid(terms=(2, 8, 16, 32, 64, 128), outputs=(1, 4, 16),
                           where=lambda p: p["terms"] * p["outputs"] <= 128))
