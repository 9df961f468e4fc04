"""Batched (vmapped) linear-algebra families with gradients over the batch, including the
Cholesky-solve user report (seed, float64)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .registry import Family, param_grid, register, sds


def build_cholesky_seed(
    nbatch: int, nobs: int = 256, ngp: int = 64, grad: bool = True
) -> tuple[Callable, tuple]:
    """User report: value_and_grad of the mean of a vmapped Cholesky solve (float64).

    ``fmat`` is a (nobs, 2*ngp) sin/cos design matrix captured as a constant; the
    program's argument is ``pars`` of shape (nbatch, 2*ngp).
    """
    t = np.linspace(0.0, 1.0, nobs)
    freqs = np.arange(1, ngp + 1, dtype=np.float64)
    fmat = np.zeros((nobs, 2 * ngp), dtype=np.float64)
    fmat[:, ::2] = np.sin(2.0 * np.pi * freqs * t[:, np.newaxis])
    fmat[:, 1::2] = np.cos(2.0 * np.pi * freqs * t[:, np.newaxis])
    one = np.identity(nobs, dtype=np.float64)
    ones = np.ones(nobs, dtype=np.float64)

    def func(pars):
        ftf = fmat @ jnp.diag(pars**2) @ fmat.T + one
        cf = jsl.cho_factor(ftf)
        b = jsl.cho_solve(cf, ones)
        return b.mean()

    def objective(pars):
        return jax.vmap(func)(pars).mean()

    if grad:

        def fn(pars):
            return jax.value_and_grad(objective)(pars)

    else:

        def fn(pars):
            return objective(pars)

    return fn, (sds((nbatch, 2 * ngp), np.float64),)


def build_triangular_solve(nbatch: int, n: int, rhs: int, grad: bool) -> tuple[Callable, tuple]:
    """Vmapped ``solve_triangular`` of a diagonally shifted lower triangle; grad w.r.t. it."""
    shift = np.float32(n) * np.eye(n, dtype=np.float32)

    def func(a, b):
        x = jsl.solve_triangular(jnp.tril(a) + shift, b, lower=True)
        return jnp.sum(x**2)

    def objective(a, b):
        return jax.vmap(func)(a, b).mean()

    if grad:

        def fn(a, b):
            return jax.value_and_grad(objective)(a, b)

    else:

        def fn(a, b):
            return objective(a, b)

    return fn, (sds((nbatch, n, n)), sds((nbatch, n, rhs)))


def build_eigh(nbatch: int, n: int, outputs: str, grad: bool) -> tuple[Callable, tuple]:
    """Vmapped ``eigh`` of symmetrised matrices; ``outputs`` "values" or "vectors"."""
    if outputs not in ("values", "vectors"):
        raise ValueError(f"outputs must be 'values' or 'vectors', got {outputs!r}")
    weights = np.linspace(1.0, 2.0, n, dtype=np.float32)

    def func(a):
        w, v = jnp.linalg.eigh(0.5 * (a + a.T))
        if outputs == "values":
            return jnp.sum(w * weights)
        # Squares make the loss invariant to the sign of each eigenvector.
        return jnp.sum(w) + jnp.sum(v**2 * weights)

    def objective(a):
        return jax.vmap(func)(a).mean()

    if grad:

        def fn(a):
            return jax.value_and_grad(objective)(a)

    else:

        def fn(a):
            return objective(a)

    return fn, (sds((nbatch, n, n)),)


register(
    Family(
        name="cholesky_seed",
        description="User report: value_and_grad of a vmapped float64 Cholesky solve over a batch.",
        build=build_cholesky_seed,
        grid=param_grid(
            nbatch=(16, 32, 64, 128, 256, 512, 1024, 2048),
            nobs=(64, 256),
            ngp=(16, 64),
            grad=(False, True),
        ),
        x64=True,
        tags=("seed",),
    )
)

register(
    Family(
        name="triangular_solve",
        description="Vmapped solve_triangular over a batch, forward or value_and_grad.",
        build=build_triangular_solve,
        grid=param_grid(
            nbatch=(1, 4, 16, 64, 256, 1024, 4096), n=(16, 128), rhs=(1, 16), grad=(False, True)
        ),
    )
)

register(
    Family(
        name="eigh",
        description="Vmapped eigh (values or vectors) over a batch, forward or value_and_grad.",
        build=build_eigh,
        grid=param_grid(
            nbatch=(1, 2, 8, 32, 128, 512, 2048),
            n=(8, 64),
            outputs=("values", "vectors"),
            grad=(False, True),
        ),
    )
)
