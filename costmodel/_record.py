"""`record`: capture the real compiles a user's own code does, as dataset rows.

Inside the block every backend compile is caught twice: JAX's compiler entry point hands
us the module being compiled (for its features), and the `jax.monitoring`
backend-compile event gives the duration. Rows are appended durably in the dataset
format, so `costmodel train --data PATH` can retrain on the user's own workload.
"""

from __future__ import annotations

import functools
import os
import threading
from pathlib import Path

from costmodel.features import StableHLOParseError, from_stablehlo

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class record:  # noqa: N801 - reads as a verb: `with costmodel.record(path):`
    """Record every compile in a block (or a decorated function) to a JSON-lines file.

    Args:
        path: a `.jsonl` file, or a folder (a shard file is created in it).
        backend: how rows are labelled; default from the device each compile targets.

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
        self._local = threading.local()
        self._writer = None
        self._original = None
        self._listening = False

    # context manager -------------------------------------------------------------
    def __enter__(self) -> record:
        import jax
        from jax._src import compiler

        from costmodel.training.dataset import ShardWriter

        self._writer = ShardWriter(self.path)
        self._original = compiler.compile_or_get_cached
        compiler.compile_or_get_cached = self._wrap(self._original)
        if not self._listening:
            jax.monitoring.register_event_duration_secs_listener(self._on_event)
            self._listening = True
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
        # JAX reports the compile-duration event just after this call returns; the
        # module waits here (per thread) until that event arrives.
        def compile_or_get_cached(backend, computation, devices, *args, **kwargs):
            self._local.pending = {"module": computation, "platform": backend.platform}
            return original(backend, computation, devices, *args, **kwargs)
        return compile_or_get_cached

    def _on_event(self, name: str, seconds: float, **_kw) -> None:
        pending = getattr(self._local, "pending", None)
        if name == BACKEND_COMPILE_EVENT and pending is not None and self._writer is not None:
            self._local.pending = None
            self._store(pending, seconds)

    def _store(self, pending: dict, seconds: float) -> None:
        from costmodel.training.dataset import make_row
        from costmodel.training.machine import environment

        backend = self.backend or ("cpu" if pending["platform"] == "cpu" else "gpu")
        target = self.target or ("" if backend == "cpu" else "h100")
        text = str(pending["module"])
        try:
            features = from_stablehlo(text, backend=backend, target=target)
        except (StableHLOParseError, ValueError):
            return
        name = features.info.get("entry_function", "main")
        module_name = text.split("@", 1)[1].split(" ", 1)[0] if "module @" in text else name
        result = {"status": "ok", "message": "", "deviceless": False,
                  "compile_seconds": seconds, "backend_compile_seconds": seconds, "repeats": 1,
                  "peak_rss_bytes": None, "executable_memory_bytes": None,
                  "source": "record", "features": features.to_dict()}
        row = make_row("user", {"module": module_name}, backend, target, result, environment())
        self.rows.append(row)
        if self._writer is not None:
            self._writer.append(row)
