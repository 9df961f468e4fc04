"""What a measurement was taken on: software versions, CPU, flags, harness version."""

from __future__ import annotations

import hashlib
import os
import platform
from functools import lru_cache
from pathlib import Path

from costmodel.features.environment import cpu_model, host_cpu_count

# Files whose content defines how a compile is measured; their hash versions the rows.
# Paths from this package's folder (the sweep's processes live in `training/measure`, which
# is `costmodel/training/measure` once installed), in the order they were always hashed.
_HARNESS_FILES = ("harness.py", "reference.py", "../training/measure/child.py",
                  "../training/measure/runner.py", "gpu_target.py", "phases.py",
                  "tpu_phases.py", "sharding.py")


@lru_cache(maxsize=1)
def harness_version() -> str:
    """Short sha256 over the measurement code, so rows from a changed harness are told apart."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in _HARNESS_FILES:
        path = here / name
        if path.exists():
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def environment() -> dict[str, str | int]:
    """The environment fields every dataset row carries."""
    import jax
    import jaxlib

    return {
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "python_version": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": host_cpu_count(),
        "hostname": platform.node(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "harness_version": harness_version(),
    }
