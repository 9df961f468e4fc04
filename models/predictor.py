"""A fitted cost model as plain data: what predicting reads, with no training code.

Each target is modelled in log space as `baseline(size) + trees(features)` (see
`costmodel.training.fitting.estimator`, which fits it). This module holds the fitted numbers
and evaluates them with numpy; `save`/`load` write them as one `.npz` of arrays plus a
JSON description inside it, loaded with `allow_pickle=False`, so loading a model never
runs code and does not depend on scikit-learn's version.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from .forest import FlatForest
from .novelty import Novelty, Widening
from .phase_shares import PhaseShares
from .power_law import baseline_log
from .table import Table, augment, counts_or_zero

TARGETS = ("compile_seconds", "peak_rss_bytes", "executable_memory_bytes")
# Added before taking logs. Peak RSS growth of a small compile is zero or a few pages of
# allocator noise, so below ~1 MiB it carries no signal; executable memory of a tiny
# program can be a few bytes. Compile time is always positive.
LOG_OFFSETS = {"compile_seconds": 0.0, "peak_rss_bytes": float(2**20),
               "executable_memory_bytes": float(2**10)}
# Format 2 added the training rows' `novelty` and the compile-time interval's `widening`,
# format 3 a widening per target (`widenings`), format 4 a target's `anchor`, format 5 the
# bytes an anchor's ceiling holds (`Anchor.held`), format 6 a target's `sharded_offset`;
# format 1 files (the widening, if any, was multiplied into the interval offsets) and
# formats 2-5 still load.
FORMAT = 6
READABLE_FORMATS = (1, 2, 3, 4, 5, 6)
_EPS = 1e-12


def sharded(table: Table) -> np.ndarray:
    """1.0 for each row of `table` compiled over more than one chip (its `chips` input), 0.0
    for the rest and for tables without that input."""
    if "chips" not in table.names:
        return np.zeros(len(table))
    return (table.column("chips") > 1).astype(float)


def to_log(target: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    """The modelled scale of `target`: log(value + offset)."""
    return np.log(np.maximum(np.asarray(values, float) + LOG_OFFSETS[target], _EPS))


def from_log(target: str, values: np.ndarray) -> np.ndarray:
    """Inverse of `to_log`, clipped at zero."""
    return np.maximum(np.exp(values) - LOG_OFFSETS[target], 0.0)


def column_sum(table: Table, names: Sequence[str]) -> np.ndarray:
    """Each row's sum of the named columns (negative and NaN count as 0)."""
    counts = [counts_or_zero(np.maximum(table.column(name), 0.0)) for name in names]
    return np.sum(counts, axis=0) if counts else np.zeros(len(table))


@dataclass(frozen=True, eq=False)
class Bands:
    """Interval offsets per band of predicted size: band i is below `edges[i]`."""

    edges: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


@dataclass(frozen=True)
class Anchor:
    """A ceiling on a target's log prediction drawn from another target's: where `z` lies
    above `slope * z_source + intercept + margin`, it moves `weight` of the way down to it.
    Host memory of a compile follows its compile time (real programs of 10 s or more: 26-62
    MB per compile second, 10th to 90th percentile), while a memory model that reads op
    counts and op mix alone has no such bound. The line runs through the middle of the
    real programs, and some use more memory per second than others, so the ceiling sits
    `margin` above it; below it a prediction is left alone. Bytes a compile must hold
    whatever its time (the `held` columns: captured constants and what folding them makes)
    raise the ceiling by `per_held_byte` each: a program that multiplies two captured
    1024x1024 tables compiles in 0.35 s and holds 101 MB."""

    source: str
    weight: float
    slope: float
    intercept: float
    margin: float = 0.0
    held: tuple[str, ...] = ()
    per_held_byte: float = 0.0

    def held_bytes(self, table: Table) -> np.ndarray:
        return column_sum(table, self.held)

    def pull(self, z: np.ndarray, z_source: np.ndarray, held_bytes: np.ndarray | float = 0.0
             ) -> np.ndarray:
        ceiling = self.slope * z_source + self.intercept + self.margin
        if self.per_held_byte:
            ceiling = np.logaddexp(ceiling, np.log(self.per_held_byte * held_bytes + _EPS))
        return np.where(z > ceiling, (1.0 - self.weight) * z + self.weight * ceiling, z)


