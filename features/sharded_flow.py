"""Where a program's sharded arguments spread, and the work that gives the SPMD partitioner.

The entry function's argument annotations say which dims of which arguments are split
over devices. The compiler spreads those splits through the program in both directions
(a parameter's split reaches its gradient, and from there the backward pass), so the
walk links each dim of each value to the dims of other values that must be split alike:
an elementwise op's operand and result dims, a dot's batch and free dims with its
result's and its two contracting dims with each other, a transpose's permuted dims, a
loop's carried values with its body's. A dim is split if its linked group holds a split
argument dim (union-find: linear in the module). Then it counts the ops on split data and
those whose split dims the partitioner cannot keep in place, each a collective or a
resharding it inserts: a dot contracting a split dim, a reduction over one, a reshape
merging one into a more major dim, a slice, pad, concatenation or sort along one, a
gather, scatter, convolution or custom call of split data. A function's ops count once
per call, as the compiler inlines calls; a loop body counts once.
"""

from __future__ import annotations

import re

from .stablehlo.contractions import _dot_dims
from .stablehlo.tensors import cached

_SDY_DIMS = re.compile(r"\{([^{}]*)\}")
_CONV_DIMS = re.compile(r"\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]")
_MHLO_DEVICES = re.compile(r"devices=\[([0-9,]+)\]")
FLOW_COUNTS = ("ops", "split_ops", "reshards", "contracted_splits", "split_elements",
               "elements")
# ops and dims past which a module is not followed (its counts are then zero)
MAX_NODES = 2_000_000
_RESHARD_ANY = {"stablehlo.gather", "stablehlo.custom_call", "stablehlo.fft",
                "stablehlo.rng_bit_generator",
                "stablehlo.triangular_solve", "stablehlo.cholesky"}
_SAME_SIZE_DIMS = {"stablehlo.slice", "stablehlo.pad", "stablehlo.dynamic_slice",
                   "stablehlo.dynamic_update_slice", "stablehlo.reduce_window",
                   "stablehlo.select_and_scatter", "stablehlo.scatter", "stablehlo.reverse",
                   "stablehlo.sort", "stablehlo.concatenate"}


def split_dims(annotation: str, rank: int) -> tuple[int, ...]:
    """The dims of an argument that its sharding annotation splits over devices."""
    if "#sdy.sharding" in annotation:
        groups = _SDY_DIMS.findall(annotation.split("[", 1)[-1])
        return tuple(i for i, g in enumerate(groups[:rank]) if '"' in g)
    found = _MHLO_DEVICES.search(annotation)
    if not found or "replicated" in annotation:
        return ()
    tiles = [int(n) for n in found.group(1).split(",") if n][:rank]
    return tuple(i for i, n in enumerate(tiles) if n > 1)


def _ints(op, name: str) -> list[int]:
    from jax._src.lib.mlir import ir

    if name not in op.attributes:
        return []
    attr = op.attributes[name]
    try:
        return list(ir.DenseI64ArrayAttr(attr))
    except (TypeError, ValueError):
        return [int(v) for v in ir.DenseIntElementsAttr(attr)]


