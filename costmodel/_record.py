"""`record`: capture the real compiles of a user's own jitted functions, as dataset rows.

Inside the block JAX's compiler entry point is wrapped. Each compile of a function the
user jitted (or lowered and compiled) is timed, its host RSS growth sampled every 5 ms
as sweeps do, and its StableHLO kept for the features and the key: a hash of the text,
so the same program always gets the same key and different programs never share one.
JAX compiles operations run outside jit, and its own jitted helpers called eagerly
(`jnp.sum(x)`, `jax.random.normal`), the same way; those are not the user's programs and
are left out, as are persistent-cache hits (no compile happened). The machine's
reference time (the fixed program of `measure/reference.py`) is timed once per block,
at its first recorded compile, so recorded rows normalize for load and machine speed
like sweep rows. Rows are appended durably in the dataset format, so `costmodel train
--data PATH` can retrain on the user's own workload.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from costmodel.features import StableHLOParseError, from_stablehlo

CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
# The file of JAX's jit machinery: its frames hold the function being compiled as `fun`.
_PJIT_FILE = os.path.join("jax", "_src", "pjit.py")
_state = threading.local()  # per thread: persistent-cache hits seen, reference timing on


def _count_cache_hit(name: str, **_kw) -> None:
    if name == CACHE_HIT_EVENT:
        _state.cache_hits = getattr(_state, "cache_hits", 0) + 1


@functools.cache
def _listen_for_cache_hits() -> None:
    """Register the cache-hit listener once per process (JAX keeps listeners forever)."""
    import jax

    jax.monitoring.register_event_listener(_count_cache_hit)


def _jitted_function(frame):
    """The function whose jit is compiling (the `fun` of the nearest jit frame up the
    stack), or None for an ahead-of-time `lowered.compile()`."""
    while frame is not None:
        if frame.f_code.co_filename.endswith(_PJIT_FILE):
            fun = frame.f_locals.get("fun")
            if callable(fun):
                return fun
        frame = frame.f_back
    return None


def is_jax_internal(fun) -> bool:
    """Whether JAX compiles `fun` on its own behalf: a single operation run outside jit,
    or one of JAX's own jitted functions called eagerly."""
    if fun is None:
        return False
    if getattr(fun, "_apply_primitive", False):
        return True
    module = getattr(inspect.unwrap(fun), "__module__", None) or ""
    return module == "jax" or module.startswith(("jax.", "jaxlib."))


def program_params(text: str) -> dict:
    """What identifies a recorded program: its module name (for people) and a hash of its
    StableHLO text (the identity)."""
    name = text.split("@", 1)[1].split(" ", 1)[0] if "module @" in text else "main"
    return {"module": name, "stablehlo_sha256": hashlib.sha256(text.encode()).hexdigest()}


def _executable_memory(executable) -> dict:
    from costmodel.measure.harness import memory_fields

    # memory_fields reads a jax Compiled; the backend's executable has the same statistics
    return memory_fields(SimpleNamespace(memory_analysis=executable.get_compiled_memory_stats))


def time_reference() -> float | None:
    """Compile seconds of the reference program here and now (a warm-up compile, then the
    timed one, as the harness does), or None when the persistent cache answered."""
    import jax

    from costmodel.measure.reference import build_reference

    _state.internal = True
    try:
        seconds = None
        for _ in range(2):
            fn, args = build_reference()  # a new function object: no in-memory cache hit
            lowered = jax.jit(fn).lower(*args)
            hits = getattr(_state, "cache_hits", 0)
            started = time.perf_counter()
            lowered.compile()
            seconds = time.perf_counter() - started
            if getattr(_state, "cache_hits", 0) != hits:
                return None
        return seconds
    finally:
        _state.internal = False


