"""Evaluating models: held-out splits, metrics, plots, promotion of retrained models."""