@dataclass(frozen=True, eq=False)
class TargetModel:
    """One target's fitted parts: the baseline (`form`, its size `terms` and `added`
    terms, `coef`), the trees on its residual, the interval's log offsets (one pair for
    all sizes, or `bands` by size, around the anchored prediction), an `anchor`, if
    any, pulling the prediction toward another target's, and a `sharded_offset` added
    (log scale) to programs compiled over more than one chip."""

    form: str
    terms: tuple[str, ...]
    added: tuple[str, ...]
    coef: np.ndarray
    forest: FlatForest | None = None
    lo: float = -np.inf
    hi: float = np.inf
    bands: Bands | None = None
    oof_residual_mad: float | None = None
    anchor: Anchor | None = None
    sharded_offset: float = 0.0

    def parts(self, table: Table, tree_columns: Sequence[int] | None
              ) -> tuple[np.ndarray, np.ndarray]:
        """Baseline and tree parts of the log prediction for each row of `table` (the
        trees read `tree_columns` of it, or every column)."""
        base = baseline_log(self.coef, table.log_counts(self.terms), self.form,
                            table.log_counts(self.added))
        trees = np.zeros(len(table))
        if self.forest is not None:
            values = table.values if tree_columns is None else table.values[:, tree_columns]
            trees = self.forest.predict(values)
        return base, trees + self.sharded_offset * sharded(table)

    def interval_offsets(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log-scale offsets of the interval around predictions `z`: the size band's
        when the model has bands."""
        if self.bands is None:
            return np.full(len(z), self.lo), np.full(len(z), self.hi)
        band = np.searchsorted(self.bands.edges, z, side="right")
        return self.bands.lo[band], self.bands.hi[band]


@dataclass(frozen=True, eq=False)
class Predictor:
    """Predicts compile seconds, peak host-RSS growth and executable bytes, with intervals.

    Attributes:
        feature_names: The model inputs, in order (`MODEL_FEATURES` when fitted).
        targets: The fitted model of each target.
        tree_exclude: Features the trees do not read.
        reference_power, reference_seconds: How the reference compile timed with each
            training row was divided out (predictions are for a machine whose reference
            takes `reference_seconds`).
        recipe: The constructor arguments of the estimator that was fitted (to refit the
            same model on other rows), or None.
        phase_shares: How compile time splits into parts of XLA's compile (the predicted
            parts `costmodel profile` shows), or None.
        novelty: The training rows, to tell how far a program lies from them, or None.
        widenings: How each target's interval widens with that distance (targets not
            named keep their fitted interval).

    Example:
        >>> predictor.predict([features.model_inputs()])["compile_seconds"]["hi"]
    """

    feature_names: tuple[str, ...]
    targets: Mapping[str, TargetModel]
    tree_exclude: tuple[str, ...] = ()
    reference_power: float = 0.0
    reference_seconds: float | None = None
    recipe: Mapping[str, Any] | None = field(default=None)
    phase_shares: PhaseShares | None = None
    novelty: Novelty | None = None
    widenings: Mapping[str, Widening] = field(default_factory=dict)

    def table(self, X) -> Table:
        """The model's inputs and derived columns for X (a DataFrame or feature mappings)."""
        return augment(Table.of(X, self.feature_names))

    def tree_columns(self, table: Table) -> list[int] | None:
        if not self.tree_exclude:
            return None
        return _tree_columns(table.names, tuple(self.tree_exclude))

    def predict_log(self, X) -> dict[str, np.ndarray]:
        """Point estimates on the modelled (log) scale, per target."""
        return self._log_points(self.table(X))

    def _log_points(self, table: Table) -> dict[str, np.ndarray]:
        columns = self.tree_columns(table)
        points = {target: np.add(*fitted.parts(table, columns))
                  for target, fitted in self.targets.items()}
        return {target: z if (anchor := self.targets[target].anchor) is None
                else anchor.pull(z, points[anchor.source], anchor.held_bytes(table))
                for target, z in points.items()}

    def part_shares(self, X) -> dict[str, np.ndarray] | None:
        """Each part's predicted share of the compile (`phase_shares.PARTS`), per row of
        X; None for a model fitted without them."""
        if self.phase_shares is None:
            return None
        return self.phase_shares.predict(Table.of(X, self.feature_names))

    def predict(self, X) -> dict[str, dict[str, np.ndarray]]:
        """Point estimate and interval per target, in natural units.

        Returns:
            `{target: {"point", "lo", "hi"}}`, each an array with one value per row of X.
        """
        return self.predict_with_distance(X, want_distance=False)[0]

    def predict_with_distance(self, X, want_distance: bool = True
                              ) -> tuple[dict[str, dict[str, np.ndarray]], np.ndarray | None]:
        """`predict` and each row's `distance` from the training rows, measured once for
        both (None for a model saved without its training rows, or when not wanted and
        the widening does not need it)."""
        table = self.table(X)
        needed = any(rule.uses_distance for rule in self.widenings.values())
        distance = (self.distance(table) if self.novelty is not None
                    and (want_distance or needed) else None)
        out = {}
        for target, z in self._log_points(table).items():
            lo, hi = self.targets[target].interval_offsets(z)
            rule = self.widenings.get(target)
            if rule is not None:
                scale = rule.scale(distance if rule.uses_distance else np.zeros(len(z)))
                lo, hi = lo * scale, hi * scale
            out[target] = {"point": from_log(target, z), "lo": from_log(target, z + lo),
                           "hi": from_log(target, z + hi)}
        return out, distance

    def distance(self, X) -> np.ndarray:
        """How far each row of X (or of its `table`) lies from the training rows
        (`Novelty.distance`); raises ValueError for a model saved without them."""
        if self.novelty is None:
            raise ValueError("this model was saved without its training rows' novelty "
                             "reference (format 1); retrain it to get distances")
        table = X if isinstance(X, Table) else self.table(X)
        return self.novelty.distance(table.values[:, :len(self.feature_names)])

    def arrays(self) -> dict[str, np.ndarray]:
        """The model as named arrays, its description as JSON in `meta` (see `load`)."""
        arrays: dict[str, np.ndarray] = {}
        described = {}
        for target, fitted in self.targets.items():
            arrays[f"{target}.coef"] = np.asarray(fitted.coef, float)
            arrays[f"{target}.interval"] = np.array([fitted.lo, fitted.hi], float)
            if fitted.forest is not None:
                for name, value in fitted.forest.arrays().items():
                    arrays[f"{target}.forest.{name}"] = value
            if fitted.bands is not None:
                for name in ("edges", "lo", "hi"):
                    arrays[f"{target}.bands.{name}"] = np.asarray(getattr(fitted.bands, name),
                                                                  float)
            described[target] = {"form": fitted.form, "terms": list(fitted.terms),
                                 "added": list(fitted.added),
                                 "forest": fitted.forest is not None,
                                 "bands": fitted.bands is not None,
                                 "oof_residual_mad": fitted.oof_residual_mad,
                                 "anchor": None if fitted.anchor is None
                                 else dataclasses.asdict(fitted.anchor),
                                 "sharded_offset": fitted.sharded_offset}
        if self.phase_shares is not None:
            arrays["phase_shares.coef"] = np.asarray(self.phase_shares.coef, float)
        if self.novelty is not None:
            arrays.update(self.novelty.arrays())
        meta = {"format": FORMAT, "feature_names": list(self.feature_names),
                "tree_exclude": list(self.tree_exclude),
                "reference_power": self.reference_power,
                "reference_seconds": self.reference_seconds,
                "recipe": jsonable(self.recipe), "targets": described,
                "phase_shares": None if self.phase_shares is None else {
                    "terms": list(self.phase_shares.terms),
                    "modelled": list(self.phase_shares.modelled)},
                "novelty": self.novelty is not None,
                "widenings": {target: rule.as_dict() for target, rule in self.widenings.items()}}
        arrays["meta"] = np.array(json.dumps(meta, allow_nan=False))
        return arrays

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> Predictor:
        """The model `arrays()` described (e.g. an `np.load`ed `.npz`)."""
        meta = json.loads(str(arrays["meta"][()]))
        if meta.get("format") not in READABLE_FORMATS:
            raise ValueError(f"model arrays of format {meta.get('format')!r}; this costmodel "
                             f"reads formats {', '.join(map(str, READABLE_FORMATS))}")
        targets = {}
        for target, described in meta["targets"].items():
            def part(name: str, _target=target) -> np.ndarray:
                return np.asarray(arrays[f"{_target}.{name}"])

            forest = None
            if described["forest"]:
                prefix = f"{target}.forest."
                forest = FlatForest.from_arrays(
                    {k[len(prefix):]: arrays[k] for k in arrays if k.startswith(prefix)})
            bands = Bands(*(part(f"bands.{n}") for n in ("edges", "lo", "hi"))) \
                if described["bands"] else None
            lo, hi = part("interval")
            targets[target] = TargetModel(
                form=described["form"], terms=tuple(described["terms"]),
                added=tuple(described["added"]), coef=part("coef"), forest=forest,
                lo=float(lo), hi=float(hi), bands=bands,
                oof_residual_mad=described.get("oof_residual_mad"),
                anchor=_anchor(described.get("anchor")),
                sharded_offset=float(described.get("sharded_offset", 0.0)))
        shares = meta.get("phase_shares")
        return cls(feature_names=tuple(meta["feature_names"]), targets=targets,
                   tree_exclude=tuple(meta["tree_exclude"]),
                   reference_power=float(meta["reference_power"]),
                   reference_seconds=meta["reference_seconds"], recipe=meta["recipe"],
                   phase_shares=None if shares is None else PhaseShares(
                       tuple(shares["terms"]), tuple(shares["modelled"]),
                       np.asarray(arrays["phase_shares.coef"], float)),
                   novelty=Novelty.from_arrays(arrays) if meta.get("novelty") else None,
                   widenings=_widenings(meta))

    def save(self, handle) -> None:
        """Write the model as an uncompressed `.npz` to a binary file handle; the same
        model gives the same bytes (fixed entry times, unlike `np.savez`), so its sha256
        names it."""
        import zipfile

        with zipfile.ZipFile(handle, "w", zipfile.ZIP_STORED) as archive:
            for name, value in self.arrays().items():
                entry = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                with archive.open(entry, "w") as out:
                    np.lib.format.write_array(out, np.asarray(value), allow_pickle=False)

    @classmethod
    def load(cls, path) -> Predictor:
        """Read a model `save` wrote; nothing in the file is unpickled."""
        with np.load(path, allow_pickle=False) as arrays:
            return cls.from_arrays({name: arrays[name] for name in arrays.files})


@lru_cache(maxsize=64)
def _tree_columns(names: tuple[str, ...], exclude: tuple[str, ...]) -> list[int]:
    # the same for every prediction of a model
    return [i for i, name in enumerate(names) if name not in exclude]


def _widenings(meta: Mapping) -> dict[str, Widening]:
    """The widening per target a model's description holds (format 2: compile time's only)."""
    if meta.get("format") == 2:
        single = meta.get("widening")
        return {} if single is None else {"compile_seconds": Widening.from_dict(single)}
    return {target: Widening.from_dict(rule) for target, rule in
            (meta.get("widenings") or {}).items()}


def _anchor(described: Mapping | None) -> Anchor | None:
    """The `Anchor` a target's description holds (format 4: no held bytes), if any."""
    if not described:
        return None
    return Anchor(**{**described, "held": tuple(described.get("held", ()))})


def as_predictor(model) -> Predictor:
    """The `Predictor` of a fitted estimator (its `predictor`), or `model` itself."""
    return model if isinstance(model, Predictor) else model.predictor


def jsonable(value: Any) -> Any:
    """Plain JSON values: mappings and sequences as dicts and lists, numpy scalars as
    Python numbers, NaN and infinities as null."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