class record:  # noqa: N801 - reads as a verb: `with costmodel.record(path):`
    """Record the compiles of your jitted functions in a block (or a decorated function).

    Args:
        path: a `.jsonl` file, or a folder (a shard file is created in it).
        backend: how rows are labelled; default from the device each compile targets.
        target: GPU target label for gpu rows (default h100).

    Example:
        >>> with costmodel.record("my_compiles.jsonl"):
        ...     train_step(params, batch)   # its compiles become dataset rows
        >>> costmodel.record.start("my_compiles.jsonl")  # or for the rest of the process
    """

    _active: record | None = None

    def __init__(self, path: str | os.PathLike, backend: str | None = None,
                 target: str = "") -> None:
        path = Path(path)
        if path.suffix != ".jsonl":
            path = path / f"recorded-{os.getpid()}.jsonl"
        self.path = path
        self.backend = backend
        self.target = target
        self.rows: list[dict] = []
        self.ref_seconds: float | None = None
        self._reference_timed = False
        self._lock = threading.Lock()
        self._writer = None
        self._original = None

    # context manager -------------------------------------------------------------
    def __enter__(self) -> record:
        from jax._src import compiler

        from costmodel._extras import require

        require("train", "costmodel.record")  # rows are dataset rows; RSS needs psutil
        from costmodel.measure.rows import ShardWriter

        _listen_for_cache_hits()
        self._writer = ShardWriter(self.path)
        self._original = compiler.compile_or_get_cached
        compiler.compile_or_get_cached = self._wrap(self._original)
        return self

    def __exit__(self, *exc) -> None:
        from jax._src import compiler

        if self._original is not None:
            compiler.compile_or_get_cached = self._original
            self._original = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapper

    @classmethod
    def start(cls, path: str | os.PathLike, **kwargs) -> record:
        """Record every compile from now until `record.stop()`."""
        cls.stop()
        cls._active = cls(path, **kwargs).__enter__()
        return cls._active

    @classmethod
    def stop(cls) -> None:
        if cls._active is not None:
            cls._active.__exit__(None, None, None)
            cls._active = None

    # capture ---------------------------------------------------------------------
    def _wrap(self, original):
        from costmodel.measure.harness import RssSampler

        def compile_or_get_cached(backend, computation, devices, *args, **kwargs):
            if getattr(_state, "internal", False) or is_jax_internal(
                    _jitted_function(sys._getframe(1))):
                return original(backend, computation, devices, *args, **kwargs)
            hits = getattr(_state, "cache_hits", 0)
            with RssSampler() as sampler:
                before = sampler.rss()
                started = time.perf_counter()
                executable = original(backend, computation, devices, *args, **kwargs)
                seconds = time.perf_counter() - started
            if getattr(_state, "cache_hits", 0) == hits:
                self._store(str(computation), backend.platform, seconds,
                            max(0, sampler.peak - before), executable)
            return executable
        return compile_or_get_cached

    def _reference(self) -> float | None:
        """The reference time of this block, timed at its first recorded compile."""
        if not self._reference_timed:
            self._reference_timed = True
            self.ref_seconds = time_reference()
        return self.ref_seconds

    def _store(self, text: str, platform: str, seconds: float, peak_rss: int,
               executable) -> None:
        from costmodel.measure.machine import environment
        from costmodel.measure.rows import make_row

        backend = self.backend or ("cpu" if platform == "cpu" else "gpu")
        target = self.target or ("" if backend == "cpu" else "h100")
        try:
            features = from_stablehlo(text, backend=backend, target=target)
        except (StableHLOParseError, ValueError):
            return
        result = {"status": "ok", "message": "", "deviceless": False,
                  "compile_seconds": seconds, "backend_compile_seconds": seconds,
                  "compile_seconds_all": [seconds], "repeats": 1,
                  "peak_rss_bytes": peak_rss, "ref_seconds": self._reference(),
                  **_executable_memory(executable), "source": "record",
                  "features": features.to_dict()}
        row = make_row("user", program_params(text), backend, target, result, environment())
        with self._lock:
            self.rows.append(row)
            if self._writer is not None:
                self._writer.append(row)
