"""Data-driven registry of parameterised program families.

A *family* is a builder of JAX programs with a few size knobs (depth, width, trip
count, ...) and a grid of knob settings that a sweep measures. Builders are pure:
``build(**params)`` returns ``(fn, args)`` where ``fn`` is a fresh Python closure and
``args`` a tuple of pytrees of ``jax.ShapeDtypeStruct``, so that
``jax.jit(fn).trace(*args).lower()`` works without allocating inputs and is never a
cache hit.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

__all__ = [
    "FAMILIES",
    "Family",
    "UnknownFamilyError",
    "build",
    "check_style",
    "get_family",
    "param_grid",
    "programs",
    "register",
    "sds",
]

_PARAM_TYPES = (bool, int, float, str)


class UnknownFamilyError(ValueError):
    """Raised when a family name is not registered."""


@dataclass(frozen=True)
class Family:
    """One parameterised family of programs.

    Attributes:
        name: Unique registry key, e.g. ``"mlp"``.
        description: One-line summary.
        build: ``build(**params) -> (fn, args)``; must return a new closure each call.
        grid: Parameter settings a sweep measures (JSON-serialisable dicts).
        x64: True if the family needs ``jax_enable_x64``.
        tags: Free-form labels, e.g. ``("seed",)`` for user-report programs.

    Example:
        >>> fam = Family("noop", "identity", lambda n: (lambda x: x, (sds((n,)),)),
        ...              grid=({"n": 1},))
    """

    name: str
    description: str
    build: Callable[..., tuple[Callable, tuple]]
    grid: tuple[dict, ...]
    x64: bool = False
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("Family.name must be a non-empty string")
        # Accept any iterable of mappings but store an immutable tuple of plain dicts.
        grid = tuple(dict(p) for p in self.grid)
        for params in grid:
            for key, value in params.items():
                if not isinstance(key, str) or not isinstance(value, _PARAM_TYPES):
                    raise ValueError(
                        f"family {self.name!r}: grid value {key}={value!r} is not a "
                        "str key with an int/float/str/bool value"
                    )
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "tags", tuple(self.tags))

    @property
    def library(self) -> str:
        """The public library a real-program family is built from: the tag after "real"
        (evaluation holds out a library's programs together), "outside" (a bench's
        programs from libraries kept out of training), "probe" (a bench's programs of
        kinds the model once mispredicted) or "bench" (the bench a family of programs timed
        elsewhere is named for); "" for synthetic families."""
        if self.tags[:1] in (("real",), ("outside",), ("probe",), ("bench",)) \
                and len(self.tags) > 1:
            return self.tags[1]
        return ""


FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Adds ``family`` to :data:`FAMILIES`.

    Args:
        family: The family to add.

    Returns:
        The same family, so the call can be used as an expression.

    Raises:
        ValueError: If a family of that name is already registered.
    """
    if family.name in FAMILIES:
        raise ValueError(f"family {family.name!r} is already registered")
    FAMILIES[family.name] = family
    return family


def register_builders(programs: Iterable[tuple[Callable, dict]], kind: str,
                      libraries: Mapping[str, str], prefix: str = "") -> tuple[Family, ...]:
    """Registers one family per builder of a bench's `programs` ((builder, params) pairs;
    a builder's grid is its params in order): named `{prefix or kind}_{builder name}`,
    described by the first line of the builder's docstring and tagged `(kind, library)`,
    the library being `libraries[builder name]`."""
    grids: dict[Callable, list[dict]] = {}
    for builder, params in programs:
        grids.setdefault(builder, []).append(params)
    return tuple(register(Family(f"{prefix or kind}_{builder.__name__}",
                                 builder.__doc__.splitlines()[0],
                                 builder, tuple(grid),
                                 tags=(kind, libraries[builder.__name__])))
                 for builder, grid in grids.items())


def libraries_by_prefix(programs: Iterable[tuple[Callable, dict]],
                        prefixes: Mapping[str, str]) -> dict[str, str]:
    """The library of each builder of `programs` ((builder, params) pairs), from its
    name's part before the first underscore (`jraph_gcn_step`: `prefixes["jraph"]`), the
    `libraries` `register_builders` takes."""
    return {builder.__name__: prefixes[builder.__name__.split("_")[0]] for builder, _ in programs}


def get_family(name: str) -> Family:
    """Looks up a registered family.

    Raises:
        UnknownFamilyError: If ``name`` is not registered; the message lists known names.
    """
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(sorted(FAMILIES)) or "(none)"
        raise UnknownFamilyError(f"unknown family {name!r}; known families: {known}") from None


def build(name: str, params: Mapping[str, Any]) -> tuple[Callable, tuple]:
    """Builds one program of family ``name``.

    Returns:
        ``(fn, args)``: a fresh, un-jitted closure and a tuple of ShapeDtypeStruct pytrees.

    Raises:
        UnknownFamilyError: If ``name`` is not registered.
    """
    return get_family(name).build(**dict(params))


def lower(place, name: str, params: Mapping[str, Any]) -> tuple:
    """(traced, lowered) of one program of family ``name``, placed by ``place`` (a
    `costmodel.measure.harness.Placement`), in the x64 mode its family needs; never compiles."""
    family = get_family(name)
    jax.config.update("jax_enable_x64", bool(family.x64))
    return place.lower(*family.build(**dict(params)))


def programs(families: Iterable[str] | None = None) -> list[tuple[str, dict]]:
    """Lists every ``(family, params)`` of the grids, in a deterministic order.

    Args:
        families: Names to include, in that order; all registered families (in
            registration order) when None.

    Raises:
        UnknownFamilyError: If a requested name is not registered.
    """
    names = list(FAMILIES) if families is None else list(families)
    return [(name, dict(p)) for name in names for p in get_family(name).grid]


def param_grid(
    where: Callable[[dict], bool] | None = None, **knobs: Iterable[Any]
) -> tuple[dict, ...]:
    """Cartesian product of knob values, as a tuple of dicts.

    Args:
        where: Optional filter; points for which it returns False are dropped.
        **knobs: Knob name to the values it takes. Order of the keyword arguments
            sets the iteration order (last knob varies fastest).

    Example:
        >>> param_grid(depth=(1, 2), grad=(False, True))[1]
        {'depth': 1, 'grad': True}
    """
    keys = list(knobs)
    points = (dict(zip(keys, combo, strict=True)) for combo in itertools.product(*knobs.values()))
    return tuple(p for p in points if where is None or where(p))


def check_style(style: str) -> None:
    """Raises ValueError unless ``style`` is "unrolled" (a Python loop) or "scan"."""
    if style not in ("unrolled", "scan"):
        raise ValueError(f"style must be 'unrolled' or 'scan', got {style!r}")


def sds(shape: tuple[int, ...], dtype: Any = np.float32) -> jax.ShapeDtypeStruct:
    """Shorthand for ``jax.ShapeDtypeStruct(shape, dtype)``."""
    return jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype))
