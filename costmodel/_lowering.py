"""Turning what a user hands us (a function and args, a Traced, a Lowered) into features."""

from __future__ import annotations

from costmodel.features import Features, from_lowered

_PLATFORM = {"cpu": "cpu", "gpu": "cuda", "tpu": "tpu"}


def default_backend() -> str:
    """The backend JAX would compile for here, as costmodel names it (cpu, gpu or tpu)."""
    import jax

    local = jax.default_backend()
    if local in ("gpu", "cuda", "rocm"):
        return "gpu"
    return "tpu" if local == "tpu" else "cpu"


def lower_for(traced, lowered, backend: str):
    """(traced or None, lowered): `lowered` as given, else `traced` lowered for
    `backend`'s platform when possible.

    Lowering for another platform than the local one (`lowering_platforms`) needs that
    platform's lowering rules; when JAX lacks them we fall back to the local lowering.
    """
    if lowered is not None:
        return None, lowered
    platform = _PLATFORM[backend]
    local = _PLATFORM[default_backend()]
    if platform != local:
        try:
            return traced, traced.lower(lowering_platforms=(platform,))
        except Exception:  # missing lowering rules for that platform: use the local one
            pass
    return traced, traced.lower()


def features_of(fn, args: tuple, backend: str, target: str, jaxpr: bool = True) -> Features:
    """Features of `jax.jit(fn)(*args)` for (backend, target), never compiling (the
    programs advice rewrites)."""
    import jax

    traced, lowered = lower_for(jax.jit(fn).trace(*args), None, backend)
    return from_lowered(traced, lowered, backend=backend, target=target, jaxpr=jaxpr)
