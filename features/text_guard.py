"""Checks on StableHLO text before the MLIR parser sees it, in time linear in its length.

The parser recurses once per nested region, attribute or type and overflows the C stack
(a segfault, not an exception) a few thousand levels down, and it cannot take text that
is not valid Unicode. Its affine-expression parser also recurses once per unary minus or
`+` term, so a flat 40 KB `affine_map` crashes it too. Both the library and the HTTP
service refuse such text here, so a request body of any size is checked in linear time.
"""

from __future__ import annotations

import re

import numpy as np

# Real modules nest well under 50 levels.
MAX_NESTING = 256
# Most `+`/`-` signs in one run (whitespace between them allowed) outside strings; StableHLO
# writes at most one in a row (`-1`, `->`), so this only bounds what the parser may recurse on.
MAX_OPERATOR_RUN = 64

# affine maps and integer sets: the only input whose expressions the parser recurses on
# term by term. JAX never writes them (StableHLO has no affine types); a name such as
# `%affine_map` or `@affine_set` is not the keyword.
_AFFINE = re.compile(rb"(?<![\w$.%@#!^-])affine_(?:map|set)\s*<")
_OPERATOR = np.zeros(256, np.int8)
_OPERATOR[list(b"+-")] = 1
_BLANK = np.zeros(256, bool)
_BLANK[list(b" \t\r\n")] = True

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
    return _depth(np.frombuffer(text.encode("utf-8", "surrogatepass"), np.uint8))


def _depth(codes: np.ndarray) -> int:
    steps = _BRACKET_STEP[codes]
    at = np.flatnonzero(steps)
    # `->` is an arrow, not a closing bracket.
    at = at[(at == 0) | (codes[at - 1] != ord("-")) | (steps[at] > 0)]
    if not at.size:
        return 0
    quotes = _unescaped_quotes(codes)
    if quotes is not None:
        # Between an odd and the next even quote is inside a string; an open one runs on.
        at = at[(np.cumsum(quotes, dtype=np.int32)[at] & 1) == 0]
    return int(np.cumsum(steps[at], dtype=np.int64).max(initial=0))


def _unescaped_quotes(codes: np.ndarray) -> np.ndarray | None:
    """Mask of the double quotes that open or close a string (None when there are none).

    A quote is escaped when an odd number of backslashes runs right before it.
    """
    quotes = codes == ord('"')
    if not quotes.any():
        return None
    after_backslash = np.flatnonzero(quotes[1:] & (codes[:-1] == ord("\\"))) + 1
    if after_backslash.size:
        backslash = np.concatenate(([0], codes == ord("\\"), [0])).astype(np.int8)
        edges = np.flatnonzero(np.diff(backslash))
        starts, ends = edges[0::2], edges[1::2]
        # Each such quote is where a run ends: mark the ends of odd-length runs.
        odd_run_ends = np.zeros(codes.size + 1, bool)
        odd_run_ends[ends[(ends - starts) % 2 == 1]] = True
        quotes[after_backslash[odd_run_ends[after_backslash]]] = False
    return quotes


def check_module_text(text: str) -> None:
    """Raise `RefusedText` when `text` is not safe to hand to the MLIR parser."""
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RefusedText(f"is not valid Unicode: a lone surrogate at character {exc.start}; "
                          "send UTF-8 text") from None
    nul = text.find("\0")
    if nul >= 0:
        raise RefusedText(f"contains a NUL character at position {nul}")
    codes = np.frombuffer(encoded, np.uint8)  # encoded once, for every check
    depth = _depth(codes)
    if depth > MAX_NESTING:
        raise RefusedText(f"nests {depth} levels deep; at most {MAX_NESTING} are accepted")
    quotes = _unescaped_quotes(codes)
    in_string = (None if quotes is None
                 else (np.cumsum(quotes, dtype=np.int32) & 1).astype(bool) | quotes)
    for match in _AFFINE.finditer(encoded):
        if in_string is None or not in_string[match.start()]:
            keyword = match.group().split(b"<")[0].strip().decode()
            raise RefusedText(f"holds an {keyword} at byte {match.start()}; affine maps and "
                              "sets are not StableHLO and are not accepted")
    run = longest_operator_run(codes, in_string)
    if run > MAX_OPERATOR_RUN:
        raise RefusedText(f"holds a run of {run} +/- signs; at most {MAX_OPERATOR_RUN} "
                          "in a row are accepted")


def longest_operator_run(codes: np.ndarray, in_string: np.ndarray | None = None) -> int:
    """Most `+`/`-` signs in a row, whitespace between them allowed, outside strings."""
    operator = _OPERATOR[codes]
    if not operator.any():
        return 0
    if in_string is not None:
        operator = operator * ~in_string
    # Any other byte, or any byte inside a string, ends a run.
    ends = ~(operator.astype(bool) | _BLANK[codes])
    if in_string is not None:
        ends |= in_string
    counted = np.concatenate(([0], np.cumsum(operator, dtype=np.int64)))
    cuts = np.concatenate(([0], np.flatnonzero(ends) + 1, [codes.size]))
    return int(np.diff(counted[cuts]).max(initial=0))
