"""What the real-library families share: registering a family under its one library tag
only when that library is installed, shape-only parameters, and the optax train step
most of them end in.

The libraries are imported inside the builders, never at corpus import, so importing the
corpus stays fast and does not need them; a family whose library is missing is simply not
registered (:data:`MISSING` names the libraries that were skipped).
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator

import jax
import numpy as np

from .registry import Family, register, sds

__all__ = ["MISSING", "key_data", "library_quiet", "optax_step", "real_family", "uses"]

MISSING: set[str] = set()  # libraries whose families were not registered (not installed)


def uses(library: str, *modules: str) -> bool:
    """True when every import name in ``modules`` is installed; otherwise records
    ``library`` in :data:`MISSING` so the skip is visible, and returns False."""
    try:
        found = all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):  # a parent package that is itself missing
        found = False
    if not found:
        MISSING.add(library)
    return found


def real_family(library: str, name: str, description: str, build: Callable, grid,
                x64: bool = False) -> Family:
    """Registers a family built from ``library``'s code, tagged ``("real", library)`` so
    evaluation can hold a whole library out."""
    return register(Family(name, description, build, grid, x64=x64, tags=("real", library)))


@contextlib.contextmanager
def library_quiet() -> Iterator[None]:
    """Silences deprecation and future warnings that a library raises about its own
    internals (e.g. its pandas calls), which we cannot fix and tests treat as errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", FutureWarning)
        yield


def key_data() -> jax.ShapeDtypeStruct:
    """A threefry key as its raw uint32 words (wrap with ``jax.random.wrap_key_data``),
    so arguments stay plain arrays."""
    return sds((2,), np.uint32)


def optax_step(loss: Callable, optimizer) -> Callable:
    """A fresh train step ``(params, opt_state, *batch) -> (params, opt_state, loss)``:
    ``value_and_grad`` of ``loss(params, *batch)`` and an optax update."""
    import optax

    def step(params, opt_state, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step
