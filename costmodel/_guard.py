"""`costmodel.jit`: jax.jit that predicts before the first compile of each signature."""

from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any, Literal

from ._advise import Advice, check_budget, decide
from ._predict import _fmt_seconds
from ._stage import Stage, lower


class CompileBudgetWarning(UserWarning):
    """A jit is predicted to compile longer than its budget."""


class CompileGuardWarning(RuntimeWarning):
    """The guard could not predict (or advise on) a compile: the jit compiles unchecked,
    exactly as `jax.jit` would. The message names the error."""


class CompileBudgetExceeded(RuntimeError):
    """Raised (before compiling) when a guarded jit is predicted over its budget."""

    def __init__(self, advice: Advice) -> None:
        super().__init__(str(advice))
        self.advice = advice


def _signature(args: tuple, kwargs: dict, static: set[int], static_names: set[str]):
    import jax

    def leaf_key(x):
        shape = getattr(x, "shape", None)
        dtype = getattr(x, "dtype", None)
        return (tuple(shape), str(dtype)) if shape is not None else (type(x).__name__, x)

    dyn_args = tuple(a for i, a in enumerate(args) if i not in static)
    static_args = tuple((i, a) for i, a in enumerate(args) if i in static)
    dyn_kwargs = {k: v for k, v in kwargs.items() if k not in static_names}
    static_kwargs = tuple(sorted((k, v) for k, v in kwargs.items() if k in static_names))
    leaves, tree = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
    return (tree, tuple(map(leaf_key, leaves)), static_args, static_kwargs)


class GuardedJit:
    """A jitted function that checks its predicted compile time on each new signature.

    `costmodel.jit` hands out a jax jitted function (jax's own C++ call path, so a warm
    call runs no Python of ours) whose cache miss predicts before calling jax's own miss.
    The prediction traces and lowers through the same `jax.jit(fun)`, and jax caches both
    by that trace, so the compile that follows reuses them: what the guard adds is the
    feature walk and the model. Where this jax lacks the pieces of that call path, the
    guard predicts in the trace of a jit of its own instead (`_on_trace`).
    """

    def __init__(self, fun, budget_seconds: float, on_exceed: str, backend: str | None,
                 target: str | None, jit_kwargs: dict) -> None:
        import jax

        if on_exceed not in ("warn", "raise"):
            raise ValueError(f"on_exceed must be 'warn' or 'raise', not {on_exceed!r}")
        self._fun = fun
        self._budget = check_budget(budget_seconds, "budget_seconds")
        self._on_exceed = on_exceed
        self._backend, self._target = backend, target
        nums = jit_kwargs.get("static_argnums", ()) or ()
        names = jit_kwargs.get("static_argnames", ()) or ()
        self._static = {nums} if isinstance(nums, int) else set(nums)
        self._static_names = {names} if isinstance(names, str) else set(names)
        self._checked: dict = {}  # signature -> Advice, over budget
        self._fits: set = set()   # signatures predicted within budget
        self._stages: dict = {}   # signature -> Stage, while its advice may be asked for
        # What prediction and advice trace and lower: the jit whose trace and lowering
        # jax's own cache miss then reuses.
        self._plain = jax.jit(fun, **jit_kwargs)
        self._jitted = _jit_with_miss(self._plain, self._on_miss)
        if self._jitted is None:
            # The trace of `traced` calls an inlined jit of `fun`: jax reuses the
            # prediction's trace of it (its cache), so the user's function is traced
            # once per signature and the compile is of the program jax.jit(fun) compiles.
            self._plain = jax.jit(fun, **{**jit_kwargs, "inline": True})

            @functools.wraps(fun)  # jax reads the signature (static_argnames) through it
            def traced(*args: Any, **kwargs: Any):
                return self._on_trace(*args, **kwargs)

            self._jitted = jax.jit(traced, **jit_kwargs)

    def check(self, *args: Any, **kwargs: Any) -> Advice:
        """Predict and advise on the compile for these arguments, without compiling."""
        key = _signature(args, kwargs, self._static, self._static_names)
        if key not in self._checked:
            self._checked[key] = self._stage(key, args, kwargs).advise(
                budget_seconds=self._budget, backend=self._backend, target=self._target)
            self._stages.pop(key, None)
        return self._checked[key]

    def _stage(self, key, args: tuple, kwargs: dict) -> Stage:
        if key not in self._stages:
            self._stages[key] = lower(self._plain, *args, **kwargs)
        return self._stages[key]

    def _over_budget(self, args: tuple, kwargs: dict) -> Advice | None:
        """None within budget; else the advice (only "keep" when advice itself fails).
        Within budget no advice is computed: that is the first call's whole overhead."""
        key = _signature(args, kwargs, self._static, self._static_names)
        if key in self._fits:
            return None
        if key in self._checked:
            advice = self._checked[key]
            return advice if advice.prediction.compile_seconds > self._budget else None
        prediction = self._stage(key, args, kwargs).predict(self._backend, self._target)
        if not prediction.compile_seconds > self._budget:
            self._stages.pop(key, None)  # keeps nothing of a program that fits
            self._fits.add(key)
            return None
        try:
            return self.check(*args, **kwargs)
        except Exception as exc:  # the prediction alone still says it is over budget
            self._stages.pop(key, None)
            warnings.warn(f"costmodel could not advise on {_name(self._fun)}: "
                          f"{type(exc).__name__}: {exc}", CompileGuardWarning, stacklevel=5)
            advice = decide(prediction, [], self._budget)
            self._checked[key] = dataclasses.replace(advice, reason=(
                f"Predicted compile ≈ {_fmt_seconds(prediction.compile_seconds)} exceeds "
                f"your budget of {_fmt_seconds(self._budget)} (no advice: it failed)."))
            return self._checked[key]

    def _on_miss(self, jax_miss, args: tuple, kwargs: dict):
        """jax's cache miss for these arguments (trace, lower, compile, run), predicted
        first. Arguments are arrays, or tracers when called inside another trace."""
        return self._guarded(lambda: (args, kwargs), jax_miss, jax_miss, args, kwargs,
                             stacklevel=4)

    def _on_trace(self, *args: Any, **kwargs: Any):
        # Traced arguments become their shapes; static ones come as the values they are.
        # On a failure of ours the user's function is traced as it is, so an error of the
        # user's own reaches them as from jax.jit.
        return self._guarded(lambda: _abstract((args, kwargs)), self._plain, self._fun,
                             args, kwargs, stacklevel=3)

    def _guarded(self, shapes, run, unchecked, args: tuple, kwargs: dict, stacklevel: int):
        """`run(*args, **kwargs)` once the compile for `shapes()` is predicted (warned or
        raised over budget); a failure of ours runs `unchecked` instead, with a warning.
        `stacklevel`: the warnings' (the user's call, seen from here)."""
        try:
            over = self._over_budget(*shapes())
        except Exception as exc:  # a failure of ours must never stop the user's program
            # the user's own call first: an error of theirs reaches them as from jax.jit
            result = unchecked(*args, **kwargs)
            warnings.warn(f"costmodel could not predict the compile of {_name(self._fun)}, "
                          f"compiling it unchecked: {type(exc).__name__}: {exc}",
                          CompileGuardWarning, stacklevel=stacklevel)
            return result
        if over is not None:
            if self._on_exceed == "raise":
                raise CompileBudgetExceeded(over)
            warnings.warn(str(over), CompileBudgetWarning, stacklevel=stacklevel)
        return run(*args, **kwargs)

    def jitted(self):
        """The jax jitted function users call: its own call path, `check` and `guard` added."""
        self._jitted.check = self.check
        self._jitted.guard = self
        return self._jitted


