"""Turning what a user hands us (a function and args, a Traced, a Lowered) into features."""

from __future__ import annotations

from typing import Any

from costmodel.features import Features, from_lowered, normalize_target

_PLATFORM = {"cpu": "cpu", "gpu": "cuda"}


def default_backend() -> str:
    """The backend JAX would compile for here, as costmodel names it (cpu or gpu)."""
    import jax

    return "gpu" if jax.default_backend() in ("gpu", "cuda", "rocm") else "cpu"


def trace_and_lower(f, args: tuple, kwargs: dict, backend: str):
    """(traced or None, lowered) for `f`, lowered for `backend`'s platform when possible.

    Lowering for another platform than the local one (`lowering_platforms`) needs that
    platform's lowering rules; when JAX lacks them we fall back to the local lowering.
    """
    import jax

    if isinstance(f, jax.stages.Lowered):
        return None, f
    if isinstance(f, jax.stages.Traced):
        traced = f
    else:
        jitted = f if hasattr(f, "trace") else jax.jit(f)
        traced = jitted.trace(*args, **kwargs)
    platform = _PLATFORM[backend]
    local = "cpu" if default_backend() == "cpu" else "cuda"
    if platform != local:
        try:
            return traced, traced.lower(lowering_platforms=(platform,))
        except Exception:  # missing lowering rules for that platform: use the local one
            pass
    return traced, traced.lower()


def features_of(f, args: tuple, kwargs: dict, backend: str | None,
                target: str | None, jaxpr: bool = True) -> tuple[Features, Any]:
    """Features of `f(*args, **kwargs)` for (backend, target), never compiling; also the traced.

    `jaxpr=False` skips the jaxpr features (NaN), which only advice reads."""
    backend, target = normalize_target(backend or default_backend(), target)
    traced, lowered = trace_and_lower(f, args, kwargs, backend)
    return from_lowered(traced, lowered, backend=backend, target=target, jaxpr=jaxpr), traced
