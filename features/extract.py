"""The one entry point both training and prediction use to turn a program into features."""

from __future__ import annotations

import contextlib
import gc
import math
import threading
from typing import Any

from . import environment
from .jaxpr import jaxpr_features
from .schema import JAXPR_FEATURES, Features
from .stablehlo import parse_module, stablehlo_features
from .text_guard import RefusedText

# `region_tallies` records every op at every call of its function (a line's ops are
# charged to each stack that reaches them): it refuses a module that inlines to more ops.
# The corpus's largest program inlines to 193k.
MAX_BLAMED_OPS = 2_000_000

# The walk builds a few small containers per op and frees them by reference counting, but
# each allocation counts towards the cyclic collector, whose passes over the growing heap
# took a third of a 100k-op walk. It is paused while any thread extracts.
_GC_LOCK = threading.Lock()
_gc_pausers = [0, False]  # threads extracting, whether the collector was on before


@contextlib.contextmanager
def _collector_paused():
    with _GC_LOCK:
        if _gc_pausers[0] == 0:
            _gc_pausers[1] = gc.isenabled()
            gc.disable()
        _gc_pausers[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pausers[0] -= 1
            if _gc_pausers[0] == 0 and _gc_pausers[1]:
                gc.enable()


def from_stablehlo(text: str, backend: str | None = "cpu", target: str | None = None) -> Features:
    """Features of a StableHLO module given as text (what `Lowered.as_text()` prints).

    Jaxpr features are NaN: text carries no jaxpr. Raises `StableHLOParseError` for text
    the MLIR parser rejects, `UnknownTargetError` for an unknown backend or target.

    Example:
        >>> feats = from_stablehlo(jax.jit(f).lower(x).as_text())
    """
    # No lock: the threads of a service worker parse and walk at once. Every MLIR call
    # of the bindings holds the GIL (a parse does not release it), and JAX's context
    # locks its own uniquing besides (it runs a thread pool), so they interleave as any
    # Python does; a lock held for a whole extraction made a small request wait behind
    # a large one.
    with _collector_paused():
        return _from_module(parse_module(text), backend, target)


def regions_from_stablehlo(text: str, backend: str | None = "cpu",
                           target: str | None = None) -> tuple[Features, dict]:
    """Features of StableHLO module text and its ops' source regions (`regions.py`):
    text printed with `as_text(debug_info=True)` carries the locations they come from.
    Raises `RefusedText` for a module that inlines to more than `MAX_BLAMED_OPS` ops."""
    from .regions import region_tallies

    with _collector_paused():
        module = parse_module(text)
        features = _from_module(module, backend, target)
        inlined = features.values["hlo_ops_inlined"]
        if inlined > MAX_BLAMED_OPS:
            raise RefusedText(f"inlines to {inlined:.3g} ops once every call is expanded; "
                              f"blame takes at most {MAX_BLAMED_OPS:,}")
        return features, region_tallies(module, features.backend)


def _from_module(module, backend: str | None, target: str | None) -> Features:
    backend, target = environment.normalize(backend, target)
    values, info = stablehlo_features(module, backend)
    values.update(dict.fromkeys(JAXPR_FEATURES, math.nan))
    return Features(values, backend=backend, target=target,
                    jaxlib_version=environment.jaxlib_version(),
                    host_cpu_count=environment.host_cpu_count(), info=info)


def lower(f, *args: Any, **kwargs: Any):
    """Trace and lower `f` (a function, a jitted function) without compiling: (traced, lowered)."""
    import jax

    jitted = f if hasattr(f, "trace") else jax.jit(f)
    traced = jitted.trace(*args, **kwargs)
    return traced, traced.lower()


def from_lowered(traced, lowered, backend: str | None = "cpu", target: str | None = None,
                 jaxpr: bool = True) -> Features:
    """Features of an already traced and lowered program (no re-tracing).

    The StableHLO module is walked in memory: printing it and parsing the text back (what
    `from_stablehlo` does) gives the same numbers, a test checks, and costs half again
    as much. `jaxpr=False` leaves the jaxpr features NaN: the model does not read them,
    and prediction skips their cost.
    """
    with _collector_paused():
        features = _from_module(lowered.compiler_ir("stablehlo"), backend, target)
    if traced is None or not jaxpr:
        return features
    values = dict(features.values)
    info = dict(features.info)
    jaxpr_values, jaxpr_info = jaxpr_features(traced.jaxpr)
    values.update(jaxpr_values)
    info.update(jaxpr_info)
    return Features(values, backend=features.backend, target=features.target,
                    jaxlib_version=features.jaxlib_version,
                    host_cpu_count=features.host_cpu_count, info=info)


def extract(f, *args: Any, backend: str | None = None, target: str | None = None,
            **kwargs: Any) -> Features:
    """Features of `f(*args, **kwargs)`: traces and lowers with jax.jit, never compiles.

    `args` may be arrays or `jax.ShapeDtypeStruct`; `f` may already be jitted (its static
    arguments then work as with `jax.jit`). The model inputs are identical to what
    `from_stablehlo` gives for the module's text.

    Example:
        >>> feats = extract(lambda x: jnp.sin(x) @ x, jax.ShapeDtypeStruct((64, 64), "float32"))
        >>> feats["op_dot_general"]
        1.0
    """
    traced, lowered = lower(f, *args, **kwargs)
    return from_lowered(traced, lowered, backend=backend, target=target)
