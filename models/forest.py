"""Boosted trees as flat numpy arrays: predictions without scikit-learn.

`HistGradientBoostingRegressor.predict` spends ~2 ms of Python and thread-pool set-up per
call, which is most of what a one-program prediction costs. The same trees evaluated here,
all at once level by level, take tens of microseconds and give the same numbers (a test
compares them). The arrays are what a model artifact stores, so a shipped model does not
depend on scikit-learn's classes or version.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ARRAYS = ("roots", "left", "right", "feature", "threshold", "nan_left", "value")


@dataclass(frozen=True, eq=False)
class FlatForest:
    """Trees as node arrays: a node's children (`left`, `right`; a leaf points at itself),
    its split (`feature`, `threshold`, where NaN goes), its leaf `value`; `roots` index each
    tree's first node. Prediction is `baseline` plus each tree's leaf value.

    Example:
        >>> forest = FlatForest.from_booster(booster)
        >>> forest.predict(X)   # equals booster.predict(X)
    """

    roots: np.ndarray
    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    nan_left: np.ndarray
    value: np.ndarray
    depth: int
    baseline: float

    @classmethod
    def from_booster(cls, booster) -> FlatForest:
        """The trees of a fitted `HistGradientBoostingRegressor` (reads its fitted nodes)."""
        trees = [predictors[0].nodes for predictors in booster._predictors]
        if not trees:
            raise ValueError("the booster has no trees")
        if any(tree["is_categorical"].any() for tree in trees):
            raise ValueError("categorical splits are not supported")
        sizes = np.array([len(tree) for tree in trees], dtype=np.intp)
        roots = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        nodes = np.concatenate(trees)
        shift = np.repeat(roots, sizes)
        own = np.arange(len(nodes), dtype=np.intp)
        leaf = nodes["is_leaf"].astype(bool)
        # a leaf points at itself, so walking a fixed number of levels stays on it
        return cls(roots=roots,
                   left=np.where(leaf, own, nodes["left"].astype(np.intp) + shift),
                   right=np.where(leaf, own, nodes["right"].astype(np.intp) + shift),
                   feature=nodes["feature_idx"].astype(np.intp),
                   threshold=nodes["num_threshold"].astype(float),
                   nan_left=nodes["missing_go_to_left"].astype(bool),
                   value=nodes["value"].astype(float),
                   depth=int(nodes["depth"].max()),
                   baseline=float(np.ravel(booster._baseline_prediction)[0]))

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything as plain arrays (what `from_arrays` takes back)."""
        return {**{name: getattr(self, name) for name in ARRAYS},
                "depth": np.array(self.depth), "baseline": np.array(self.baseline)}

    @classmethod
    def from_arrays(cls, arrays) -> FlatForest:
        return cls(**{name: np.asarray(arrays[name]) for name in ARRAYS},
                   depth=int(arrays["depth"]), baseline=float(arrays["baseline"]))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Sum of the trees' leaf values plus the baseline, one value per row of `X`."""
        X = np.asarray(X, float)
        feature, threshold, nan_left = self.feature, self.threshold, self.nan_left
        if len(X) == 1:  # a prediction: one row, read without two-dimensional indexing
            row, pos = X[0], self.roots
            for _ in range(self.depth):
                x = row[feature[pos]]
                go_left = (x <= threshold[pos]) | (np.isnan(x) & nan_left[pos])
                pos = np.where(go_left, self.left[pos], self.right[pos])
            return self.baseline + self.value[pos][None, :].sum(axis=1)
        pos = np.tile(self.roots, (len(X), 1))
        rows = np.arange(len(X))[:, None]
        for _ in range(self.depth):
            x = X[rows, feature[pos]]
            go_left = (x <= threshold[pos]) | (np.isnan(x) & nan_left[pos])
            pos = np.where(go_left, self.left[pos], self.right[pos])
        return self.baseline + self.value[pos].sum(axis=1)
