"""Measuring compiles: the harness, its child processes, sweeps, phases and calibration."""
