"""Sweeps of measurements: child and zygote processes, the runner, clusters, calibration and
re-extraction, built on `costmodel.measure` (the in-process harness)."""
