"""Compiling for a TPU chip on a machine without one ("deviceless" AOT compilation).

libtpu (`pip install "costmodel[tpu]"`) compiles for a topology description from
`jax.experimental.topologies.get_topology_desc`. A one-chip topology is refused (the
default host bounds are 2x2x1), so a one-chip program compiles on one device of the
smallest topology the chip's generation accepts, with a single-device sharding: the same
compiler as on the chip (bench/tpu_device.py measures the two side by side).
"""

from __future__ import annotations

from functools import lru_cache

# The smallest topology libtpu 0.0.42 builds deviceless for each chip.
SMALLEST_TOPOLOGY = {"v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2"}


class TpuTargetUnavailable(RuntimeError):
    """Deviceless TPU compilation cannot run here (libtpu is missing or refuses the target)."""


def has_local_tpu() -> bool:
    import jax

    try:
        return bool(jax.devices("tpu"))
    except RuntimeError:
        return False


@lru_cache(maxsize=8)
def topology(name: str):
    """The deviceless topology `name` (`v5e:2x2`, `v5e:4x4`, ...), built once per process."""
    from jax.experimental import topologies

    try:
        return topologies.get_topology_desc(topology_name=name, platform="tpu")
    except Exception as exc:  # libtpu missing, or a shape it refuses: both say so in exc
        raise TpuTargetUnavailable(
            f"deviceless TPU compile for {name} failed to start ({str(exc).strip()[:300]}); "
            'install costmodel[tpu] (jax[tpu], which brings libtpu)') from exc


def chip_of(name: str) -> str:
    """`v5e` of `v5e` or `v5e:4x4`."""
    chip = name.split(":")[0]
    if chip not in SMALLEST_TOPOLOGY:
        raise TpuTargetUnavailable(f"unknown TPU chip {chip!r}; known: {sorted(SMALLEST_TOPOLOGY)}")
    return chip


def deviceless_devices(target: str) -> list:
    """The compile-only devices for `target`: one chip (`v5e`) is the first device of its
    smallest topology; a topology (`v5e:4x4`) is all of its devices."""
    chip = chip_of(target)
    if ":" not in target:
        return [topology(SMALLEST_TOPOLOGY[chip]).devices[0]]
    return list(topology(target).devices)


def tpu_sharding(target: str):
    """A single-device sharding on the local TPU when there is one, else on one device of the
    deviceless target. Returns (sharding, deviceless)."""
    import jax
    from jax.sharding import SingleDeviceSharding

    if has_local_tpu():
        return SingleDeviceSharding(jax.devices("tpu")[0]), False
    return SingleDeviceSharding(deviceless_devices(target)[0]), True
