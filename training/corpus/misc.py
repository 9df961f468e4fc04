"""Assorted families: large captured constants, many-leaf pytrees, PRNG split chains and
``lax.associative_scan``."""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .registry import Family, param_grid, register, sds


def build_constants(size: int, count: int, mode: str) -> tuple[Callable, tuple]:
    """``count`` captured float32 numpy constants of ``size`` elements each.

    Args:
        mode: "add" (elementwise chain producing a ``size`` vector), "reduce" (a dot
            of each constant with the input, producing a scalar) or "matmul" (each constant
            a square weight matrix, ``tanh(x @ w)`` layers over an (8, sqrt(size)) input:
            numpy weights closed over by a jitted model).
    """
    if mode not in ("add", "reduce", "matmul"):
        raise ValueError(f"mode must be 'add', 'reduce' or 'matmul', got {mode!r}")
    rng = np.random.default_rng(count * 1_000_003 + size)
    consts = [rng.standard_normal(size).astype(np.float32) for _ in range(count)]
    if mode == "matmul":
        side = math.isqrt(size)
        weights = [c[:side * side].reshape(side, side) for c in consts]

        def layers(x):
            for w in weights:
                x = jnp.tanh(x @ w)
            return x

        return layers, (sds((8, side)),)

    def fn(x):
        if mode == "add":
            for c in consts:
                x = 0.5 * x + c
            return x
        return sum(jnp.dot(c, x) for c in consts)

    return fn, (sds((size,)),)


_FOLD_MODES = ("elementwise", "matmul", "transposed", "batched")


