"""What the walk reads of an op that its name or its result types decide, worked out once
per op name and once per tuple of result types: a module repeats a few of each (MLIR
uniques types), and deciding them again at every op was most of a walk's time."""

from __future__ import annotations

from ..categories import FUSIBLE_HLO, HLO_STRUCTURAL, hlo_category
from .ops import HANDLERS, NOT_KERNELS, short_name
from .tensors import TensorInfo

# Constants CSE compares by value (larger ones are left as they are: printing them is slow
# and programs rarely repeat them).
CSE_CONSTANT_ELEMENTS = 64
# Fusible ops whose weight on XLA:CPU also depends on their operands or attributes
# (`fusion_weight`): decided at each op
OPERAND_WEIGHTED = frozenset({"concatenate", "convert", "broadcast_in_dim"})


class OpKind:
    """An op name's part of the walk: its short name, whether it is structural (counted
    nowhere), a kernel of its own unfused, its category and handler; `one_result`: no op
    of the kind has been seen with another count of results (a walk's own record)."""

    __slots__ = ("full", "name", "structural", "kernel", "category", "handler", "fusible",
                 "regionless", "one_result")

    def __init__(self, full: str, view=None) -> None:
        self.full = full
        self.one_result = True
        self.name = name = short_name(full)
        # the bindings' class of the op declares a fixed count of regions: none, for most
        # ops, whose regions then need not be asked for
        self.regionless = getattr(type(view), "_ODS_REGIONS", None) == (0, True)
        self.structural = full in HLO_STRUCTURAL
        self.kernel = name not in FUSIBLE_HLO and name not in NOT_KERNELS
        self.category = hlo_category(name)
        self.handler = HANDLERS.get(name)
        self.fusible = name in FUSIBLE_HLO


class Results:
    """An op's result types decoded (`infos`, `texts`), with what `ops.count` adds for them
    to a tally and what the fusion emulation reads of them."""

    __slots__ = ("infos", "texts", "rank", "tensor_max", "tensor_sum", "max_rank", "keys",
                 "wide", "complex", "small", "weights")

    def __init__(self, infos: list[TensorInfo | None], texts: tuple[str, ...]) -> None:
        self.infos, self.texts = infos, texts
        self.rank = len(infos[0].shape) if infos and infos[0] is not None else None
        present = [info for info in infos if info is not None]
        self.tensor_max = max((info.elements for info in present), default=-1)
        self.tensor_sum = sum(info.elements for info in present)
        self.max_rank = max((len(info.shape) for info in present), default=-1)
        self.keys = tuple(info.key for info in present)
        self.wide = sum(1 for info in present if info.wide)
        self.complex = sum(1 for info in present if info.complex)
        # a constant whose value CSE compares
        self.small = len(present) == len(infos) and all(
            info.elements <= CSE_CONSTANT_ELEMENTS for info in present)
        self.weights: dict = {}  # op name -> fusion weight, for names not OPERAND_WEIGHTED

    def count_into(self, tally, times: int = 1) -> None:
        """What `ops.count` adds to `tally` for `times` ops of these types (it adds the
        rest)."""
        if self.tensor_max > tally.tensor_max:
            tally.tensor_max = self.tensor_max
        tally.tensor_sum += times * self.tensor_sum
        if self.max_rank > tally.max_rank:
            tally.max_rank = self.max_rank
        if self.keys:
            tally.shapes.update(self.keys)
        tally.f64_ops += times * self.wide
        tally.complex_ops += times * self.complex


def count_block(tally, of_kind: dict, of_types: dict) -> int:
    """Add what `ops.count` adds for each op but its trip-weighted count, from the ops of
    a block counted by kind and by result types; returns the block's unfused ops."""
    kernels = 0
    for kind, times in of_kind.items():
        tally.ops += times
        tally.histogram[kind.name] += times
        if kind.category is None:
            tally.unknown += times
        else:
            tally.categories[kind.category] += times
        if kind.kernel:
            kernels += times
    for res, times in of_types.items():
        res.count_into(tally, times)
    return kernels
