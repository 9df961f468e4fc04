"""Feature rows as one float matrix, and the derived columns the model reads.

Runtime code: numpy only. A pandas DataFrame is read through its `columns` and `loc`
without importing pandas, so predicting never loads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

_LARGEST = np.finfo(float).max


def counts_or_zero(values: np.ndarray) -> np.ndarray:
    """`values` with NaN as 0 and +inf as the largest float: `np.nan_to_num` of an array
    holding no -inf (its Python checks cost more than a one-row model does)."""
    return np.where(np.isnan(values), 0.0, np.minimum(values, _LARGEST))


@lru_cache(maxsize=256)
def _positions(names: tuple[str, ...], wanted: tuple[str, ...]) -> list[int]:
    # every prediction looks up the same few columns by name
    return [names.index(name) for name in wanted]


@dataclass(frozen=True)
class Table:
    """Feature columns as one float matrix (rows x names): what the baseline and trees read.

    Predictions are one row at a time, where building a DataFrame costs more than the
    model itself.
    """

    names: tuple[str, ...]
    values: np.ndarray

    @classmethod
    def of(cls, X, names: Sequence[str]) -> Table:
        """The `names` columns of a DataFrame, or of a sequence of feature mappings."""
        if hasattr(X, "columns") and hasattr(X, "loc"):  # a DataFrame
            missing = [name for name in names if name not in X.columns]
            values = None if missing else X.loc[:, list(names)].to_numpy(float)
        elif isinstance(X, Sequence) and all(isinstance(row, Mapping) for row in X):
            missing = sorted({name for row in X for name in names if name not in row})
            values = None if missing else np.array(
                [[row[name] for name in names] for row in X], float).reshape(len(X), len(names))
        else:
            raise TypeError("X must be a pandas DataFrame or a sequence of feature mappings, "
                            f"not {type(X).__name__}")
        if missing:
            raise ValueError(f"missing feature columns ({len(missing)}): {', '.join(missing)}")
        return cls(tuple(names), values)

    def __len__(self) -> int:
        return len(self.values)

    def column(self, name: str) -> np.ndarray:
        return self.values[:, _positions(self.names, (name,))[0]]

    def rows(self, index) -> Table:
        return Table(self.names, self.values[index])

    def log_counts(self, names: Sequence[str]) -> np.ndarray:
        """log(1 + count) of the named columns (negative and NaN counts as 0)."""
        counts = self.values[:, _positions(self.names, tuple(names))]
        return np.log1p(counts_or_zero(np.maximum(counts, 0.0)))


def augment(table: Table) -> Table:
    """Model features plus derived sizes and ratios (trees cannot form ratios themselves)."""
    def safe(name: str) -> np.ndarray:
        return np.maximum(table.column(name), 1.0)

    derived = {
        "io_bytes": table.column("input_bytes") + table.column("output_bytes"),
        "unroll_ratio": safe("hlo_ops_trip_weighted") / safe("hlo_ops_inlined"),
        "inline_ratio": safe("hlo_ops_inlined") / safe("hlo_ops"),
        "ops_per_function": safe("hlo_ops_inlined") / safe("hlo_functions"),
        "flops_per_op": safe("dot_flops") / safe("hlo_ops_inlined"),
        # long chains over few inputs (unrolled loops) against wide programs over many
        "ops_per_param": safe("hlo_ops_inlined") / safe("param_count"),
        # the emulated fusions' ops in all: follows XLA's optimized instruction count
        "fused_ops": table.column("fusion_groups") * table.column("fusion_mean_size"),
    }
    values = np.column_stack([table.values, *derived.values()])
    return Table(table.names + tuple(derived), values)