def _jit_with_miss(jitted, on_miss):
    """A jitted function like `jitted` (jax's C++ call path, `jitted`'s trace and
    lowering caches) whose cache misses call `on_miss(jax_miss, args, kwargs)`, with a
    C++ cache of its own; None where this jax builds jitted functions otherwise.

    This follows how `jax.jit` builds its function (`jax._src.pjit._cpp_pjit`), which
    is not public API: jax is pinned to a minor version, and any mismatch gives None.
    """
    try:
        from jax._src import pjit, tree_util
        from jax._src.interpreters import pxla
        from jax._src.lib import _jax

        jax_miss, info, fun = jitted._cache_miss, jitted._jit_info, jitted._fun

        def cache_miss(*args: Any, **kwargs: Any):
            return on_miss(jax_miss, args, kwargs)

        # one function in a cache of its own: a signature jax compiled for another jit
        # of the same function is still predicted before this one's first call of it
        guarded = _jax.pjit(pjit.fun_name(fun), fun, cache_miss, info.static_argnums,
                            info.static_argnames, (), tree_util.dispatch_registry,
                            pxla.cc_shard_arg, pjit.make_jit_cpp_cache(4))
        guarded = functools.wraps(fun)(guarded)
        guarded._fun, guarded._jit_info = fun, info  # what .trace and .lower read
    except Exception:  # any mismatch of jax's internals: the caller falls back
        return None
    return guarded if type(guarded) is type(jitted) else None


def _name(fun) -> str:
    return getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None) or repr(fun)


def _abstract(tree):
    import jax

    def leaf(x):
        aval = getattr(x, "aval", None)
        if isinstance(x, jax.core.Tracer) and aval is not None:
            return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)
        return x

    return jax.tree_util.tree_map(leaf, tree)


def jit(fun=None, *, budget_seconds: float = 10.0,
        on_exceed: Literal["warn", "raise"] = "warn", backend: str | None = None,
        target: str | None = None, **jit_kwargs: Any):
    """Like `jax.jit`, but predicts the compile time before the first compile of each new
    signature and warns (with advice) or raises `CompileBudgetExceeded` over budget.

    Example:
        >>> step = costmodel.jit(train_step, budget_seconds=30, on_exceed="raise")
        >>> step(params, batch)   # raises before compiling if predicted over 30 s
    """
    if fun is None:
        return functools.partial(jit, budget_seconds=budget_seconds, on_exceed=on_exceed,
                                 backend=backend, target=target, **jit_kwargs)
    return GuardedJit(fun, budget_seconds, on_exceed, backend, target, jit_kwargs).jitted()
