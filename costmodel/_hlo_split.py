"""Advice's split rewrite made on StableHLO text (what the HTTP service has): each user jit
the entry function calls becomes a program of its own, and the glue around the calls one
more (`_rewrite.inner_jit_parts` makes the same parts from a jaxpr). The text has passed the
text guard already, so it is parsed here without it.
"""

from __future__ import annotations

import re

from ._hlo_rewrite import SCAN_BODY, _location, _nested, _zero


def _user_function(name: str) -> bool:
    """Whether a function the entry calls is one of the user's jits: JAX names the function
    it lowers a jit to after the Python function, so jax's own (`_where`, `clip`,
    `norm`: private, or public in jax's namespaces) are told apart by name, as
    `_rewrite.is_user_jit` tells them apart by name and call stack."""
    from ._rewrite import _jax_namespaces

    base = re.sub(r"_\d+$", "", name)
    if base.startswith(("_", SCAN_BODY)):
        return False
    for namespace in _jax_namespaces():
        public = getattr(namespace, base, None)
        if callable(public) and str(getattr(public, "__module__", "")).startswith("jax"):
            return False
    return True


def _callee(op) -> str:
    from jax._src.lib.mlir import ir

    return ir.FlatSymbolRefAttr(op.attributes["callee"]).value


def _entry_calls(funcs, entry: str) -> tuple[list, bool]:
    """The entry's calls of user jits, and whether anything else is in its body."""
    ops = [view.operation for view in funcs[entry].regions[0].blocks[0].operations][:-1]
    calls = [op for op in ops if op.name == "func.call" and _user_function(_callee(op))]
    return calls, len(calls) < len(ops)


def inner_jit_texts(text: str) -> tuple[list[tuple[str, str]], str | None]:
    """The programs compiled when each user jit the entry function calls is jitted on its
    own: [(name, module text)] for the distinct ones, and the glue around them (None when
    the entry calls nothing else), as `_rewrite.inner_jit_parts` makes them from a jaxpr."""
    from costmodel.features.stablehlo import parse_module
    from costmodel.features.stablehlo.parse import entry_function, functions

    module = parse_module(text, check=False)  # held: its functions live as long as it
    funcs = functions(module)
    entry = entry_function(funcs)
    calls, rest = _entry_calls(funcs, entry)
    names = list(dict.fromkeys(_callee(op) for op in calls))
    if not names:
        return [], None
    parts = [(name, _part(text, name)) for name in names]
    return parts, (_glue(text) if rest else None)


def _prune(module, entry: str) -> None:
    """Erase the functions `entry` does not reach through its calls."""
    from costmodel.features.stablehlo.parse import functions

    funcs = functions(module)
    reached, todo = {entry}, [entry]
    while todo:
        for op in _nested(funcs[todo.pop()]):
            if op.name == "func.call" and _callee(op) not in reached and _callee(op) in funcs:
                reached.add(_callee(op))
                todo.append(_callee(op))
    for name, op in funcs.items():
        if name not in reached:
            op.erase()


def _part(text: str, name: str) -> str:
    """The module with function `name` as its public entry, and what that calls."""
    from jax._src.lib.mlir import ir

    from costmodel.features.stablehlo import parse_module
    from costmodel.features.stablehlo.parse import entry_function, functions

    module = parse_module(text, check=False)
    with module.context, _location():
        funcs = functions(module)
        entry = entry_function(funcs)
        funcs.pop(entry).erase()
        for op in funcs.values():
            for inner in _nested(op):
                if inner.name == "func.call" and _callee(inner) == name:
                    inner.attributes["callee"] = ir.FlatSymbolRefAttr.get(entry)
        funcs[name].attributes["sym_name"] = ir.StringAttr.get(entry)
        funcs[name].attributes["sym_visibility"] = ir.StringAttr.get("public")
        _prune(module, entry)
        module.operation.verify()
        return module.operation.get_asm()


def _glue(text: str) -> str:
    """The entry function with each user jit's call replaced by zeros of its results (its
    results arrive from the separately compiled program)."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import hlo

    from costmodel.features.stablehlo import parse_module
    from costmodel.features.stablehlo.parse import entry_function, functions

    module = parse_module(text, check=False)
    with module.context, _location():
        funcs = functions(module)
        entry = entry_function(funcs)
        calls, _ = _entry_calls(funcs, entry)
        for call in calls:
            with ir.InsertionPoint(call):
                for result in call.results:
                    t = ir.RankedTensorType(result.type)
                    zero = hlo.ConstantOp(ir.DenseElementsAttr.get_splat(
                        ir.RankedTensorType.get([], t.element_type), _zero(t.element_type)))
                    result.replace_all_uses_with(hlo.BroadcastInDimOp(
                        t, zero.result, ir.DenseI64ArrayAttr.get([])).result)
            call.erase()
        _prune(module, entry)
        module.operation.verify()
        return module.operation.get_asm()
