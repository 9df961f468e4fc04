"""Loop fusion of a block as XLA would fuse it: the groups the fusion features measure."""

from __future__ import annotations

from collections import defaultdict

from ..categories import (
    EXPENSIVE_HLO,
    FUSIBLE_HLO,
    INDEXING_HLO,
    SAME_INDEX_HLO,
    SINGLE_USE_HLO,
    UNDUPLICATED_HLO,
)
from .tensors import tensor

# op name -> (XLA duplicates it, it changes indexing, it fuses into one user only, it reads
# its operands at its own index, its result is no array read: a broadcast or an iota)
_FLAGS: dict[str, tuple[bool, bool, bool, bool, bool]] = {}


def _flags(name: str) -> tuple[bool, bool, bool, bool, bool]:
    flags = (name not in UNDUPLICATED_HLO, name in INDEXING_HLO, name in SINGLE_USE_HLO,
             name in SAME_INDEX_HLO, name in ("broadcast_in_dim", "iota"))
    if len(_FLAGS) < 4096:  # text from a request may name any number of unknown ops
        _FLAGS[name] = flags
    return flags


class _LayoutCopy:
    """The value of a dot operand copied into the layout XLA:CPU's GEMM reads."""

    __slots__ = ()


_NONE: frozenset = frozenset()  # no users, no fusion: read, never changed


