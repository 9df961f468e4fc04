"""Per-function tallies combined along the call graph, as XLA sees the program once calls are
inlined; cycles are cut, counting the callee once."""

from __future__ import annotations

import copy
from collections import Counter

from .tally import ALONG_CALLS, Tally


def combine(name: str, tallies: dict[str, Tally], memo: dict, stack: tuple = ()) -> dict:
    """`ALONG_CALLS` field -> its value for `name` with every call inlined."""
    if name in memo:
        return memo[name]
    own = tallies.get(name)
    if own is None or name in stack:
        return {f.name: f.empty() for f in ALONG_CALLS}
    result = {f.name: copy.copy(getattr(own, f.name)) for f in ALONG_CALLS}
    for call in own.calls:
        sub = combine(call.callee, tallies, memo, stack + (name,))
        for f in ALONG_CALLS:
            result[f.name] = f.along(result[f.name], sub[f.name], call)
    memo[name] = result
    return result


def kernel_sequences(name: str, tallies: dict[str, Tally], memo: dict, stack: tuple = (),
                     called: bool = False, inlined: bool = True) -> tuple[int, Counter]:
    """Kernels of `name`'s body with its calls inlined, and how many loop bodies and
    branches it runs (its callees' included) hold each number of kernels. With `inlined`
    (`Walker.inline`), a called function's body fusions are the caller's (its ops are
    fused into the caller's, see `Walker._inline`), so only its other kernels count there."""
    if (name, called) in memo:
        return memo[name, called]
    own = tallies.get(name)
    if own is None or name in stack:
        return 0, Counter()
    body, nested = 0, Counter()
    for kernels, groups, callees, is_body in own.sequences:
        if not (called and is_body and inlined):
            kernels += groups
        for callee in callees:
            callee_body, callee_nested = kernel_sequences(callee, tallies, memo,
                                                          stack + (name,), True, inlined)
            kernels += callee_body
            nested.update(callee_nested)
        if is_body:
            body += kernels
        else:
            nested[kernels] += 1
    memo[name, called] = body, nested
    return memo[name, called]
