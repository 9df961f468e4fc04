"""Fitting the cost model: baselines, the estimator, phase shares, artifacts."""
