"""Optimistix programs as its users write them: ``least_squares``, ``minimise`` and
``fixed_point`` with its own solvers (``throw=False``: no host callback).

Curve fitting of a sum of damped oscillations by Levenberg-Marquardt, Gauss-Newton or
Dogleg; the other minimisers (nonlinear CG, L-BFGS, DFP, Nelder-Mead, an optax minimiser)
on a logistic-regression loss; and a deep-equilibrium layer whose fixed point is found by
iteration or Newton and differentiated by the implicit function theorem. The bench's
Newton root find and BFGS on Rosenbrock stay out.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .real_support import real_family, uses
from .registry import param_grid, sds


def build_optx_curve_fit(solver: str, terms: int, points: int = 256, max_steps: int = 256):
    """Fit ``terms`` damped oscillations ``a exp(-b t) cos(w t + p)`` to ``points``
    samples by nonlinear least squares."""
    import optimistix as optx

    solvers = {"levenberg_marquardt": optx.LevenbergMarquardt, "gauss_newton": optx.GaussNewton,
               "dogleg": optx.Dogleg, "indirect_lm": optx.IndirectLevenbergMarquardt}

    def residual(theta, data):
        t, y = data
        a, b, w, p = jnp.split(theta, 4)
        model = jnp.sum(a[:, None] * jnp.exp(-b[:, None] ** 2 * t) * jnp.cos(w[:, None] * t + p[:, None]),
                        axis=0)
        return model - y

    def fn(theta0, t, y):
        solution = optx.least_squares(residual, solvers[solver](rtol=1e-6, atol=1e-6), theta0,
                                      args=(t, y), max_steps=max_steps, throw=False)
        return solution.value

    return fn, (sds((4 * terms,)), sds((points,)), sds((points,)))


def build_optx_minimise(solver: str, features: int, samples: int = 512, max_steps: int = 200):
    """Minimise an L2-regularised logistic-regression loss over ``features`` weights."""
    import optax
    import optimistix as optx

    solvers = {"nonlinear_cg": lambda: optx.NonlinearCG(rtol=1e-6, atol=1e-6),
               "lbfgs": lambda: optx.LBFGS(rtol=1e-6, atol=1e-6),
               "dfp": lambda: optx.DFP(rtol=1e-6, atol=1e-6),
               "nelder_mead": lambda: optx.NelderMead(rtol=1e-6, atol=1e-6),
               "optax_adam": lambda: optx.OptaxMinimiser(optax.adam(1e-2), rtol=1e-6, atol=1e-6)}

    def loss(w, data):
        x, y = data
        logits = x @ w
        return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits) + 1e-3 * jnp.sum(w**2)

    def fn(w0, x, y):
        return optx.minimise(loss, solvers[solver](), w0, args=(x, y), max_steps=max_steps,
                             throw=False).value

    return fn, (sds((features,)), sds((samples, features)), sds((samples,)))


def build_optx_deq_grad(width: int, solver: str, batch: int = 16):
    """Gradient of a loss through a deep-equilibrium layer ``z = tanh(W z + U x + b)``
    solved per example by ``optx.fixed_point`` (implicit adjoint)."""
    import optimistix as optx

    solvers = {"iteration": lambda: optx.FixedPointIteration(rtol=1e-5, atol=1e-5),
               "newton": lambda: optx.Newton(rtol=1e-5, atol=1e-5),
               "chord": lambda: optx.Chord(rtol=1e-5, atol=1e-5)}

    def equilibrium(params, x):
        def f(z, x):
            return jnp.tanh(0.5 * z @ params["w"] + x @ params["u"] + params["b"])

        return optx.fixed_point(f, solvers[solver](), jnp.zeros(width), args=x, max_steps=100,
                                throw=False).value

    def fn(params, x, y):
        def loss(params):
            z = jax.vmap(lambda x: equilibrium(params, x))(x)
            return jnp.mean((z @ params["head"] - y) ** 2)

        return jax.value_and_grad(loss)(params)

    params = {"w": sds((width, width)), "u": sds((32, width)), "b": sds((width,)),
              "head": sds((width,))}
    return fn, (params, sds((batch, 32)), sds((batch,)))


if uses("optimistix", "optimistix", "optax"):
    real_family("optimistix", "optx_curve_fit",
                "Optimistix least-squares curve fit (Levenberg-Marquardt, Gauss-Newton, Dogleg).",
                build_optx_curve_fit,
                param_grid(solver=("levenberg_marquardt", "gauss_newton", "dogleg", "indirect_lm"),
                           terms=(1, 4, 16)))
    real_family("optimistix", "optx_minimise",
                "Optimistix minimisers (nonlinear CG, L-BFGS, DFP, Nelder-Mead, optax) on logistic loss.",
                build_optx_minimise,
                param_grid(solver=("nonlinear_cg", "lbfgs", "dfp", "nelder_mead", "optax_adam"),
                           features=(8, 64, 256)))
    real_family("optimistix", "optx_deq_grad",
                "Gradient through an Optimistix fixed-point deep-equilibrium layer (implicit adjoint).",
                build_optx_deq_grad,
                param_grid(width=(32, 128, 512), solver=("iteration", "newton", "chord")))
