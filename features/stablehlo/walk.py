"""The walk: every op of every function visited once, into that function's `Tally`."""

from __future__ import annotations

import re

from ..categories import FUSIBLE_HLO, HLO_STRUCTURAL
from .contractions import transposed_dot_operands
from .fusion import Fusions, fusion_weight, rank
from .ops import BRANCHES, HANDLERS, NOT_KERNELS, Callee, Loop, Site, count, short_name
from .tally import Tally, finish
from .tensors import cached


class Walker:
    """Tallies each function of a module once; a callee is walked when first called, so
    a caller's dependency chain can run through it. `xla_cpu`: fuse concatenates as
    XLA:CPU does (see `Fusions`)."""

    def __init__(self, funcs: dict, xla_cpu: bool = True) -> None:
        self.funcs = funcs
        self.xla_cpu = xla_cpu
        self.tallies: dict[str, Tally] = {}
        self.tensor = cached()

    def function(self, name: str) -> Tally:
        if name not in self.tallies:
            tally = self.tallies[name] = Tally()  # a recursive call sees it empty
            for region in self.funcs[name].regions:
                for block in region.blocks:
                    tally.chain = max(tally.chain,
                                      self._block(block, tally, 1.0, 0, sequence="body"))
            finish(tally)
        return self.tallies[name]

    def _block(self, block, tally: Tally, trips: float, depth: int,
               sequence: str | None = None) -> int:
        """Tally `block`'s ops into `tally`; returns its longest dependency chain (ops).

        `sequence` says the block runs as a sequence of kernels of its own: "body" for a
        function's body, "region" for a loop body or a branch (None: the block is
        compiled into its op's kernel, as a reduction's body is).
        """
        # Callees and loop bodies are walked here, not in the handlers, so that a chain of
        # calls costs two Python frames a call, as many as RecursionError allowed before.
        fusions = Fusions(self.xla_cpu)
        site = Site(tally, trips, depth, self.tensor)
        kernels = 0  # unfused ops of this block
        chain_to: dict = {}  # result value -> longest chain of ops ending in it
        longest = 0
        for view in block.operations:
            op = view.operation
            full = op.name
            name = short_name(full)
            # each access to op.operands / op.results builds new Python objects: once only
            operands, results = list(op.operands), list(op.results)
            infos = [self.tensor(result.type) for result in results]
            if name == "call":
                self._inline(fusions, op, operands, results, (id(op),), depth)
            else:
                self._fuse(fusions, op, name, operands, results, infos)
            if full in HLO_STRUCTURAL:
                continue
            before = 0
            for operand in operands:
                tally.uses[operand] += 1
                before = max(before, chain_to.get(operand, 0))
            if name not in FUSIBLE_HLO and name not in NOT_KERNELS:
                kernels += 1
            count(tally, name, infos, trips)
            handler = HANDLERS.get(name)
            how = None if handler is None else handler(op, site)
            inner = 0  # chain inside the op's regions or its callee
            if isinstance(how, Loop):
                body = max((self._block(inner_block, tally, how.trips, depth + 1, "region")
                            for region in op.regions[1:] for inner_block in region.blocks),
                           default=0)
                cond = max((self._block(inner_block, tally, how.trips, depth + 1, "region")
                            for inner_block in op.regions[0].blocks), default=0)
                longest = max(longest, _chain_end(results, chain_to, before + 1 + body + cond))
                continue
            if isinstance(how, Callee) and how.name in self.funcs:
                inner = self.function(how.name).chain
            branches = "region" if how is BRANCHES else None
            for region in op.regions:
                for inner_block in region.blocks:
                    inner = max(inner, self._block(inner_block, tally, trips, depth, branches))
            longest = max(longest, _chain_end(results, chain_to, before + 1 + inner))
        groups = fusions.groups()
        # a function body's fusions hold its callees' ops (`_inline`); a loop body's and
        # a branch's are their own, and count at every call of the function they are in
        (tally.body_fusions if sequence == "body" else tally.fusions).extend(groups)
        if sequence is not None:
            tally.sequences.append((kernels, len(groups), site.callees, sequence == "body"))
        return longest

    def _inline(self, fusions: Fusions, call, operands: list, results: list, site: tuple,
                depth: int) -> None:
        """Visit the callee of `call` into the caller's `fusions`, as XLA fuses the
        program after inlining every call: its values are keyed by the call site, its
        arguments are the call's operands and its returned values the call's results."""
        from jax._src.lib.mlir import ir

        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        blocks = [] if callee not in self.funcs or depth >= 64 or callee in site[1:] else \
            [b for region in self.funcs[callee].regions for b in region.blocks]
        if len(blocks) != 1:  # unknown, recursive or too deep: an opaque op
            fusions.visit(operands, results, "call", None, rank([]))
            return
        site = site + (callee,)
        key = dict(zip(blocks[0].arguments, operands))

        def mapped(value):
            return key.get(value, (site, value))

        for view in blocks[0].operations:
            op = view.operation
            name = short_name(op.name)
            inner_operands = [mapped(v) for v in op.operands]
            if op.name == "func.return":
                for result, value in zip(results, inner_operands):
                    fusions.alias(result, value)
                continue
            inner_results = [(site, r) for r in op.results]
            if name == "call":
                self._inline(fusions, op, inner_operands, inner_results, site + (id(op),),
                             depth + 1)
                continue
            infos = [self.tensor(r.type) for r in op.results]
            self._fuse(fusions, op, name, inner_operands, inner_results, infos)

    def _fuse(self, fusions: Fusions, op, name: str, operands: list, results: list,
              infos: list) -> None:
        """Visit one op into `fusions` (`operands`/`results` are its values' keys there),
        with the layout copy XLA:CPU puts before a dot operand it transposes."""
        if name == "dot_general":
            operands = list(operands)
            for index, layout in transposed_dot_operands(op, self.tensor):
                operand_type = op.operands[index].type
                operands[index] = fusions.layout_copy(
                    operands[index], layout, rank([self.tensor(operand_type)]), str(operand_type))
        weight = fusion_weight(name, infos, op, self.xla_cpu, self.tensor)
        key = None
        if weight is not None or _small_constant(name, infos):
            key = (name, _attributes(op), tuple(str(result.type) for result in op.results))
            # XLA's CSE merges equal ops before it fuses (JAX writes a constant and its
            # broadcast for every scalar operand)
            if not op.regions and fusions.merged(key, operands, results):
                return
        fusions.visit(operands, results, name, weight, rank(infos), key)


def _chain_end(results: list, chain_to: dict, length: int) -> int:
    """Record that each result ends a chain of `length` ops; returns `length`."""
    for result in results:
        chain_to[result] = length
    return length


# Constants CSE compares by value (larger ones are left as they are: printing them is slow
# and programs rarely repeat them).
CSE_CONSTANT_ELEMENTS = 64


def _small_constant(name: str, infos: list) -> bool:
    return name == "constant" and all(
        info is not None and info.elements <= CSE_CONSTANT_ELEMENTS for info in infos)


def _attributes(op) -> tuple:
    """An op's attributes as text, to compare ops by (the bindings cannot hand out some,
    e.g. a complex constant's value: then the op's printed form without its values' names)."""
    try:
        return tuple((name, str(op.attributes[name])) for name in op.attributes)
    except TypeError:
        return (re.sub(r"%[^\s,:)\]]+", "", op.get_asm(print_generic_op_form=True)),)