def build_constant_fold(side: int, ops: int, mode: str) -> tuple[Callable, tuple]:
    """Work XLA does while compiling: ``ops`` steps computed from two captured (side, side)
    float32 tables alone, then applied to the input, so constant folding evaluates them.

    Args:
        mode: "elementwise" (sine, product with the other table, exponential in turn:
            the interpreter's element loops), "matmul" (matrix products of the tables,
            which the interpreter hands to a library), "transposed" (products contracting
            both tables' last dimensions, ``"ij,kj->ik"``) or "batched" (the tables as 4
            blocks of half their side, multiplied block by block): the interpreter
            evaluates those two one multiply-add at a time.
    """
    if mode not in _FOLD_MODES:
        raise ValueError(f"mode must be one of {_FOLD_MODES}, got {mode!r}")
    rng = np.random.default_rng(side * 1_000_003 + ops)
    a, b = (rng.standard_normal((side, side)).astype(np.float32) / side for _ in range(2))

    def fn(x):
        table, other = jnp.asarray(a), jnp.asarray(b)
        for step in range(ops):
            if mode == "matmul":
                table = table @ other
            elif mode == "transposed":
                table = jnp.einsum("ij,kj->ik", table, other)
            elif mode == "batched":
                half = (4, side // 2, side // 2)
                table = jnp.einsum("bij,bjk->bik", table.reshape(half),
                                   other.reshape(half)).reshape(side, side)
            else:
                table = (jnp.sin(table), table * other, jnp.exp(-table))[step % 3]
        return x @ table

    return fn, (sds((8, side)),)


def build_pytree(leaves: int, leaf_size: int, ops: int, grad: bool) -> tuple[Callable, tuple]:
    """Optimizer-like ``tree_map`` update over a nested dict with ``leaves`` leaves."""
    tree = {
        f"layer{i // 8}": {f"p{j}": sds((leaf_size,)) for j in range(min(8, leaves - i))}
        for i in range(0, leaves, 8)
    }

    def update(p, g):
        for _ in range(ops):
            p = 0.9 * p - 0.01 * jnp.tanh(g + p)
        return p

    if not grad:

        def fn(params, grads):
            return jax.tree_util.tree_map(update, params, grads)

        return fn, (tree, tree)

    def loss(params):
        return sum(jnp.sum(jnp.sin(p) ** 2) for p in jax.tree_util.tree_leaves(params))

    def fn(params):
        value, grads = jax.value_and_grad(loss)(params)
        return value, jax.tree_util.tree_map(update, params, grads)

    return fn, (tree,)


_KEY_WORDS = {"threefry2x32": 2, "rbg": 4}


def build_random(length: int, mode: str, impl: str) -> tuple[Callable, tuple]:
    """A chain of ``length`` PRNG operations on a key passed as raw key data.

    Args:
        mode: "split" (split chain), "split_draw" (split and draw normals each step) or
            "fold_in" (fold the step index in, then draw once).
        impl: PRNG implementation, "threefry2x32" or "rbg".
    """
    if mode not in ("split", "split_draw", "fold_in"):
        raise ValueError(f"mode must be 'split', 'split_draw' or 'fold_in', got {mode!r}")
    if impl not in _KEY_WORDS:
        raise ValueError(f"impl must be one of {sorted(_KEY_WORDS)}, got {impl!r}")

    def fn(key_data):
        key = jax.random.wrap_key_data(key_data, impl=impl)
        acc = jnp.zeros((16,), jnp.float32)
        for i in range(length):
            if mode == "fold_in":
                key = jax.random.fold_in(key, i)
                continue
            key, sub = jax.random.split(key)
            if mode == "split_draw":
                acc = acc + jax.random.normal(sub, (16,))
        if mode == "fold_in":
            acc = jax.random.uniform(key, (16,))
        return jax.random.key_data(key), acc

    return fn, (sds((_KEY_WORDS[impl],), np.uint32),)


def _affine(left, right):
    a1, b1 = left
    a2, b2 = right
    return a1 * a2, a2 * b1 + b2


_ASSOC_OPS = {"add": jnp.add, "mul": jnp.multiply, "max": jnp.maximum, "affine": _affine}


def build_assoc_scan(length: int, op: str, grad: bool) -> tuple[Callable, tuple]:
    """``lax.associative_scan`` of ``length`` elements with a sum, product, max or the
    affine (linear recurrence) combine."""
    if op not in _ASSOC_OPS:
        raise ValueError(f"op must be one of {sorted(_ASSOC_OPS)}, got {op!r}")
    combine = _ASSOC_OPS[op]

    def run(a, b):
        if op == "affine":
            return jnp.sum(lax.associative_scan(combine, (a, b))[1])
        return jnp.sum(lax.associative_scan(combine, a * b))

    if grad:

        def fn(a, b):
            return jax.value_and_grad(run, argnums=(0, 1))(a, b)

    else:

        def fn(a, b):
            return run(a, b)

    return fn, (sds((length,)), sds((length,)))


register(
    Family(
        name="constants",
        description="Large captured numpy constants (size, count): elementwise, reduced, or "
                    "as matmul weights.",
        build=build_constants,
        grid=param_grid(
            size=(16, 256, 4096, 65536, 1048576, 4194304),
            count=(1, 2, 4, 16, 64),
            mode=("add", "reduce", "matmul"),
            # Cheap (<0.6 s) up to 8M captured elements, mostly tracing/transfer of bytes.
            where=lambda p: p["size"] * p["count"] <= 8 * 1048576,
        ),
    )
)

register(
    Family(
        name="constant_fold",
        description="Steps computed from captured tables alone (side, ops), elementwise or "
                    "as matrix products (plain, transposed or batched): XLA evaluates them "
                    "while compiling.",
        build=build_constant_fold,
        # elementwise steps cost ~0.5 us per element each here (1024^2 tables: +0.5 s);
        # a 1024^3 matrix product +0.3 s, transposed ~20 s (~18 ns a multiply-add)
        grid=param_grid(
            side=(128, 512, 1024, 2048, 3072, 4096),
            ops=(1, 3, 9),
            mode=_FOLD_MODES,
            where=lambda p: p["side"] ** 2 * p["ops"] <= 40_000_000
            and (p["mode"] == "elementwise" or p["side"] <= 2048)
            and (p["mode"] in ("elementwise", "matmul") or p["side"] ** 3 * p["ops"] <= 1.25e9),
        ),
    )
)

register(
    Family(
        name="pytree_map",
        description="tree_map optimizer-style update over a pytree with many leaves.",
        build=build_pytree,
        # 1024 leaves, 4 ops, grad ~16 s; 4096 leaves forward ~11 s (plus ~4 s tracing).
        grid=param_grid(
            leaves=(1, 4, 16, 64, 256, 1024, 4096),
            leaf_size=(1, 1024),
            ops=(1, 4),
            grad=(False, True),
            where=lambda p: p["leaves"] <= 1024 or (p["ops"] == 1 and not p["grad"]),
        ),
    )
)

register(
    Family(
        name="random_split",
        description="Chains of jax.random.split / fold_in, optionally drawing at each step.",
        build=build_random,
        grid=param_grid(
            # ~0.15 s of compile per split: length 32 ~3-10 s; one tail point at 128 ~29 s
            # wall / 14 s CPU.
            length=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32),
            mode=("split", "split_draw", "fold_in"),
            impl=("threefry2x32", "rbg"),
        )
        + ({"length": 128, "mode": "split_draw", "impl": "threefry2x32"},),
    )
)

register(
    Family(
        name="assoc_scan",
        description="lax.associative_scan (add, mul, max, affine recurrence), forward or grad.",
        build=build_assoc_scan,
        grid=param_grid(
            # Cost grows with the log2(length) levels; 32768 with grad ~7 s.
            length=(2, 4, 8, 32, 128, 1024, 32768),
            op=("add", "mul", "max", "affine"),
            grad=(False, True),
        ),
    )
)
