"""Lineax programs as its users write them: ``lx.linear_solve`` of a typed operator with
one of its direct or iterative solvers.

Dense matrix operators (tagged positive definite where the solver needs it) solved for a
batch of right-hand sides under ``vmap``, optionally differentiated with respect to the
matrix; and a matrix-free 2-D Poisson operator (``FunctionLinearOperator`` of a stencil)
under Krylov solvers, whose while loops carry the stencil.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .real_support import real_family, uses
from .registry import param_grid, sds

_DIRECT = ("lu", "qr", "svd", "cholesky")
_KRYLOV = ("cg", "gmres", "bicgstab")


def _solver(name: str, max_steps: int = 200):
    import lineax as lx

    if name in _KRYLOV:
        krylov = {"cg": lx.CG, "gmres": lx.GMRES, "bicgstab": lx.BiCGStab}[name]
        return krylov(rtol=1e-5, atol=1e-5, max_steps=max_steps)
    return {"lu": lx.LU, "qr": lx.QR, "svd": lx.SVD, "cholesky": lx.Cholesky}[name]()


def build_lineax_dense_solve(solver: str, n: int, grad: bool, rhs: int = 16):
    """``rhs`` solves ``(A A^T + n I) x = b`` with one Lineax solver, vmapped over the
    right-hand sides; ``grad``: ``value_and_grad`` of the solutions' norm in ``A``."""
    import lineax as lx

    def solve_all(a, b):
        matrix = a @ a.T + n * jnp.eye(n)
        operator = lx.MatrixLinearOperator(matrix, lx.positive_semidefinite_tag)
        return jax.vmap(lambda b: lx.linear_solve(operator, b, _solver(solver), throw=False).value)(b)

    if grad:
        def fn(a, b):
            return jax.value_and_grad(lambda a: jnp.sum(solve_all(a, b) ** 2))(a)
    else:
        def fn(a, b):
            return solve_all(a, b)

    return fn, (sds((n, n)), sds((rhs, n)))


def build_lineax_poisson_solve(grid: int, solver: str, max_steps: int):
    """A matrix-free 2-D Poisson solve (5-point stencil with a screening term) on a
    ``grid`` x ``grid`` field, by a Krylov solver of at most ``max_steps`` iterations."""
    import lineax as lx

    def apply(u):
        lap = (jnp.roll(u, 1, 0) + jnp.roll(u, -1, 0) + jnp.roll(u, 1, 1) + jnp.roll(u, -1, 1)
               - 4.0 * u)
        return 0.1 * u - lap

    def fn(f):
        operator = lx.FunctionLinearOperator(apply, jax.ShapeDtypeStruct(f.shape, f.dtype),
                                             lx.positive_semidefinite_tag)
        return lx.linear_solve(operator, f, _solver(solver, max_steps), throw=False).value

    return fn, (sds((grid, grid)),)


if uses("lineax", "lineax"):
    real_family("lineax", "lineax_dense_solve",
                "Lineax LU/QR/SVD/Cholesky/CG/GMRES/BiCGStab dense solves vmapped over RHS, "
                "optionally differentiated.",
                build_lineax_dense_solve,
                param_grid(solver=_DIRECT + _KRYLOV, n=(32, 128, 384), grad=(False, True)))
    real_family("lineax", "lineax_poisson_solve",
                "Matrix-free Lineax Krylov solve of a 2-D screened Poisson stencil operator.",
                build_lineax_poisson_solve,
                param_grid(grid=(32, 128, 512), solver=_KRYLOV, max_steps=(50, 500)))
