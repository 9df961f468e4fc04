"""Diffrax programs as its users write them: ``diffeqsolve`` with its own solvers,
step-size controllers, Brownian paths and adjoints (``throw=False``: no host callback, so
the programs also lower for a deviceless GPU target).

A stiff reaction-diffusion system under implicit ESDIRK solvers (Newton iterations with
Lineax solves inside the step loop), batches of SDE paths on a ``VirtualBrownianTree``
with the gradient of a path loss, and a fixed-step explicit solve differentiated through
each of Diffrax's adjoints. The bench's adaptive Tsit5 neural ODE stays out.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .real_support import real_family, uses
from .registry import param_grid, sds


def _solver(name: str):
    import diffrax

    return {"kvaerno3": diffrax.Kvaerno3, "kvaerno5": diffrax.Kvaerno5, "kvaerno4": diffrax.Kvaerno4,
            "dopri5": diffrax.Dopri5, "heun": diffrax.Heun, "bosh3": diffrax.Bosh3,
            "euler": diffrax.Euler, "euler_heun": diffrax.EulerHeun, "spark": diffrax.SPaRK}[name]()


def build_diffrax_stiff_solve(cells: int, solver: str, max_steps: int = 4096):
    """Brusselator reaction-diffusion on ``cells`` grid cells (2 * cells unknowns), an
    implicit solver with a PID controller, saved at 16 times."""
    import diffrax

    def field(t, y, args):
        a, b, diffusion = args
        u, v = y[:cells], y[cells:]

        def lap(z):
            return jnp.roll(z, 1) + jnp.roll(z, -1) - 2.0 * z

        du = a + u * u * v - (b + 1.0) * u + diffusion * lap(u)
        dv = b * u - u * u * v + diffusion * lap(v)
        return jnp.concatenate([du, dv])

    def fn(y0, args):
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(field), _solver(solver), t0=0.0, t1=10.0, dt0=0.01, y0=y0, args=args,
            saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 10.0, 16)),
            stepsize_controller=diffrax.PIDController(rtol=1e-4, atol=1e-6),
            max_steps=max_steps, throw=False)
        return solution.ys

    return fn, (sds((2 * cells,)), (sds(()), sds(()), sds(())))


def build_diffrax_sde_paths(paths: int, steps: int, solver: str, dim: int = 8, hidden: int = 32):
    """Gradient, with respect to a neural drift's weights, of a terminal loss averaged over
    ``paths`` vmapped SDE solves (diagonal noise, ``VirtualBrownianTree``, fixed steps)."""
    import diffrax
    import lineax as lx

    def solve(params, y0, key):
        def drift(t, y, args):
            return jnp.tanh(y @ params["w1"]) @ params["w2"] - y

        def diffusion(t, y, args):
            return lx.DiagonalLinearOperator(0.3 * jnp.ones_like(y))

        levy = diffrax.SpaceTimeLevyArea if solver == "spark" else diffrax.BrownianIncrement
        brownian = diffrax.VirtualBrownianTree(0.0, 1.0, tol=1e-3, shape=(dim,), key=key,
                                               levy_area=levy)
        terms = diffrax.MultiTerm(diffrax.ODETerm(drift),
                                  diffrax.ControlTerm(diffusion, brownian))
        solution = diffrax.diffeqsolve(terms, _solver(solver), 0.0, 1.0, dt0=1.0 / steps, y0=y0,
                                       saveat=diffrax.SaveAt(t1=True), max_steps=steps + 1,
                                       throw=False)
        return solution.ys[-1]

    def fn(params, y0, key_data):
        keys = jax.random.split(jax.random.wrap_key_data(key_data), paths)

        def loss(params):
            ends = jax.vmap(lambda k: solve(params, y0, k))(keys)
            return jnp.mean(jnp.sum(ends**2, axis=-1))

        return jax.value_and_grad(loss)(params)

    params = {"w1": sds((dim, hidden)), "w2": sds((hidden, dim))}
    return fn, (params, sds((dim,)), sds((2,), "uint32"))


def build_diffrax_adjoint_grad(steps: int, adjoint: str, solver: str, dim: int = 16,
                               hidden: int = 64):
    """Gradient of a trajectory loss through a ``steps``-step constant-step solve of an MLP
    vector field, via the chosen adjoint: "recursive" (checkpointed), "direct" or
    "backsolve" (a second, reverse-time solve)."""
    import diffrax

    adjoints = {"recursive": diffrax.RecursiveCheckpointAdjoint, "direct": diffrax.DirectAdjoint,
                "backsolve": diffrax.BacksolveAdjoint}

    def field(t, y, params):  # weights through ``args``: BacksolveAdjoint needs them there
        return jnp.tanh(jnp.tanh(y @ params["w1"]) @ params["w2"])

    def loss(params, y0):
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(field), _solver(solver), 0.0, 1.0, dt0=1.0 / steps, y0=y0, args=params,
            saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 1.0, 8)),
            stepsize_controller=diffrax.ConstantStepSize(), adjoint=adjoints[adjoint](),
            max_steps=steps + 1, throw=False)
        return jnp.sum(solution.ys**2)

    def fn(params, y0):
        return jax.value_and_grad(loss)(params, y0)

    params = {"w1": sds((dim, hidden)), "w2": sds((hidden, dim))}
    return fn, (params, sds((dim,)))


if uses("diffrax", "diffrax"):
    real_family("diffrax", "diffrax_stiff_solve",
                "Diffrax implicit ESDIRK solve of a stiff Brusselator reaction-diffusion system.",
                build_diffrax_stiff_solve,
                param_grid(cells=(8, 32, 128, 512), solver=("kvaerno3", "kvaerno4", "kvaerno5")))
    real_family("diffrax", "diffrax_sde_paths",
                "Gradient through vmapped Diffrax SDE paths on a VirtualBrownianTree.",
                build_diffrax_sde_paths,
                param_grid(paths=(1, 64), steps=(16, 256), solver=("euler", "euler_heun", "spark")))
    real_family("diffrax", "diffrax_adjoint_grad",
                "Gradient through a fixed-step Diffrax solve via recursive, direct or backsolve adjoint.",
                build_diffrax_adjoint_grad,
                param_grid(steps=(16, 128), adjoint=("recursive", "direct", "backsolve"),
                           solver=("heun", "bosh3", "dopri5")))