class Fusions:
    """XLA-like loop fusion of one block, from its consumers up.

    A fusible op joins its consumers' fusion when they all sit in one. An op with a
    single consumer goes wherever that consumer's copies go, except on XLA:CPU an
    expensive one (`UNDUPLICATED_HLO`): XLA copies the consumer into each of its users'
    fusions first and then finds the expensive op read by several, so it materializes
    it (jax 0.10.2: `log1p(x) * 2` read by three fusions keeps one log1p). An op
    whose consumers sit in several fusions is duplicated into each (XLA recomputes it
    rather than materialize it) unless it is expensive math XLA will not duplicate
    (`UNDUPLICATED_HLO`), or it reads more than one full-size array (the others being
    broadcasts, iotas, scalars) and some path from it to one of its consumers runs
    through an op that does not fuse: XLA fuses such a producer only where it can fuse
    it on all paths. A cheap op that reads at most one array is also duplicated into
    the fusions of its fused consumers when some consumer cannot take it, and is
    materialized besides. A slice taken from a concatenate reads only the operand it
    falls in (see `slices`). For XLA:CPU (`xla_cpu`), a concatenate it materializes
    (`concatenate_fuses`) does not fuse, so each of its operands roots a fusion of its
    own, and a concatenate or pad fuses only where its fusion reads it once at one index
    (`SINGLE_USE_HLO`); XLA:GPU fuses and duplicates them like any cheap op. A dot operand
    XLA:CPU copies into its library's layout goes through a transpose that fuses
    (`layout_copy`), and the walker visits a called function's ops in place of the call
    (XLA inlines calls before fusing). Anything else is the root of a fusion of its own.
    On XLA:CPU a reshape, a convert to its own type and a broadcast that only inserts unit
    dimensions are bitcasts: they fuse but count as no op (`leaves_no_instruction`).

    Scored against XLA's optimized modules (`bench/archive/fusion_vs_xla.py`: 223 stored CPU rows,
    3 per family, lowered again), the log of the total fused ops follows the log of XLA's
    instruction count with median error 0.212, p90 0.576 (the StableHLO op count: 0.246 /
    0.819; schema 9, with slices pushed through elementwise math and concatenates fused
    however often read: 0.216 / 0.586; schema 8, before the concatenate rules: 0.239 /
    0.606). Fused ops (total, largest fusion) of XLA against this emulator: Haiku GRU 32
    static steps 10.9k / 287 against 13.1k / 350 (schema 8: 31.3k / 893); Keras LSTM 32
    unrolled steps 14.1k / 237 against 15.0k / 260 (schema 8: 6.7k / 277); sympy2jax fit
    of 4 outputs x 32 terms 10.8k / 805 against 14.4k / 809 (schema 9: 78.8k / 811).
    `bench/archive/fusion_emulation.md` has the history.
    """

    def __init__(self, xla_cpu: bool = True, texts: dict | None = None) -> None:
        self._xla_cpu = xla_cpu
        self._producer: dict = {}  # result value -> position of its op
        self._users: defaultdict = defaultdict(set)  # position -> its users' positions
        # ops whose result does not count as an array read (broadcasts, iotas, scalars)
        self._spread: set = set()
        self._rank: list = []  # position -> rank of its first result: one per op visited
        # fusible ops: cost weight, whether XLA duplicates it, whether it changes
        # indexing, whether it reads at most one array, whether it fuses into one user
        # only, the arrays it reads (a producing op's position, or the value itself for a
        # block argument: a fusion's inputs are those read from outside it)
        self._fusible: dict = {}
        self._bypassed: set = set()  # ops a resolved slice no longer reads through
        self._unread: set = set()  # ops only a dropped select read (`drop_select`)
        self._copies: dict = {}  # (value, layout) -> its layout copy for a dot
        self._same_index: set = set()  # fusible ops that read operands at their own index
        self._seen: dict = {}  # (op kind, operands' producers) -> its results (`visit`)
        # what makes two fusions the same kernel: each fusible op's and constant's kind,
        # attributes and result types, with the constants it reads (XLA:CPU compiles a
        # repeated kernel once), as text: equal texts, equal ops
        self._signature: dict = {}
        # signature -> its text, shared by the fusions of one walk (`texts`): a module
        # repeats a few signatures, and texts compare and sort faster than nested tuples
        self._texts: dict = {} if texts is None else texts
        self._constants: set = set()

    def visit(self, operands: list, results: list, name: str, weight: float | None,
              rank: int | None, signature=None, reads=None, merge: bool = False) -> None:
        """Record the next op of the block: its SSA values, its name, its fusion cost
        (None if it does not fuse), the rank of its first result and what tells it from
        another op of its kind (`signature`: attributes and result types). `reads`: what
        a slice reads in place of its first operand, an operand of the concatenate it
        slices (`slices`). With `merge`, an op of the same `signature` visited before with
        the same operands stands for this one, which is not recorded: XLA's CSE merges
        the two before fusing."""
        producer_of = self._producer
        if merge:
            first = self._seen.setdefault(
                (signature, tuple(map(producer_of.get, operands, operands))), results)
            if first is not results:
                for result, earlier in zip(results, first):
                    self.alias(result, earlier)
                return
        ranks = self._rank
        position = len(ranks)
        producers = list(map(producer_of.get, operands))
        if weight is not None or name == "constant":
            constants, signatures = self._constants, self._signature
            full = (name, signature, tuple([signatures[producer] for producer in producers
                                            if producer in constants])
                    if not constants.isdisjoint(producers) else ())
            text = self._texts.get(full)
            if text is None:
                text = self._texts[full] = repr(full)
            signatures[position] = text
            if name == "constant":
                constants.add(position)
        if reads is not None:
            self._bypassed.add(producers[0])
            operands = [reads, *operands[1:]]
            producers = [producer_of.get(reads), *producers[1:]]
        spread, users = self._spread, self._users
        if weight is None:  # only a fusible op's reads are asked for (`groups`)
            for producer in producers:
                if producer is not None:
                    users[producer].add(position)
        else:
            arrays = 0
            read = []
            for operand, producer in zip(operands, producers):
                if producer is None:
                    read.append(operand)
                    arrays += 1
                    continue
                users[producer].add(position)
                # a broadcast, an iota, a scalar or a lower-rank operand is no array read
                if producer in spread:
                    continue
                theirs = ranks[producer]
                if theirs != 0:
                    read.append(producer)
                if rank is not None and theirs is not None and theirs < rank:
                    continue
                arrays += 1
        for result in results:
            producer_of[result] = position
        ranks.append(rank)
        cheap, indexing, single_use, same_index, spreads = _FLAGS.get(name) or _flags(name)
        if spreads or (rank == 0 and name == "constant"):
            spread.add(position)
        if weight is not None:
            self._fusible[position] = (weight, cheap, indexing, arrays <= 1,
                                       self._xla_cpu and single_use, read)
            if same_index:
                self._same_index.add(position)

    def layout_copy(self, value, layout, rank: int | None, value_type: str = ""):
        """The copy of `value` (of type `value_type`) in `layout` that XLA:CPU makes for a
        dot's library call: a transpose that fuses, so `value`'s producers fuse into it.
        One copy per value and layout (XLA merges identical copies)."""
        key = (value, layout)
        if key not in self._copies:
            self._copies[key] = copy = _LayoutCopy()
            self.visit([value], [copy], "transpose", 1.0, rank, (layout, value_type))
        return self._copies[key]

    def drop_select(self, predicate) -> None:
        """A select of one value on both sides was dropped (XLA's simplifier makes it
        that value; the walker names it so): what computed its `predicate` is dead unless
        something else reads it."""
        producer = self._producer.get(predicate)
        if producer is not None:
            self._unread.add(producer)

    def alias(self, value, source) -> None:
        """`value` is `source` under another name (a call's result is what its callee
        returns, once XLA has inlined the call)."""
        if source in self._producer:
            self._producer[value] = self._producer[source]

    def _blocked(self) -> set:
        """Fusible ops from which some path to one of their users runs through an op
        that does not fuse (XLA will not duplicate those): bitsets of the non-fusible
        ops below and above each op."""
        users_of, fusible = self._users, self._fusible
        operands: dict = {}
        for producer, users in users_of.items():
            for user in users:
                operands.setdefault(user, []).append(producer)
        readers = sorted(operands)  # a producer comes before its users
        # only an op that reads something of the block can lie between two others
        bit: dict = {}
        for position in readers:
            if position not in fusible:
                bit[position] = 1 << len(bit)
        if not bit:
            return set()
        above: dict = {}  # position -> the non-fusible ops on paths into it
        for position in readers:
            mask = 0
            for producer in operands[position]:
                mask |= above.get(producer, 0) | bit.get(producer, 0)
            above[position] = mask
        below: dict = {}  # position -> the non-fusible ops on paths out of it
        for position in sorted(users_of, reverse=True):
            mask = 0
            for user in users_of[position]:
                mask |= below.get(user, 0) | bit.get(user, 0)
            below[position] = mask
        blocked = set()
        for position in fusible:
            mask = below.get(position)
            if mask:
                for user in users_of[position]:
                    if above[user] & mask:
                        blocked.add(position)
                        break
        return blocked

    def _reads(self, position: int, fusions: set, fusion_of: dict) -> int:
        """At how many indices its fusion reads `position`'s value: the distinct ops that
        change indexing on the way from it through same-index ops, and the fusion's output
        (XLA's `FusionNodeIndexingEvaluation`)."""
        readers, seen, frontier = set(), {position}, [position]
        while frontier:
            for user in self._users.get(frontier.pop(), ()):
                if not fusions & fusion_of.get(user, set()):
                    readers.add(None)  # leaves the fusion: its output
                elif user not in self._same_index:
                    readers.add(user)
                elif user not in seen:
                    seen.add(user)
                    frontier.append(user)
        return len(readers)

    def groups(self) -> list[tuple]:
        """`(ops, summed cost weights, indexing ops, signature, inputs)` of each fusion
        (equal signatures: the same kernel; inputs: the distinct arrays it reads from
        outside, its fused computation's parameters)."""
        blocked: list = []  # `_blocked()`, found when first asked: most blocks never ask

        def duplicable(position: int, cheap: bool, unary: bool) -> bool:
            if not cheap or unary:
                return cheap
            if not blocked:
                blocked.append(self._blocked())
            return position not in blocked[0]

        fusion_of: dict = {}
        dead: set = set()  # left unread once slices were resolved past them
        groups: list[list] = []

        def new_fusion() -> int:
            groups.append([0, 0.0, 0, [], set()])
            return len(groups) - 1

        users_of, ranks, signatures = self._users, self._rank, self._signature
        # positions were recorded in increasing order: the last op first
        fusible = self._fusible
        for position, (weight, cheap, indexing, unary, single_use, _) in reversed(
                fusible.items()):
            every_user = users_of.get(position, _NONE)
            users = every_user - dead if dead else every_user
            if not users and (every_user or position in self._bypassed
                              or position in self._unread):
                dead.add(position)
                continue
            # (fusion sets are never changed once made: one may stand for several ops)
            if len(users) == 1:
                for user in users:
                    joined = fusion_of.get(user)
                fused = 0 if joined is None else 1
                if joined is None:
                    joined = set()
            else:
                found = [fusion_of[user] for user in users if user in fusion_of]
                fused = len(found)
                joined = found[0] if fused == 1 else set().union(*found)
            # an op with one user fuses into it before that user is copied, and goes
            # wherever its copies go; an expensive op with several users stays whole
            # XLA's all-paths check guards only ops that read more than one array
            if single_use and (len(users) > 1 or len(joined) > 1
                               or self._reads(position, joined, fusion_of) > 1):
                targets = {new_fusion()}
            elif users and fused == len(users) and (
                    len(joined) == 1 or duplicable(position, cheap, unary)
                    or (len(users) == 1 and (cheap or not self._xla_cpu))):
                targets = joined
            elif cheap and unary and joined:  # duplicable, reading at most one array
                targets = joined | {new_fusion()}
            else:
                targets = {new_fusion()}
            fusion_of[position] = targets
            # A rank-0 op adds no cost: XLA:CPU compiles scalars as straight-line code in
            # time linear in their ops, an array's loop body superlinearly (one fusion
            # summing N sine terms over N inputs: 0.11 / 0.23 s at N = 128 / 256 as
            # scalars, 0.24 / 0.66 s over shape (1,), 0.42 / 1.05 s over (512,);
            # `bench/archive/scalar_fusions.py`). Unrolled solvers, simulations and message
            # passing build big scalar fusions (jax-md's unrolled gradient: 588 ops).
            cost = 0.0 if ranks[position] == 0 else weight
            instruction = weight > 0  # a bitcast is no instruction
            signature = signatures[position]
            for fusion in targets:
                group = groups[fusion]
                group[0] += instruction
                group[1] += cost
                group[2] += indexing
                group[3].append(signature)
        for position, targets in fusion_of.items():
            for array in fusible[position][5]:
                theirs = fusion_of.get(array)
                if theirs is targets:  # read inside the fusions it was made in
                    continue
                for fusion in targets if theirs is None else targets - theirs:
                    groups[fusion][4].add(array)
        return [(*group[:3], hash(tuple(sorted(group[3]))), len(group[4]))
                for group in groups if group[0]]


