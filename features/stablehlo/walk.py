"""The walk: every op of every function visited once, into that function's `Tally`."""

from __future__ import annotations

import itertools
import re
from collections import Counter

from .contractions import dot_stats, transposed_dot_operands
from .fusion import Fusions, fusion_weight, rank
from .inlining import Inlining
from .kinds import OPERAND_WEIGHTED, OpKind, Results, count_block
from .ops import BRANCHES, Callee, Loop, Site
from .slices import resolve, sliced_dimension
from .tally import Tally, appended, counted, finish
from .tensors import cached

# How many ops `Walker` may visit again to fuse called functions in place of their calls:
# this many times the ops of the module's function bodies, and never fewer than the floor.
# Beyond it, each function's fusions are found once and counted at every call. The corpus
# inlines at most 25 times its ops; functions that each call the next one twice inline
# 2**depth times theirs.
INLINE_FACTOR = 64
INLINE_FLOOR = 20_000


_UNSET = object()


class Walker(Inlining):
    """Tallies each function of a module once; a callee is walked when first called, so
    a caller's dependency chain can run through it. `xla_cpu`: fuse concatenates as
    XLA:CPU does (see `Fusions`).

    With `inline` (the default), a call's callee is also visited into its caller's
    fusions, as XLA fuses the program once it has inlined every call; that costs the
    program's inlined size, so it raises `InliningBudgetExceeded` past `inline_budget`
    ops visited so. Without it, a call is an opaque op of its caller's fusions and each
    function body's fusions count at each of its calls (`Tally.fusions`).
    """

    def __init__(self, funcs: dict, xla_cpu: bool = True, inline: bool = True,
                 entry: str | None = None) -> None:
        self.funcs = funcs
        # with calls inlined only the entry's body fusions are read (`body_fusions`): the
        # other functions' bodies are fused where they are called
        self.entry = entry
        self.xla_cpu = xla_cpu
        self.inline = inline
        self.tallies: dict[str, Tally] = {}
        self.tensor = cached()
        self.inline_budget = max(INLINE_FLOOR, INLINE_FACTOR * sum(
            len(block.operations) for op in funcs.values()
            for region in op.regions for block in region.blocks))
        self.inlined = self.visited = 0
        self._ids: dict = {}  # MLIR value -> its key (`_key`)
        # keys are negative: never equal to a position in `Fusions`, which keys some maps
        # by both
        self._new_key = itertools.count(-1, -1).__next__
        self._kinds: dict = {}  # op name, and op class of the bindings -> its `OpKind`
        self._results: dict[tuple, Results] = {}  # result types -> their `Results`
        self._texts: dict = {}  # MLIR type -> its text
        self._attribute_texts: dict = {}  # MLIR attribute -> its text
        self._signature_texts: dict = {}  # fusion signature -> its text (`Fusions`)
        self._dots: dict = {}  # a dot's dimensions and types -> (`dot_stats`, transposed)
        self._weights: dict = {}  # what an `OPERAND_WEIGHTED` op's weight depends on -> it
        self._sizes: dict[str, int] = {}  # function -> ops `_inline` visits for a call of it
        # block -> (op, name, its operands' keys, its results' keys (`_key`), has regions)
        # of its ops, for `ConstantFolding` to read rather than ask the bindings again
        self.ops: dict = {}

    def function(self, name: str) -> Tally:
        if name not in self.tallies:
            tally = self.tallies[name] = Tally()  # a recursive call sees it empty
            for region in self.funcs[name].regions:
                for block in region.blocks:
                    tally.chain = max(tally.chain, self._block(
                        block, tally, 1.0, 0, sequence="body",
                        fuse=not self.inline or self.entry in (None, name)))
            finish(tally)
        return self.tallies[name]

    def _block(self, block, tally: Tally, trips: float, depth: int,
               sequence: str | None = None, fuse: bool = True) -> int:
        """Tally `block`'s ops into `tally`; returns its longest dependency chain (ops).

        `sequence` says the block runs as a sequence of kernels of its own: "body" for a
        function's body, "region" for a loop body or a branch (None: the block is
        compiled into its op's kernel, as a reduction's body is). `fuse`: find the
        block's fusions (else it has none).
        """
        # Callees and loop bodies are walked here, not in the handlers, so that a chain of
        # calls costs two Python frames a call, as many as RecursionError allowed before.
        fusions = Fusions(self.xla_cpu, self._signature_texts) if fuse else None
        site = Site(tally, trips, depth, self.tensor)
        chain_to: dict = {}  # result value -> longest chain of ops ending in it
        longest = 0
        ids, key_of, kinds, decoded = self._ids, self._key, self._kinds, self._results
        known, new_key, xla_cpu = ids.get, self._new_key, self.xla_cpu
        uses = tally.uses
        used = uses.get  # a Counter's `+=` on a new key goes through Python (`__missing__`)
        of_kind: list = []  # each counted op's OpKind, then counted by kind
        of_types: list = []  # each counted op's Results, then counted by result types
        records = self.ops[block] = []
        for view in block.operations:
            op = view.operation
            # most ops come as their own class of the bindings, which names them: the name
            # is asked for only of ops of the generic class
            kind = kinds.get(type(view))
            if kind is None:
                kind = self._kind(op.name, view)
            full, name = kind.full, kind.name
            # each access to op.operands / op.results builds new Python objects: once only;
            # values are keyed by ints from here on (hashing a binding's value is slow)
            operand_values = list(op.operands)
            operands = list(map(known, operand_values))
            if None in operands:  # a block's argument, first read
                operands = [key or key_of(v) for key, v in zip(operands, operand_values)]
            # a new key: SSA defines a value before any use
            value = None
            if kind.one_result:
                try:
                    value = op.result  # (cheaper than the list of results)
                except ValueError:  # none or several: the list, for ops of this kind
                    kind.one_result = False
            if value is not None:
                key = ids[value] = new_key()
                results = [key]
                types = (value.type,)
            else:
                results = []
                result_values = list(op.results)
                for value in result_values:
                    key = ids[value] = new_key()
                    results.append(key)
                types = tuple([result.type for result in result_values])
            res = decoded.get(types)
            if res is None:
                res = self._decode(types)
            regions = () if kind.regionless else op.regions
            if not len(regions):
                regions = ()
            records.append((op, full, operands, results, bool(regions)))
            dot = self._dot(op, operand_values, types) \
                if name == "dot_general" or name == "dot" else None
            if fusions is None:
                pass
            elif name == "select" and len(operands) == 3 and operands[1] == operands[2]:
                # what a batched switch writes for a leaf its branch leaves alone; XLA's
                # simplifier drops it before fusing: its readers read that leaf
                ids[value] = operands[1]
                fusions.drop_select(operands[0])
            elif name == "call":
                if self.inline:
                    self._count_inlined(op)
                    self._inline(fusions, op, operands, results, depth)
                else:
                    fusions.visit(operands, results, "call", None, rank([]))
            elif dot is not None and dot[1] or name == "slice":
                reads = None
                if name == "slice" and operand_values:
                    reads = self._slice_reads(operand_values[0], op)
                self._fuse(fusions, op, kind, operands, results, res, operand_values,
                           None if dot is None else dot[1], reads, bool(regions))
            else:  # `_fuse`, written out for the ops that need no layout copy (most)
                if not kind.fusible:
                    weight = None
                elif xla_cpu and name in OPERAND_WEIGHTED:
                    weight = self._weight(kind, res, op, operand_values)
                else:
                    weight = res.weights.get(name, _UNSET)
                    if weight is _UNSET:
                        weight = self._weight(kind, res, op, operand_values)
                if weight is not None or (name == "constant" and res.small):
                    attributes = op.attributes
                    fusions.visit(operands, results, name, weight, res.rank,
                                  (name, self._attributes(op, attributes)
                                   if len(attributes) else (), res.texts), None, not regions)
                else:
                    fusions.visit(operands, results, name, None, res.rank)
            if kind.structural:
                continue
            before = 0
            for operand in operands:
                uses[operand] = used(operand, 0) + 1
                chain = chain_to.get(operand, 0)
                if chain > before:
                    before = chain
            # `ops.count`: what the op's kind and result types add is added per kind and
            # per types at the end of the block (`count_block`)
            tally.ops_weighted += trips
            of_kind.append(kind)
            of_types.append(res)
            if dot is not None:  # `contractions.dot`, from the cached stats
                flops, matrix_vector, transposes = dot[0]
                tally.dot_flops += trips * flops
                tally.matrix_vector_dots += matrix_vector
                tally.layout_transposes += transposes
                how = None
            else:
                handler = kind.handler
                if handler is None:
                    how = None
                else:
                    site.infos = res.infos
                    how = handler(op, site)
            inner = 0  # chain inside the op's regions or its callee
            if how is not None or regions:  # (most ops have neither)
                if isinstance(how, Loop):
                    body = max((self._block(inner_block, tally, how.trips, depth + 1, "region")
                                for region in op.regions[1:] for inner_block in region.blocks),
                               default=0)
                    cond = max((self._block(inner_block, tally, how.trips, depth + 1, "region")
                                for inner_block in op.regions[0].blocks), default=0)
                    longest = max(longest,
                                  _chain_end(results, chain_to, before + 1 + body + cond))
                    continue
                if isinstance(how, Callee) and how.name in self.funcs:
                    inner = self.function(how.name).chain
                branches = "region" if how is BRANCHES else None
                for region in regions:
                    for inner_block in region.blocks:
                        inner = max(inner,
                                    self._block(inner_block, tally, trips, depth, branches))
            length = before + 1 + inner
            for result in results:
                chain_to[result] = length
            if length > longest:
                longest = length
        kernels = count_block(tally, Counter(of_kind), Counter(of_types))
        groups = [] if fusions is None else fusions.groups()
        # a function body's fusions hold its callees' ops (`_inline`); a loop body's and
        # a branch's are their own, and count at every call of the function they are in
        appended(tally.body_fusions if sequence == "body" and self.inline
                 else tally.fusions, counted(groups))
        if sequence is not None:
            tally.sequences.append((kernels, len(groups), site.callees, sequence == "body"))
        return longest

    def _kind(self, full: str, view) -> OpKind:
        """The `OpKind` of ops named `full`, kept by name and by the bindings' class of
        `view` when that class is the op's own."""
        kind = self._kinds.get(full)
        if kind is None:
            kind = self._kinds[full] = OpKind(full, view)
        if getattr(type(view), "OPERATION_NAME", None) == full:
            self._kinds[type(view)] = kind
        return kind

    def _key(self, value) -> int:
        """The int standing for an MLIR value of the walked functions."""
        key = self._ids.get(value)
        if key is None:
            key = self._ids[value] = self._new_key()
        return key

    def _slice_reads(self, value, slice_op) -> int | None:
        """The key of what a slice of `value` reads when that is an operand of the
        concatenate it slices (`slices`), else None."""
        along = sliced_dimension(value, slice_op)
        if along is None:
            return None
        read = resolve(value, *along)
        return None if read is value else self._key(read)

    def _type_text(self, mlir_type) -> str:
        text = self._texts.get(mlir_type)
        if text is None:
            text = self._texts[mlir_type] = str(mlir_type)
        return text

    def _decode(self, types: tuple) -> Results:
        res = self._results[types] = Results([self.tensor(t) for t in types],
                                             tuple(self._type_text(t) for t in types))
        return res

    def _dot(self, op, operand_values: list, types: tuple) -> tuple:
        """(`dot_stats`, `transposed_dot_operands`) of a dot, once per dimension numbers
        and types: what they read of the op."""
        try:
            dims = op.attributes["dot_dimension_numbers"]
        except KeyError:  # a stablehlo.dot
            dims = None
        key = (dims, *[value.type for value in operand_values[:2]], types[:1])
        found = self._dots.get(key)
        if found is None:
            found = self._dots[key] = (dot_stats(op, self.tensor),
                                       transposed_dot_operands(op, self.tensor))
        return found

    def _weight(self, kind: OpKind, res: Results, op, operand_values: list) -> float | None:
        """`fusion_weight` of the op, looked up where its operands and attributes do not
        change it, else keyed by what they give it."""
        name = kind.name
        if not kind.fusible:
            return None
        if not self.xla_cpu or name not in OPERAND_WEIGHTED:
            weights = res.weights
            if name not in weights:
                weights[name] = fusion_weight(name, res.infos, op, self.xla_cpu, self.tensor)
            return weights[name]
        if name == "convert":
            key = (name, res, operand_values[0].type)
        elif name == "broadcast_in_dim":
            key = (name, res, operand_values[0].type, op.attributes["broadcast_dimensions"])
        else:
            key = (name, res, len(operand_values), op.attributes["dimension"])
        weights = self._weights
        if key not in weights:
            weights[key] = fusion_weight(name, res.infos, op, self.xla_cpu, self.tensor)
        return weights[key]

    def _fuse(self, fusions: Fusions, op, kind: OpKind, operands: list, results: list,
              res: Results, operand_values: list, transposed: list | None = None,
              reads: int | None = None, has_regions: bool | None = None) -> None:
        """Visit one op into `fusions` (`operands`/`results` are its values' keys there,
        `res` its results' types, `transposed` the operands a dot_general transposes,
        `reads` what it reads in place of its first operand, see `Fusions.visit`), with
        the layout copy XLA:CPU puts before a dot operand it transposes."""
        name = kind.name
        if transposed:
            operands = list(operands)
            for index, layout in transposed:
                operand_type = operand_values[index].type
                operands[index] = fusions.layout_copy(
                    operands[index], layout, rank([self.tensor(operand_type)]),
                    self._type_text(operand_type))
        if not kind.fusible:
            weight = None
        elif self.xla_cpu and name in OPERAND_WEIGHTED:
            weight = self._weight(kind, res, op, operand_values)
        else:  # `_weight`'s lookup by result types, without the call
            weight = res.weights.get(name, _UNSET)
            if weight is _UNSET:
                weight = self._weight(kind, res, op, operand_values)
        key = None
        merge = False
        if weight is not None or (name == "constant" and res.small):
            attributes = op.attributes
            key = (name, self._attributes(op, attributes) if len(attributes) else (),
                   res.texts)
            # XLA's CSE merges equal ops before it fuses (JAX writes a constant and its
            # broadcast for every scalar operand)
            if has_regions is None:
                has_regions = bool(len(op.regions))
            merge = not has_regions
        fusions.visit(operands, results, name, weight, res.rank, key, reads, merge)

    def _attributes(self, op, attributes) -> tuple:
        """An op's attributes (`op.attributes`, not empty) as text, to compare ops by (the
        bindings cannot hand out some, e.g. a complex constant's value: then the op's
        printed form without its values' names). MLIR uniques attributes: each is printed
        once."""
        texts = self._attribute_texts
        out = []
        try:
            for name, attribute in attributes.items():
                text = texts.get(attribute)
                if text is None:
                    text = texts[attribute] = str(attribute)
                out.append((name, text))
        except TypeError:
            return (re.sub(r"%[^\s,:)\]]+", "", op.get_asm(print_generic_op_form=True)),)
        return tuple(out)


def _chain_end(results: list, chain_to: dict, length: int) -> int:
    """Record that each result ends a chain of `length` ops; returns `length`."""
    for result in results:
        chain_to[result] = length
    return length
