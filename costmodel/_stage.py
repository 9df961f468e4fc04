"""`costmodel.lower`: a program traced once, then featurized, predicted and advised on for
any backend, in the style of `jax.stages`.

Every keyword argument of `lower`, `predict` and `advise` goes to the user's function, as
with `jax.jit(f)(*args, **kwargs)`; costmodel's own options (backend, target, model,
budget) are arguments of the stage's methods, so they can never collide with the
function's (`predict(loss, x, model="mlp")` passes `model` to `loss`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from costmodel.features import Features, Placement, from_lowered
from costmodel.features.regions import region_tallies

from ._advise import Advice, advise_program
from ._blame import Blame, blame_prediction
from ._lowering import default_backend, lower_for
from ._predict import Prediction, model_placement, predict_features
from ._profile import Profile, profile_stage

# costmodel's options before they moved onto the stage: a function that does not take one
# of these gets a hint, not only JAX's "unexpected keyword"
_OPTIONS = ("backend", "target", "model", "budget_seconds")


@dataclass(frozen=True, eq=False)
class Stage:
    """A traced program (or one the user lowered); lowered per placement on demand.

    Example:
        >>> stage = costmodel.lower(loss, params, batch)
        >>> stage.predict(), stage.predict(backend="gpu"), stage.advise(budget_seconds=5)
    """

    traced: Any  # jax.stages.Traced, or None when made from a jax.stages.Lowered
    lowered: Any = None  # the jax.stages.Lowered it was made from, else None
    _features: dict = field(default_factory=dict, repr=False)
    _lowerings: dict = field(default_factory=dict, repr=False)

    def _lowered(self, placement: Placement):
        if placement.backend not in self._lowerings:
            self._lowerings[placement.backend] = lower_for(self.traced, self.lowered,
                                                           placement.backend)
        return self._lowerings[placement.backend]

    def features(self, backend: str | None = None, target: str | None = None, *,
                 jaxpr: bool = True) -> Features:
        """Features for (backend, target) (default: JAX's backend here); `jaxpr=False`
        skips the jaxpr features, which only advice reads. Cached per placement."""
        placement = Placement.of(backend or default_backend(), target)
        key = (placement, jaxpr)
        if key not in self._features:
            traced, lowered = self._lowered(placement)
            self._features[key] = from_lowered(traced, lowered, backend=placement.backend,
                                               target=placement.target, jaxpr=jaxpr)
        return self._features[key]

    def predict(self, backend: str | None = None, target: str | None = None,
                model=None, process_state: str = "fresh") -> Prediction:
        """Compile time and memory for (backend, target), never compiling.

        `model` is a model folder (`costmodel train --out`) or a loaded
        `costmodel.models.Artifact` in place of the shipped default; backend and target
        then default to the model's. `process_state`, for a TPU: `"fresh"` (a compile early
        in a fresh process) or `"warm"` (after about a hundred others in the process).
        """
        backend, target = model_placement(model, backend, target)
        return predict_features(self.features(backend, target, jaxpr=False), model=model,
                                process_state=process_state)

    def blame(self, backend: str | None = None, target: str | None = None,
              model=None) -> Blame:
        """The prediction divided among the source lines it comes from (`costmodel.blame`)."""
        backend, target = model_placement(model, backend, target)
        prediction = self.predict(backend, target, model)
        placement = Placement.of(prediction.backend, prediction.target)
        module = self._lowered(placement)[1].compiler_ir("stablehlo")
        return blame_prediction(prediction, region_tallies(module, prediction.backend),
                                prediction._artifact)

    def profile(self) -> Profile:
        """Compile once, traced, for JAX's backend here: where the time really went,
        beside the prediction (`costmodel.profile`)."""
        return profile_stage(self)

    def advise(self, budget_seconds: float = 10.0, backend: str | None = None,
               target: str | None = None, model=None) -> Advice:
        """Should this jit be split to compile within `budget_seconds`? (`costmodel.advise`)"""
        backend, target = model_placement(model, backend, target)
        return advise_program(self.features(backend, target), self.traced, budget_seconds,
                              model)


def lower(f, *args: Any, **kwargs: Any) -> Stage:
    """Trace `f(*args, **kwargs)` as `jax.jit` would, never compiling.

    `f` is a function, a jitted function (its static arguments work as with jax.jit), or
    a `jax.stages.Traced` / `jax.stages.Lowered` (then no arguments). `args` are arrays
    or `jax.ShapeDtypeStruct`s. For a plain function, keyword arguments that are not
    arrays (numbers, strings, callables) are bound as Python values, as `static_argnames`
    would; array ones are traced.
    """
    import jax

    if isinstance(f, (jax.stages.Traced, jax.stages.Lowered)):
        if args or kwargs:
            raise TypeError(f"a {type(f).__name__} takes no arguments: it is traced already")
        return Stage(None, f) if isinstance(f, jax.stages.Lowered) else Stage(f)
    if hasattr(f, "trace"):  # jitted by the user: their static arguments decide
        jitted, dynamic = f, kwargs
    else:
        static = {k: v for k, v in kwargs.items() if not _traceable(v)}
        dynamic = {k: v for k, v in kwargs.items() if k not in static}
        jitted = jax.jit(functools.partial(f, **static) if static else f)
    try:
        return Stage(jitted.trace(*args, **dynamic))
    except TypeError as exc:
        hint = _option_hint(exc, kwargs)
        if hint is None:
            raise
        raise TypeError(f"{exc}. {hint}") from exc


def predict(f, *args: Any, **kwargs: Any) -> Prediction:
    """Predict compile time and memory of `jax.jit(f)(*args, **kwargs)` without compiling,
    for JAX's backend here and the shipped model.

    Every keyword argument goes to `f`. For another backend, target or model, use the
    stage: `costmodel.lower(f, *args, **kwargs).predict(backend="gpu", model=folder)`.

    The prediction's `features` hold the model inputs (StableHLO); jaxpr features are NaN
    there, as the model does not read them (`costmodel.features.extract` computes all).

    Example:
        >>> p = costmodel.predict(lambda x: jnp.sin(x) @ x, jnp.ones((512, 512)))
        >>> print(p)   # Prediction(compile ≈ ..., host memory ≈ ..., cpu)
    """
    return lower(f, *args, **kwargs).predict()


def blame(f, *args: Any, **kwargs: Any) -> Blame:
    """Which part of `f` is slow to compile? The prediction for JAX's backend here divided
    among the user's source lines (library code charged to the line that called it),
    largest first, summing to the prediction. Every keyword argument goes to `f`; for
    another backend or model: `costmodel.lower(f, *args).blame(backend="gpu")`.

    Example:
        >>> print(costmodel.blame(train_step, params, batch))
    """
    return lower(f, *args, **kwargs).blame()


def profile(f, *args: Any, **kwargs: Any) -> Profile:
    """Compile `f(*args, **kwargs)` once under a profiler trace and report where the time
    went (HLO passes, backend, the rest, the slowest passes) beside the prediction. Every
    keyword argument goes to `f`. This compiles: run it in a fresh process.
    """
    return lower(f, *args, **kwargs).profile()


def advise(f, *args: Any, **kwargs: Any) -> Advice:
    """Should I split this jit? Predicts the whole program and each alternative, for a
    10 s budget on JAX's backend here.

    Every keyword argument goes to `f`; for another budget, backend or model use the
    stage: `costmodel.lower(f, *args).advise(budget_seconds=5)`.

    Alternatives: repeated identical blocks as `lax.scan`, inner jits compiled on their
    own, captured constants passed as arguments; "keep" when the whole program fits the
    budget or no alternative saves 30% or more. Never compiles.
    """
    return lower(f, *args, **kwargs).advise()


def _traceable(value: Any) -> bool:
    """True when every leaf of `value` is an array (or its shape): Python numbers, like
    strings, are options a function branches or loops on more often than data."""
    import jax

    kinds = (jax.Array, jax.ShapeDtypeStruct, np.ndarray)
    leaves = jax.tree_util.tree_leaves(value)
    return bool(leaves) and all(isinstance(leaf, kinds) for leaf in leaves)


def _option_hint(exc: TypeError, kwargs: dict) -> str | None:
    text = str(exc)
    for name in _OPTIONS:
        if name in kwargs and "unexpected keyword" in text and f"'{name}'" in text:
            method = "advise" if name == "budget_seconds" else "predict"
            return (f"costmodel passes every keyword argument to the function; costmodel's "
                    f"own {name}= goes to the stage: costmodel.lower(f, *args)."
                    f"{method}({name}=...)")
    return None
