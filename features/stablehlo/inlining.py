"""Calls fused in place: a callee's ops visited into its caller's fusions, as XLA fuses a
program once it has inlined every call (`Walker`'s part that does it)."""

from __future__ import annotations

from .fusion import Fusions, rank


class InliningBudgetExceeded(Exception):
    """Fusing calls in place would visit more ops than `Walker.inline_budget`."""


class Inlining:
    """`Walker`'s visits of a call's callee in place of the call, counted against its
    `inline_budget` (`inlined`: ops the calls met so far inline to, `visited`: ops
    visited so)."""

    def _inline(self, fusions: Fusions, call, operands: list, results: list,
                depth: int, stack: tuple = ()) -> None:
        """Visit the callee of `call` into the caller's `fusions`, as XLA fuses the
        program after inlining every call: its values get keys of their own at each call
        (`stack`: the functions inlined around it), its arguments are the call's operands
        and its returned values the call's results."""
        from jax._src.lib.mlir import ir

        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        blocks = [] if callee not in self.funcs or depth >= 64 or callee in stack else \
            [b for region in self.funcs[callee].regions for b in region.blocks]
        if len(blocks) != 1:  # unknown, recursive or too deep: an opaque op
            fusions.visit(operands, results, "call", None, rank([]))
            return
        # `_count_inlined` counted these ops already; a cycle it cut short may hide more
        self.visited += len(blocks[0].operations)
        if self.visited > self.inline_budget:
            raise InliningBudgetExceeded
        stack = stack + (callee,)
        local = dict(zip(blocks[0].arguments, operands))
        kinds = self._kinds

        def mapped(value):
            found = local.get(value)
            if found is None:
                found = local[value] = self._new_key()
            return found

        for view in blocks[0].operations:
            op = view.operation
            kind = kinds.get(type(view)) or self._kind(op.name, view)  # as `Walker._block`
            full = kind.full
            operand_values = list(op.operands)
            inner_operands = [mapped(v) for v in operand_values]
            if full == "func.return":
                for result, value in zip(results, inner_operands):
                    fusions.alias(result, value)
                continue
            value = None
            if kind.one_result:
                try:
                    value = op.result
                except ValueError:
                    kind.one_result = False
            result_values = [value] if value is not None else list(op.results)
            inner_results = [mapped(r) for r in result_values]
            if kind.name == "call":
                self._inline(fusions, op, inner_operands, inner_results, depth + 1, stack)
                continue
            if kind.name == "select" and len(inner_operands) == 3 \
                    and inner_operands[1] == inner_operands[2]:  # as `Walker._block` drops it
                local[result_values[0]] = inner_operands[1]
                fusions.drop_select(inner_operands[0])
                continue
            types = tuple([r.type for r in result_values])
            res = self._results.get(types) or self._decode(types)
            transposed = self._dot(op, operand_values, types)[1] \
                if kind.name == "dot_general" else None
            self._fuse(fusions, op, kind, inner_operands, inner_results, res, operand_values,
                       transposed, has_regions=False if kind.regionless else None)

    def _count_inlined(self, call) -> None:
        """Count the ops inlining `call` visits; raise `InliningBudgetExceeded` before
        visiting any when that goes past the budget."""
        from jax._src.lib.mlir import ir

        self.inlined += self._inlined_size(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
        if self.inlined > self.inline_budget:
            raise InliningBudgetExceeded

    def _inlined_size(self, name: str, stack: tuple = ()) -> int:
        """Ops `_inline` visits for one call of `name` (at most: it stops 64 calls deep)."""
        from jax._src.lib.mlir import ir

        if name not in self.funcs or name in stack:
            return 0
        if name not in self._sizes:
            blocks = [b for region in self.funcs[name].regions for b in region.blocks]
            size = len(blocks[0].operations) if len(blocks) == 1 else 0
            for view in blocks[0].operations if len(blocks) == 1 else ():
                op = view.operation
                if op.name == "func.call":
                    size += self._inlined_size(
                        ir.FlatSymbolRefAttr(op.attributes["callee"]).value, stack + (name,))
            self._sizes[name] = size
        return self._sizes[name]
