"""Control-flow and transformation families: while loops, cond/switch, nested inner
``jax.jit`` calls and rematerialisation (``jax.checkpoint``)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import Family, param_grid, register, sds

_ACTIVATIONS = (jnp.tanh, jnp.sin, jax.nn.relu, jax.nn.sigmoid, jnp.cos)


def build_while(body: int, width: int, carries: int) -> tuple[Callable, tuple]:
    """``lax.while_loop`` with a data-dependent stop test and ``carries`` coupled states."""
    ws = [sds((width, width)) for _ in range(body)]
    xs = [sds((8, width)) for _ in range(carries)]

    def fn(ws, xs, tol):
        def cond(state):
            i, xs = state
            return (i < 1000) & (jnp.max(jnp.abs(xs[0])) > tol)

        def step(state):
            i, xs = state
            new, prev = [], xs[-1]
            for x in xs:
                for w in ws:
                    x = jnp.tanh(x @ w + 0.5 * prev)
                new.append(x)
                prev = x
            return i + 1, new

        return lax.while_loop(cond, step, (jnp.int32(0), xs))

    return fn, (ws, xs, sds(()))


def build_switch(branches: int, size: int, width: int, grad: bool) -> tuple[Callable, tuple]:
    """``lax.cond`` (2 branches) or ``lax.switch`` over distinct matmul chains."""
    ws = [[sds((width, width)) for _ in range(size)] for _ in range(branches)]

    def make_branch(b: int) -> Callable:
        act = _ACTIVATIONS[b % len(_ACTIVATIONS)]

        def branch(ws, x):
            for w in ws[b]:
                x = act(x @ w)
            return x

        return branch

    fns = [make_branch(b) for b in range(branches)]

    def apply(ws, i, x):
        if branches == 2:
            return lax.cond(i > 0, fns[1], fns[0], ws, x)
        return lax.switch(i, fns, ws, x)

    if not grad:

        def fn(ws, i, x):
            return apply(ws, i, x)

    else:

        def fn(ws, i, x):
            return jax.value_and_grad(lambda ws: jnp.sum(apply(ws, i, x) ** 2))(ws)

    return fn, (ws, sds((), np.int32), sds((8, width)))


def build_nested_jit(count: int, depth: int, distinct: bool) -> tuple[Callable, tuple]:
    """``count`` calls of inner ``jax.jit`` functions, each nested ``depth`` levels deep.

    With ``distinct`` every call gets its own freshly built chain of jitted functions;
    otherwise one chain is reused, so the lowered module holds one copy of it.
    """

    def make_chain() -> Callable:
        # Fresh function objects every time, so inner jits are never cache hits either.
        def leaf(x, w):
            return jnp.tanh(x @ w)

        f = jax.jit(leaf)
        for _ in range(depth - 1):

            def wrap(x, w, inner=f):
                return inner(jnp.sin(x) @ w, w) + x

            f = jax.jit(wrap)
        return f

    chains = [make_chain() for _ in range(count)] if distinct else [make_chain()] * count

    def fn(x, w):
        for chain in chains:
            x = chain(x, w)
        return x

    return fn, (sds((8, 64)), sds((64, 64)))


def build_remat(blocks: int, layers: int, width: int, policy: str) -> tuple[Callable, tuple]:
    """value_and_grad of ``blocks`` blocks, each optionally wrapped in ``jax.checkpoint``.

    Args:
        policy: "none" (no remat), "full" (save nothing) or "dots" (save matmul outputs).
    """
    if policy not in ("none", "full", "dots"):
        raise ValueError(f"policy must be 'none', 'full' or 'dots', got {policy!r}")
    params = [[sds((width, width)) for _ in range(layers)] for _ in range(blocks)]

    def block(ws, x):
        for w in ws:
            x = jax.nn.gelu(x @ w) + x
        return x

    if policy == "full":
        block = jax.checkpoint(block)
    elif policy == "dots":
        block = jax.checkpoint(block, policy=jax.checkpoint_policies.dots_saveable)

    def loss(params, x):
        for ws in params:
            x = block(ws, x)
        return jnp.mean(x**2)

    def fn(params, x):
        return jax.value_and_grad(loss)(params, x)

    return fn, (params, sds((16, width)))


register(
    Family(
        name="while_loop",
        description="lax.while_loop with a data-dependent stop test and coupled carries.",
        build=build_while,
        grid=param_grid(body=(1, 2, 4, 8, 16, 32), width=(16, 128, 512), carries=(1, 2, 4)),
    )
)

register(
    Family(
        name="cond_switch",
        description="lax.cond / lax.switch over distinct branches, forward or value_and_grad.",
        build=build_switch,
        grid=param_grid(
            branches=(2, 4, 8, 16, 32, 64),
            size=(1, 4, 16),
            width=(16, 256),
            grad=(False, True),
            # Under grad every branch returns every branch's residuals, so ops grow as
            # branches**2: 16x4 ~1.4 s but 64x4 ~48 s. Grad is capped at 128 branch stages.
            where=lambda p: not p["grad"] or p["branches"] * p["size"] <= 128,
        )
        + ({"branches": 64, "size": 4, "width": 256, "grad": True},),  # ~48 s
    )
)

register(
    Family(
        name="nested_jit",
        description="Calls of inner jax.jit functions (count, nesting depth, distinct or reused).",
        build=build_nested_jit,
        grid=param_grid(count=(1, 2, 4, 8, 16, 32, 64), depth=(1, 2, 3, 4), distinct=(False, True)),
    )
)

register(
    Family(
        name="remat",
        description="value_and_grad of blocks wrapped in jax.checkpoint (none/full/dots policy).",
        build=build_remat,
        grid=param_grid(
            blocks=(1, 2, 4, 8, 16, 32),
            layers=(1, 4),
            width=(32, 256),
            policy=("none", "full", "dots"),
            # Largest: 32 blocks x 4 layers ~1.5-2 s; 128 layers are left out.
            where=lambda p: p["blocks"] * p["layers"] <= 64,
        ),
    )
)
