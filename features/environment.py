"""Environment fields: where a program is compiled, which decides which model applies."""

from __future__ import annotations

import math
import os
import platform
import re
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
# A TPU target may name a multi-chip topology of its chip (`v5e:2x2`, `v5p:2x2x1`): a
# program compiled SPMD over all its chips. The chip's model serves every topology of it.
_TOPOLOGY = re.compile(r"^(?P<chip>[a-z0-9]+):(?P<shape>[1-9][0-9]*(?:x[1-9][0-9]*){1,2})$")


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
    if model_target(backend, target) not in KNOWN_TARGETS[backend]:
        known = ", ".join(t or "''" for t in KNOWN_TARGETS[backend])
        topologies = " (or a topology of a chip: v5e:2x2, v5e:4x4)" if backend == "tpu" else ""
        raise UnknownTargetError(
            f"unknown target {target!r} for backend {backend!r}; known targets: "
            f"{known}{topologies}")
    return backend, target


def model_target(backend: str, target: str) -> str:
    """The target whose model serves `target`: the chip of a TPU topology (`v5e` of
    `v5e:4x4`), else `target` itself.

    Example:
        >>> model_target("tpu", "v5e:4x4"), model_target("gpu", "h100")
        ('v5e', 'h100')
    """
    match = _TOPOLOGY.match(target) if backend == "tpu" else None
    return match["chip"] if match else target


def chips(target: str) -> int:
    """Chips a target compiles for: the product of a topology's dims, 1 for one chip.

    Example:
        >>> chips("v5e:4x4"), chips("v5p:2x2x1"), chips("v5e"), chips("")
        (16, 4, 1, 1)
    """
    match = _TOPOLOGY.match(target or "")
    return math.prod(int(d) for d in match["shape"].split("x")) if match else 1


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
        """File-name form: `cpu`, `gpu-h100`, `tpu-v5e-4x4` (model folders, sweep shards)."""
        return self.backend + (f"-{self.target.replace(':', '-')}" if self.target else "")

    @property
    def model(self) -> Placement:
        """The placement whose model serves this one (`model_target`)."""
        return Placement(self.backend, model_target(self.backend, self.target))

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
