"""Environment fields: where a program is compiled, which decides which model applies."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

KNOWN_BACKENDS = ("cpu", "gpu", "tpu")
# Short names for the accelerator targets we can compile for without the accelerator: GPU
# target descriptions, and TPU chips (one chip of a deviceless topology, `tpu_target.py`).
KNOWN_TARGETS = {
    "cpu": ("",),
    "gpu": ("h100", "a100", "h200"),
    "tpu": ("v5e", "v5p", "v6e"),
}
DEFAULT_TARGETS = {"cpu": "", "gpu": "h100", "tpu": "v5e"}


class UnknownTargetError(ValueError):
    """The backend or target is not one costmodel knows."""


def normalize(backend: str | None, target: str | None) -> tuple[str, str]:
    """Validate and canonicalize (backend, target); defaults: cpu, h100 for gpu, v5e for tpu.

    Example:
        >>> normalize("GPU", None)
        ('gpu', 'h100')
    """
    backend = (backend or "cpu").lower()
    if backend == "cuda":
        backend = "gpu"
    if backend not in KNOWN_BACKENDS:
        raise UnknownTargetError(
            f"unknown backend {backend!r}; known backends: {', '.join(KNOWN_BACKENDS)}")
    target = (target or "").lower()
    if not target:
        target = DEFAULT_TARGETS[backend]
    if target not in KNOWN_TARGETS[backend]:
        known = ", ".join(t or "''" for t in KNOWN_TARGETS[backend])
        raise UnknownTargetError(
            f"unknown target {target!r} for backend {backend!r}; known targets: {known}")
    return backend, target


@dataclass(frozen=True)
class Placement:
    """Where a program compiles: a backend and target, normalised once (`normalize`).

    Example:
        >>> Placement.of("GPU", None)
        Placement(backend='gpu', target='h100')
        >>> Placement.of("gpu", "h100").label, Placement.of("gpu", "h100").where
        ('gpu-h100', 'gpu/h100')
    """

    backend: str
    target: str

    @classmethod
    def of(cls, backend: str | None, target: str | None) -> Placement:
        return cls(*normalize(backend, target))

    @property
    def label(self) -> str:
        """File-name form: `cpu`, `gpu-h100` (model folders, sweep shards)."""
        return self.backend + (f"-{self.target}" if self.target else "")

    @property
    def where(self) -> str:
        """Display form: `cpu`, `gpu/h100`."""
        return self.backend + (f"/{self.target}" if self.target else "")


def jaxlib_version() -> str:
    try:
        import jaxlib

        return str(jaxlib.__version__)
    except ImportError:  # pragma: no cover - jaxlib is a dependency
        return ""


def host_cpu_count() -> int:
    """CPUs this process may run on (XLA sizes its compile threads by them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """This machine's CPU model name (as /proc/cpuinfo gives it, else the platform's)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
