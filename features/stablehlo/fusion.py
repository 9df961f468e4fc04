"""Loop fusion of a block as XLA would fuse it: the groups the fusion features measure."""

from __future__ import annotations

from ..categories import EXPENSIVE_HLO, FUSIBLE_HLO, INDEXING_HLO


class Fusions:
    """XLA-like loop fusion of one block, from its consumers up.

    A fusible op joins its consumers' fusion when they all sit in one; a cheap op whose
    consumers sit in several is duplicated into each (XLA recomputes it rather than
    materialize it). A cheap op that reads at most one full-size array (the others are
    broadcasts, iotas, scalars) is also duplicated into the fusions of its fused consumers
    when some consumer cannot take it, and is materialized besides: XLA's global
    unfusibility check only protects ops that read more than one array. In a backward
    pass the running gradient sum is such an op, so each layer's fusion recomputes the
    sum from every layer above it and fusion sizes grow with depth squared. Anything
    else is the root of a fusion of its own.
    """

    def __init__(self) -> None:
        self._count = 0
        self._producer: dict = {}  # result value -> position of its op in the block
        self._users: dict[int, set[int]] = {}
        # ops whose result does not count as an array read (broadcasts, iotas, scalars)
        self._spread: set[int] = set()
        self._rank: dict[int, int | None] = {}
        # fusible ops: cost weight, whether XLA duplicates it, whether it changes
        # indexing, whether it reads at most one array
        self._fusible: dict[int, tuple[float, bool, bool, bool]] = {}

    def visit(self, operands: list, results: list, name: str, weight: float | None,
              rank: int | None) -> None:
        """Record the next op of the block: its SSA values, its name, its fusion cost
        (None if it does not fuse) and the rank of its first result."""
        position = self._count
        self._count += 1
        arrays = 0
        for operand in operands:
            producer = self._producer.get(operand)
            if producer is not None:
                self._users.setdefault(producer, set()).add(position)
                if producer in self._spread or self._lower_rank(producer, rank):
                    continue
            arrays += 1
        for result in results:
            self._producer[result] = position
        self._rank[position] = rank
        if name in ("broadcast_in_dim", "iota") or (name == "constant" and rank == 0):
            self._spread.add(position)
        if weight is not None:
            self._fusible[position] = (weight, name not in EXPENSIVE_HLO,
                                       name in INDEXING_HLO, arrays <= 1)

    def _lower_rank(self, producer: int, rank: int | None) -> bool:
        """Whether `producer`'s result has lower rank than `rank` (an index or a scalar
        operand, not an array read element by element)."""
        theirs = self._rank.get(producer)
        return rank is not None and theirs is not None and theirs < rank

    def groups(self) -> list[list]:
        """`[ops, summed cost weights, indexing ops]` of each fusion."""
        fusion_of: dict[int, set[int]] = {}
        groups: list[list] = []

        def new_fusion() -> int:
            groups.append([0, 0.0, 0])
            return len(groups) - 1

        for position in sorted(self._fusible, reverse=True):
            weight, cheap, indexing, unary = self._fusible[position]
            users = self._users.get(position, set())
            fused = [user for user in users if user in fusion_of]
            joined = set().union(*(fusion_of[user] for user in fused))
            if users and len(fused) == len(users) and (len(joined) == 1 or cheap):
                targets = joined
            elif cheap and unary and joined:
                targets = joined | {new_fusion()}
            else:
                targets = {new_fusion()}
            fusion_of[position] = targets
            for fusion in targets:
                groups[fusion][0] += 1
                groups[fusion][1] += weight
                groups[fusion][2] += indexing
        return groups


def fusion_weight(name: str, infos: list) -> float | None:
    """An op's cost inside a loop fusion (from its name and result types), None if it does
    not fuse."""
    if name not in FUSIBLE_HLO:
        return None
    dtype = infos[0].dtype if infos and infos[0] is not None else ""
    # transcendental ops expand to tens of instructions; 64-bit and complex math doubles
    weight = 4.0 if name in EXPENSIVE_HLO else 1.0
    return weight * (2.0 if dtype in ("f64", "complex<f64>") else 1.0) \
        * (2.0 if dtype.startswith("complex") else 1.0)


def rank(infos: list) -> int | None:
    """Rank of an op's first result (None if it is not a ranked tensor)."""
    return len(infos[0].shape) if infos and infos[0] is not None else None
