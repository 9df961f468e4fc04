"""StableHLO text to an MLIR module, behind the text guard, and the module's functions."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..text_guard import StableHLOParseError, check_module_text

_CONTEXT: list = []
_CONTEXT_LOCK = threading.Lock()
# An MLIR context keeps every distinct attribute and type it ever parsed until it is
# destroyed, so a process parsing untrusted text grows without bound. After it has parsed
# this much text a context is replaced by a fresh one (about 6 ms to make); the old one
# is freed, with all it kept, when the last module parsed in it goes.
RENEW_BYTES = 16 * 2**20
_parsed = [0]
_on_renew: list[Callable[[], None]] = []


def on_new_context(hook: Callable[[], None]) -> None:
    """Call `hook` whenever the shared context is replaced (to drop caches keyed on the
    old one's attributes, which would keep it alive)."""
    _on_renew.append(hook)


def _context():
    """The MLIR context new parses use, made by the first (threads may ask at once).

    Code working on a parsed module enters `module.context`, not this one: the shared
    context may have been replaced since that module was parsed."""
    if not _CONTEXT:
        with _CONTEXT_LOCK:
            if not _CONTEXT:
                _CONTEXT.append(_new_context())
    return _CONTEXT[0]


def _new_context():
    # jax registers stablehlo, chlo, func, sdy and friends on the context it builds
    from jax._src.interpreters import mlir

    return mlir.make_ir_context()


def _count_parsed(size: int) -> None:
    with _CONTEXT_LOCK:
        _parsed[0] += size
        if _parsed[0] < RENEW_BYTES or not _CONTEXT:
            return
        _parsed[0] = 0
        _CONTEXT[0] = _new_context()
        for hook in _on_renew:
            hook()


def parse_module(text: str, check: bool = True):
    """Parse StableHLO module text; raise `StableHLOParseError` with the parser's message.
    `check=False` skips the text guard, for text made from a module that passed it."""
    from jax._src.lib.mlir import ir

    if not isinstance(text, str) or not text.strip():
        raise StableHLOParseError("empty StableHLO text")
    if check:
        check_module_text(text)
    ctx = _context()
    with ctx:
        try:
            module = ir.Module.parse(text, context=ctx)
        except ir.MLIRError as exc:
            raise StableHLOParseError(_short_message(str(exc))) from None
        except (ValueError, RuntimeError) as exc:
            raise StableHLOParseError(_short_message(str(exc))) from None
        finally:
            _count_parsed(len(text))
    return module


def _short_message(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    return " ".join(lines[:4])[:500]


def functions(module) -> dict:
    """The module's `func.func` ops by name, in module order."""
    from jax._src.lib.mlir import ir

    funcs = {}
    for view in module.body.operations:
        op = view.operation
        if op.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    return funcs


def entry_function(funcs: dict) -> str:
    """`main` when there is one, else the first public function, else the first."""
    from jax._src.lib.mlir import ir

    if not funcs:
        raise StableHLOParseError("the module holds no func.func")
    if "main" in funcs:
        return "main"
    for name, op in funcs.items():
        if ("sym_visibility" not in op.attributes
                or ir.StringAttr(op.attributes["sym_visibility"]).value == "public"):
            return name
    return next(iter(funcs))