class ShardedFlow:
    """Links the dims of a module's values and counts `FLOW_COUNTS` (`run`)."""

    def __init__(self, funcs: dict, entry: str) -> None:
        self.funcs, self.entry = funcs, entry
        self.tensor = cached()
        self.parent: list[int] = []
        self.base: dict = {}  # MLIR value -> (its first node, its shape)
        self.times: dict[str, float] = {}  # function -> calls of it, inlined
        # (multiplicity, op name, nodes whose split means a collective, all nodes, elements)
        self.records: list = []

    def run(self) -> dict[str, float]:
        from jax._src.lib.mlir import ir

        self._count_calls(self.entry, 1.0, ())
        for name in self.times:
            for block in self._blocks(self.funcs[name]):
                self._block(block, self.times[name])
        op = self.funcs[self.entry]
        attrs = (list(ir.ArrayAttr(op.attributes["arg_attrs"]))
                 if "arg_attrs" in op.attributes else [])
        seeds = set()
        for arg, attr in zip(op.regions[0].blocks[0].arguments, attrs):
            attr = ir.DictAttr(attr)
            for key in ("sdy.sharding", "mhlo.sharding"):
                if key in attr:
                    first, shape = self._value(arg)
                    seeds.update(self._find(first + d)
                                 for d in split_dims(str(attr[key]), len(shape)))
        return self._counts(seeds)

    def _counts(self, seeds: set) -> dict[str, float]:
        counts = dict.fromkeys(FLOW_COUNTS, 0.0)
        split = [self._find(i) in seeds for i in range(len(self.parent))]
        for times, name, critical, nodes, elements in self.records:
            counts["ops"] += times
            counts["elements"] += times * elements
            if any(split[n] for n in nodes):
                counts["split_ops"] += times
                counts["split_elements"] += times * elements
                if any(split[n] for n in critical):
                    counts["reshards"] += times
                    if name == "stablehlo.dot_general":
                        counts["contracted_splits"] += times
        return counts

    def _blocks(self, op):
        for region in op.regions:
            yield from region.blocks

    def _count_calls(self, name: str, times: float, stack: tuple) -> None:
        """Adds `times` calls of `name` and, through it, of the functions it calls."""
        from jax._src.lib.mlir import ir

        if name in stack or name not in self.funcs:
            return
        self.times[name] = self.times.get(name, 0.0) + times
        for call in self._calls(self.funcs[name]):
            self._count_calls(ir.FlatSymbolRefAttr(call.attributes["callee"]).value, times,
                              stack + (name,))

    def _calls(self, op):
        for block in self._blocks(op):
            for view in block.operations:
                inner = view.operation
                if inner.name == "func.call":
                    yield inner
                elif inner.regions:
                    yield from self._calls(inner)

    def _value(self, value) -> tuple[int, tuple]:
        known = self.base.get(value)
        if known is None:
            info = self.tensor(value.type)
            shape = () if info is None else info.shape
            known = self.base[value] = (len(self.parent), shape)
            self.parent.extend(range(len(self.parent), len(self.parent) + len(shape)))
            if len(self.parent) > MAX_NODES:
                raise OverflowError("module too large to follow its splits")
        return known

    def _find(self, i: int) -> int:
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def _link(self, a: tuple, i: int, b: tuple, j: int) -> None:
        """Link dim `i` of value `a` with dim `j` of `b` (each `_value`'s pair) when both
        exist and have one size."""
        if i < len(a[1]) and j < len(b[1]) and a[1][i] == b[1][j] and a[1][i] > 1:
            ra, rb = self._find(a[0] + i), self._find(b[0] + j)
            if ra != rb:
                self.parent[ra] = rb

    def _link_all(self, a: tuple, b: tuple) -> None:
        if len(a[1]) == len(b[1]):
            for d in range(len(a[1])):
                self._link(a, d, b, d)

    def _block(self, block, times: float) -> None:
        for view in block.operations:
            op = view.operation
            name = op.name
            if name in ("func.return", "stablehlo.return"):
                continue
            ins = [self._value(v) for v in op.operands]
            outs = [self._value(v) for v in op.results]
            critical = self._op(op, name, ins, outs, times)
            nodes = [v[0] + d for v in ins + outs for d in range(len(v[1]))]
            elements = sum(self.tensor(v.type).elements for v in op.results
                           if self.tensor(v.type) is not None)
            self.records.append((times, name, critical, nodes, elements))

    def _op(self, op, name: str, ins: list, outs: list, times: float) -> list[int]:
        """Links `op`'s dims; returns the nodes whose split makes it a reshard."""
        from jax._src.lib.mlir import ir

        if name == "func.call":
            callee = self.funcs.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
            if callee is not None:
                body = callee.regions[0].blocks[0]
                for a, arg in zip(ins, body.arguments):
                    self._link_all(a, self._value(arg))
                self._link_returns(body, outs)
            return []
        if name == "stablehlo.while":
            for block in self._blocks(op):
                for a, arg in zip(ins, block.arguments):
                    self._link_all(a, self._value(arg))
                for a, arg in zip(outs, block.arguments):
                    self._link_all(a, self._value(arg))
            self._link_returns(op.regions[1].blocks[0], outs)
            self._nested(op, times)
            return []
        if name in ("stablehlo.case", "stablehlo.if"):
            for block in self._blocks(op):
                self._link_returns(block, outs)
            self._nested(op, times)
            return []
        if name in ("stablehlo.dot_general", "stablehlo.dot"):
            return self._dot(op, ins, outs)
        if name == "stablehlo.broadcast_in_dim":
            for i, d in enumerate(_ints(op, "broadcast_dimensions")):
                self._link(ins[0], i, outs[0], d)
            return []
        if name == "stablehlo.transpose":
            for j, p in enumerate(_ints(op, "permutation")):
                self._link(ins[0], p, outs[0], j)
            return []
        if name == "stablehlo.reshape":
            return self._reshape(ins[0], outs[0])
        if name == "stablehlo.reduce":
            dims = set(_ints(op, "dimensions"))
            n = len(outs)
            kept = [d for d in range(len(ins[0][1])) if d not in dims]
            for a in ins[1:n]:
                self._link_all(ins[0], a)
            for out in outs:
                for j, d in enumerate(kept):
                    self._link(ins[0], d, out, j)
            return [ins[0][0] + d for d in dims]
        if name == "stablehlo.convolution":
            return self._convolution(op, ins, outs)
        if name in _RESHARD_ANY:
            return [v[0] + d for v in ins for d in range(len(v[1]))]
        if name in _SAME_SIZE_DIMS:
            return self._same_size(op, name, ins, outs)
        # elementwise and the rest: dims of one size in operands and results of one rank
        for out in outs:
            for a in ins:
                self._link_all(a, out)
        return []

    def _nested(self, op, times: float) -> None:
        for block in self._blocks(op):
            self._block(block, times)

    def _link_returns(self, block, outs: list) -> None:
        ops = list(block.operations)
        if ops and ops[-1].operation.name in ("func.return", "stablehlo.return"):
            for value, out in zip(ops[-1].operation.operands, outs):
                self._link_all(self._value(value), out)

    def _dot(self, op, ins: list, outs: list) -> list[int]:
        lhs, rhs = ins[0], ins[1]
        if "dot_dimension_numbers" in op.attributes:
            d = _dot_dims(op)
        else:
            d = {"lhs_contracting_dimensions": [len(lhs[1]) - 1] if lhs[1] else [],
                 "rhs_contracting_dimensions": [0] if rhs[1] else []}
        lb, rb = d.get("lhs_batching_dimensions", []), d.get("rhs_batching_dimensions", [])
        lc, rc = d.get("lhs_contracting_dimensions", []), d.get("rhs_contracting_dimensions", [])
        lf = [i for i in range(len(lhs[1])) if i not in lb and i not in lc]
        rf = [i for i in range(len(rhs[1])) if i not in rb and i not in rc]
        for j, (a, b) in enumerate(zip(lb, rb)):
            self._link(lhs, a, outs[0], j)
            self._link(rhs, b, outs[0], j)
        for j, i in enumerate(lf):
            self._link(lhs, i, outs[0], len(lb) + j)
        for j, i in enumerate(rf):
            self._link(rhs, i, outs[0], len(lb) + len(lf) + j)
        for a, b in zip(lc, rc):
            self._link(lhs, a, rhs, b)
        return [lhs[0] + i for i in lc]

    def _convolution(self, op, ins: list, outs: list) -> list[int]:
        """Batch and output features pass through; a split input feature (contracted) or
        spatial dim (halo exchange) is a reshard."""
        found = _CONV_DIMS.search(str(op.attributes["dimension_numbers"]))
        if not found:
            return [v[0] + d for v in ins for d in range(len(v[1]))]
        lhs, rhs, out = ([t.strip() for t in part.split(",")] for part in found.groups())
        self._link(ins[0], lhs.index("b"), outs[0], out.index("b"))
        self._link(ins[1], rhs.index("o"), outs[0], out.index("f"))
        self._link(ins[0], lhs.index("f"), ins[1], rhs.index("i"))
        return [ins[0][0] + i for i, t in enumerate(lhs) if t != "b"]

    def _reshape(self, src: tuple, dst: tuple) -> list[int]:
        """A dim keeps its split where it leads the group of dims it reshapes into; a split
        dim merged below another is a reshard."""
        critical, i, j = [], 0, 0
        s, t = src[1], dst[1]
        while i < len(s) and j < len(t):
            gi, gj, a, b = [i], [j], s[i], t[j]
            while a != b:
                if a < b and i + 1 < len(s):
                    i += 1
                    gi.append(i)
                    a *= s[i]
                elif j + 1 < len(t):
                    j += 1
                    gj.append(j)
                    b *= t[j]
                else:
                    break
            lead_i = next((k for k in gi if s[k] > 1), gi[0])
            lead_j = next((k for k in gj if t[k] > 1), gj[0])
            if s[lead_i] == t[lead_j]:
                self._link(src, lead_i, dst, lead_j)
            elif s[lead_i] % max(t[lead_j], 1) == 0 or t[lead_j] % max(s[lead_i], 1) == 0:
                # a split (or merge) of the leading dim keeps its split on the major part
                ra, rb = self._find(src[0] + lead_i), self._find(dst[0] + lead_j)
                if ra != rb:
                    self.parent[ra] = rb
            critical += [src[0] + k for k in gi if k != lead_i]
            i, j = i + 1, j + 1
        return critical

    def _same_size(self, op, name: str, ins: list, outs: list) -> list[int]:
        """Dims of one size in operand and result stay linked; a split dim whose size
        changes (or that a sort or concatenation runs along) is a reshard."""
        src, out = ins[0], outs[0]
        for a in ins[1:]:
            if len(a[1]) == len(src[1]):
                self._link_all(src, a)
        for o in outs:
            self._link_all(src, o)
        moved = [d for d in range(min(len(src[1]), len(out[1]))) if src[1][d] != out[1][d]]
        if name == "stablehlo.concatenate":
            moved.append(int(op.attributes["dimension"].value))
        elif name == "stablehlo.sort":
            moved.append(int(op.attributes["dimension"].value))
        elif name in ("stablehlo.scatter", "stablehlo.select_and_scatter",
                      "stablehlo.reduce_window"):
            moved = list(range(len(src[1])))
        return [src[0] + d for d in moved if d < len(src[1])]