def fusion_weight(name: str, infos: list, op=None, xla_cpu: bool = True,
                  decode=tensor) -> float | None:
    """An op's cost inside a loop fusion (from its name and result types), None if it does
    not fuse (a concatenate XLA:CPU compiles: also from `op`'s operands and dimension;
    XLA:GPU fuses them all), 0 if XLA:CPU makes it a bitcast (`decode`: how to read an
    operand's type, e.g. the walker's cached `tensor`)."""
    if name not in FUSIBLE_HLO:
        return None
    if name == "concatenate" and xla_cpu and op is not None and not concatenate_fuses(
            len(op.operands), int(op.attributes["dimension"].value), infos):
        return None
    if xla_cpu and op is not None and leaves_no_instruction(name, op, infos, decode):
        return 0.0
    dtype = infos[0].dtype if infos and infos[0] is not None else ""
    return op_weight(name, wide=dtype in ("f64", "complex<f64>"),
                     complex_=dtype.startswith("complex"))


def op_weight(name: str, wide: bool, complex_: bool) -> float:
    """A fused op's cost by its kind and element type: transcendental ops expand to tens
    of instructions; 64-bit (`wide`) and complex math each double it."""
    weight = 4.0 if name in EXPENSIVE_HLO else 1.0
    return weight * (2.0 if wide else 1.0) * (2.0 if complex_ else 1.0)


