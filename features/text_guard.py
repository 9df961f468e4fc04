"""Checks on StableHLO text before the MLIR parser sees it, in time linear in its length.

The parser recurses once per nested region, attribute or type and overflows the C stack
(a segfault, not an exception) a few thousand levels down, and it cannot take text that
is not valid Unicode. Both the library and the HTTP service refuse such text here, so a
request body of any size is checked in one vectorized pass.
"""

from __future__ import annotations

import numpy as np

# Real modules nest well under 50 levels.
MAX_NESTING = 256

_BRACKET_STEP = np.zeros(256, np.int8)
_BRACKET_STEP[list(b"{([<")] = 1
_BRACKET_STEP[list(b"})]>")] = -1


class StableHLOParseError(ValueError):
    """The text is not a StableHLO module the MLIR parser accepts."""


class RefusedText(StableHLOParseError):
    """Text refused before parsing (too deep, not Unicode, a NUL byte); the message says why."""


def nesting_depth(text: str) -> int:
    """Deepest bracket nesting ({ ( [ <) outside string literals; `->` is not a bracket.

    Example:
        >>> nesting_depth('func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {"}"}')
        2
    """
    codes = np.frombuffer(text.encode("utf-8", "surrogatepass"), np.uint8)
    steps = _BRACKET_STEP[codes]
    at = np.flatnonzero(steps)
    # `->` is an arrow, not a closing bracket.
    at = at[(at == 0) | (codes[at - 1] != ord("-")) | (steps[at] > 0)]
    at = at[~_inside_strings(codes, at)]
    return int(np.cumsum(steps[at], dtype=np.int64).max(initial=0))


def _inside_strings(codes: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Whether each position in `at` lies between an opening and a closing double quote.

    A quote is escaped when an odd number of backslashes runs right before it; an
    unterminated string runs to the end of the text. Only quotes and brackets are
    looked at one by one, so the cost is one pass over the bytes.
    """
    quotes = np.flatnonzero(codes == ord('"'))
    if not quotes.size:
        return np.zeros(at.size, bool)
    backslash = np.concatenate(([0], codes == ord("\\"), [0])).astype(np.int8)
    edges = np.flatnonzero(np.diff(backslash))
    starts, ends = edges[0::2], edges[1::2]
    # The length of the backslash run that ends right before each byte (0 for most).
    run_before = np.zeros(codes.size + 1, np.int64)
    run_before[ends] = ends - starts
    quotes = quotes[run_before[quotes] % 2 == 0]
    return np.searchsorted(quotes, at) % 2 == 1


def check_module_text(text: str) -> None:
    """Raise `RefusedText` when `text` is not safe to hand to the MLIR parser."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RefusedText(f"is not valid Unicode: a lone surrogate at character {exc.start}; "
                          "send UTF-8 text") from None
    nul = text.find("\0")
    if nul >= 0:
        raise RefusedText(f"contains a NUL character at position {nul}")
    depth = nesting_depth(text)
    if depth > MAX_NESTING:
        raise RefusedText(f"nests {depth} levels deep; at most {MAX_NESTING} are accepted")
