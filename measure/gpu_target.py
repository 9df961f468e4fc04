"""Compiling for an NVIDIA GPU on a machine without one ("deviceless" AOT compilation).

XLA needs a target description (a `GpuTargetConfigProto` in text form). The files are
looked up in `$COSTMODEL_GPU_TARGETS` or in `shared/gpu_targets/` beside the repository.
"""

from __future__ import annotations

import os
from pathlib import Path

TARGET_FILES = {"h100": "h100_sxm.txtpb", "a100": "a100_sxm_80.txtpb", "h200": "h200.txtpb"}


class GpuTargetUnavailable(RuntimeError):
    """Deviceless GPU compilation cannot run here (no target file or no CUDA plugin)."""


def target_file(target: str) -> Path:
    """Path of the target description for `target` (h100, a100, h200)."""
    if target not in TARGET_FILES:
        raise GpuTargetUnavailable(f"unknown GPU target {target!r}; known: {sorted(TARGET_FILES)}")
    candidates = []
    if os.environ.get("COSTMODEL_GPU_TARGETS"):
        candidates.append(Path(os.environ["COSTMODEL_GPU_TARGETS"]))
    repo = Path(__file__).resolve().parents[2]
    candidates += [repo.parent / "shared" / "gpu_targets", repo / "shared" / "gpu_targets"]
    for folder in candidates:
        path = folder / TARGET_FILES[target]
        if path.exists():
            return path
    raise GpuTargetUnavailable(
        f"no target description {TARGET_FILES[target]} in {[str(c) for c in candidates]}; "
        "set COSTMODEL_GPU_TARGETS to the folder holding it")


def has_local_gpu() -> bool:
    import jax

    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def gpu_sharding(target: str):
    """A single-device sharding on the local GPU when there is one, else on the deviceless
    target. Returns (sharding, deviceless)."""
    import jax

    if has_local_gpu():
        return _one_device(jax.devices("gpu")[0]), False
    return deviceless_sharding(target), True


def _one_device(device):
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    return NamedSharding(Mesh(np.array([device]), ("d",)), PartitionSpec())


def deviceless_sharding(target: str):
    """A single-device sharding on `target` compiled for without its device (also where a
    GPU is present: `bench/evaluations/device_pairs.py` compiles both ways on one machine)."""
    from jax.experimental import topologies

    try:
        topo = topologies.get_topology_desc(
            "gpu", platform="cuda", target_config=target_file(target).read_text(),
            topology="1x1x1")
    except GpuTargetUnavailable:
        raise
    except Exception as exc:  # the plugin raises assorted errors when CUDA pieces are missing
        raise GpuTargetUnavailable(
            f"deviceless compile for {target} failed to start ({exc}); install "
            "costmodel[gpu] (jax-cuda12-plugin) and make ptxas available") from exc
    return _one_device(topo.devices[0])