def leaves_no_instruction(name: str, op, infos: list, decode=tensor) -> bool:
    """Whether XLA:CPU's simplifier turns the op into a bitcast or removes it: every
    reshape (row-major layouts), a convert to its own type, a broadcast that only inserts
    unit dimensions in order. None of these is an instruction in XLA's fusions (113 CPU
    programs dumped: XLA's fusions held no reshape)."""
    if name == "reshape":
        return True
    if name == "convert":
        return op.operands[0].type == op.results[0].type
    if name != "broadcast_in_dim":
        return False
    from jax._src.lib.mlir import ir

    source = decode(op.operands[0].type)
    dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
    return (source is not None and infos and infos[0] is not None
            and source.elements == infos[0].elements and dims == sorted(dims))


def concatenate_fuses(operands: int, dimension: int, infos: list) -> bool:
    """Whether XLA:CPU fuses a concatenate: not one of more than 8 operands, nor one
    along the minor (last) dimension when that is 128 or longer. XLA materializes those
    and each operand becomes a fusion of its own, so a value they share is computed
    again in each."""
    shape = infos[0].shape if infos and infos[0] is not None else ()
    minor = len(shape) >= 2 and dimension == len(shape) - 1 and shape[dimension] >= 128
    return operands <= 8 and not minor


def rank(infos: list) -> int | None:
    """Rank of an op's first result (None if it is not a ranked tensor)."""
    return len(infos[0].shape) if infos and infos[0] is not None else None
