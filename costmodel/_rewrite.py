"""Rewrite a traced program into the alternative a piece of advice proposes, so that the
alternative can be lowered and predicted by the model instead of guessed.

The rewrites keep shapes and structure, and (for scan and constants) the values too:
tests check that the rewritten program computes what the original does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from costmodel._rewrite_rows import _live, _read_rows, _restack, _restacks, _rows_of

_JIT_PRIMITIVES = {"jit", "pjit", "closed_call", "core_call"}
MIN_SCANNED = 2  # a scan over fewer steps than this is no rewrite
MAX_SCANS = 4    # unrolled runs scanned in one program: a loop and its gradient are two
_DATA_MOVEMENT = {"slice", "squeeze", "reshape", "broadcast_in_dim", "concatenate", "stack",
                  "dynamic_slice", "dynamic_update_slice", "transpose", "copy", "rev",
                  "convert_element_type"}


def _eval_eqns(eqns, env: dict, special: dict | None = None) -> None:
    """Evaluate equations into `env` (var -> value) by binding their primitives
    (`special`: {id(eqn): a function of its operands bound instead}; an operand it does
    not read may be missing from `env`)."""
    from jax.extend.core import Literal

    def read(v):
        return v.val if isinstance(v, Literal) else env.get(v)

    for eqn in eqns:
        if special and id(eqn) in special:
            env[eqn.outvars[0]] = special[id(eqn)](*map(read, eqn.invars))
            continue
        params = eqn.primitive.get_bind_params(eqn.params)
        with eqn.ctx.manager:
            outs = eqn.primitive.bind(*map(read, eqn.invars), **params)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for var, value in zip(eqn.outvars, outs):
            env[var] = value


def _reader(env: dict):
    from jax.extend.core import Literal

    return lambda v: v.val if isinstance(v, Literal) else env[v]


def _block_io(block) -> tuple[list, list]:
    """Vars a block reads before defining them (in order, unique), and vars it defines."""
    from jax.extend.core import Literal

    defined: set = set()
    inputs: list = []
    seen: set = set()
    outputs: list = []
    for eqn in block:
        for v in eqn.invars:
            if isinstance(v, Literal) or v in defined or v in seen:
                continue
            seen.add(v)
            inputs.append(v)
        for v in eqn.outvars:
            defined.add(v)
            outputs.append(v)
    return inputs, outputs


@dataclass
class ScanPlan:
    """How inputs of each repeated block map onto a scan: carry, per-step xs, or shared."""

    kinds: list[str]          # per block input: "carry" | "xs" | "const"
    carry_source: list[int]   # for carry inputs: index into the block's outputs feeding it


def plan_scan(eqns, start: int, size: int, repeats: int) -> ScanPlan | None:
    """Classify block inputs; None when the blocks are not a clean chain."""
    blocks = [eqns[start + k * size: start + (k + 1) * size] for k in range(repeats)]
    ios = [_block_io(b) for b in blocks]
    n_inputs = len(ios[0][0])
    if any(len(inp) != n_inputs for inp, _ in ios):
        return None
    kinds, sources = [], []
    for i in range(n_inputs):
        if all(ios[k][0][i] is ios[0][0][i] for k in range(repeats)):
            kinds.append("const")
            sources.append(-1)
            continue
        positions = []
        for k in range(1, repeats):
            prev_out = ios[k - 1][1]
            var = ios[k][0][i]
            positions.append(next((j for j, o in enumerate(prev_out) if o is var), None))
        if all(p is not None for p in positions) and len(set(positions)) == 1:
            kinds.append("carry")
            sources.append(positions[0])
        elif all(p is None for p in positions):
            kinds.append("xs")
            sources.append(-1)
        else:
            return None
    return ScanPlan(kinds, sources)


def _block_shapes(block) -> tuple:
    """Every operand's shape and dtype, equation by equation: the blocks a scan can run."""
    return tuple(tuple((tuple(getattr(v.aval, "shape", ())), str(getattr(v.aval, "dtype", "")))
                       for v in eqn.invars) for eqn in block)


def same_shaped_run(eqns, start: int, size: int, repeats: int) -> tuple[int, int]:
    """(start, repeats) of the longest run of back-to-back blocks that read operands of
    the same shapes: only those can be one scan's steps. Repeated blocks are found by
    their results, so a stack of layers whose weights differ in shape ((128, 256) then
    (256, 256)) repeats, but its first layer cannot share a scan with the others."""
    shapes = [_block_shapes(eqns[start + k * size: start + (k + 1) * size])
              for k in range(repeats)]
    best_start, best_len, run_start = 0, 0, 0
    for k in range(repeats):
        if k > 0 and shapes[k] != shapes[k - 1]:
            run_start = k
        if k - run_start + 1 > best_len:
            best_start, best_len = run_start, k - run_start + 1
    return start + best_start * size, best_len


def as_scan(closed_jaxpr, start: int, size: int, repeats: int, min_scanned: int = MIN_SCANNED,
            stacked_arguments: bool = False):
    """A function computing `closed_jaxpr` with the repeated blocks run by `lax.scan`:
    the longest run of them whose operands have the same shapes (`same_shaped_run`).

    `stacked_arguments`: the steps' own program arguments (a layer's weights) come in
    stacked, one argument each after the others, and the steps' values the program
    returns (their gradients) go out stacked, one result each after the others, as a
    program written with scanned layers (`nn.scan`, `hk.layer_stack`) takes and gives
    them; else the signature is the original's, the arguments stacked inside and the
    results sliced out row by row.

    Returns (fn, arg_shapes) to lower, or None when the blocks cannot be chained or fewer
    than `min_scanned` of them can.
    """
    import jax
    import jax.numpy as jnp
    from jax import lax

    jaxpr = closed_jaxpr.jaxpr
    eqns = jaxpr.eqns
    if repeats < min_scanned:
        return None
    start, repeats = same_shaped_run(eqns, start, size, repeats)
    if repeats < min_scanned:
        return None
    plan = plan_scan(eqns, start, size, repeats)
    if plan is None and repeats - 1 >= min_scanned:
        # The first repeat may read an initial value as a literal (an optimizer's step
        # count of 0), so it has one input fewer: leave it unrolled, scan the rest.
        start, repeats = start + size, repeats - 1
        plan = plan_scan(eqns, start, size, repeats)
    if plan is None or "carry" not in plan.kinds:
        return None
    blocks = [eqns[start + k * size: start + (k + 1) * size] for k in range(repeats)]
    ios = [_block_io(b) for b in blocks]
    end = start + size * repeats
    first_inputs, first_outputs = ios[0]
    # Stack only the per-step values read after the loop, as a hand-written scan would:
    # every intermediate as a scan output inflates the program predicted for the scan.
    # (the last step's carried values come out of the scan as its final carry).
    used = _read_by(eqns[end:], jaxpr.outvars)
    carried = {plan.carry_source[i] for i, kind in enumerate(plan.kinds) if kind == "carry"}
    stacked = [j for j in range(len(first_outputs))
               if any(ios[k][1][j] in used
                      for k in range(repeats - 1 if j in carried else repeats))]

    idx = {kind: [i for i, k in enumerate(plan.kinds) if k == kind]
           for kind in ("carry", "xs", "const")}
    # the steps' values stacked again after the loop (by a scan written earlier, over the
    # same steps) are the scan's stacked outputs as they are
    after = eqns[end:]
    restacked = _restacks(after, [[ios[k][1][j] for k in range(repeats)] for j in stacked])
    reads = {id(after[n]): [v for m, v in enumerate(after[n].invars)
                            if not at <= m < at + count]
             for n, (_, at, count, _, _) in restacked.items()}
    rest = _live(after, jaxpr.outvars, reads)
    read_after = _read_by(rest, jaxpr.outvars, reads)
    # per-step values that are rows of one array (an earlier scan's outputs, which the
    # backward pass of a loop reads in reverse) are scanned over that array's rows, as
    # a gradient of a scan reads them, not sliced out and stacked again
    rows = {i: _rows_of(eqns[:start], [ios[k][0][i] for k in range(repeats)])
            for i in idx["xs"]}
    replaced = {v for i, found in rows.items() if found
                for v in (ios[k][0][i] for k in range(repeats))}
    # what the loop reads from before it (its rows' arrays among them) and what follows
    # it reads
    needed = ({v for k in range(repeats) for v in ios[k][0] if v not in replaced}
              | {found[0] for found in rows.values() if found} | read_after)
    before = _live(eqns[:start], needed)
    outside = _read_by(before + rest, (), reads)  # what the code around the loop reads
    arguments, returned = (_stacked_io(jaxpr, ios, idx["xs"], rows, stacked, carried, outside)
                           if stacked_arguments else ({}, {}))
    kept_args = [v for v in jaxpr.invars
                 if not any(v in steps for steps in arguments.values())]
    # a stacked argument's rows that code outside the loop reads (a backward pass)
    row_of = {v: (i, k) for i, steps in arguments.items() for k, v in enumerate(steps)
              if v in outside}
    # every per-step input read from the end of its array backwards (a backward pass):
    # one scan in reverse over the arrays as they are, as the gradient of a scan runs
    backward = bool(idx["xs"]) and all(rows[i] and rows[i][2] == -1 for i in idx["xs"])

    def row(k: int) -> int:  # where step k's values lie in the scan's stacked outputs
        return repeats - 1 - k if backward else k

    def fn(*args):
        env = dict(zip(jaxpr.constvars, closed_jaxpr.consts))
        env.update(zip(kept_args, args))
        whole = dict(zip(arguments, args[len(kept_args):]))
        for v, (i, k) in row_of.items():
            env[v] = lax.index_in_dim(whole[i], k, keepdims=False)
        _eval_eqns(before, env)
        read = _reader(env)
        carry0 = [read(ios[0][0][i]) for i in idx["carry"]]
        xs = [whole[i] if i in whole else _read_rows(read, rows[i], repeats, backward) if rows[i]
              else jnp.stack([read(ios[k][0][i]) for k in range(repeats)]) for i in idx["xs"]]
        consts = [read(ios[0][0][i]) for i in idx["const"]]

        def body(carry, x):
            local = {}
            for i, value in zip(idx["carry"], carry):
                local[first_inputs[i]] = value
            for i, value in zip(idx["xs"], x):
                local[first_inputs[i]] = value
            for i, value in zip(idx["const"], consts):
                local[first_inputs[i]] = value
            _eval_eqns(blocks[0], local)
            new_carry = [local[first_outputs[plan.carry_source[i]]] for i in idx["carry"]]
            return new_carry, [local[first_outputs[j]] for j in stacked]

        final, ys = lax.scan(body, carry0, xs, length=repeats, reverse=backward)
        for i, value in zip(idx["carry"], final):
            env[ios[-1][1][plan.carry_source[i]]] = value
        # other outputs of any block used after the loop come from the stacked ys
        for k in range(repeats):
            for j, y in zip(stacked, ys):
                if (ios[k][1][j] in read_after and ios[k][1][j] not in env
                        and j not in returned):
                    env[ios[k][1][j]] = y[row(k)]
        special = {id(after[n]): _restack(ys[position], at, count,
                                          repeats - low - count if backward else low,
                                          backwards != backward)
                   for n, (position, at, count, low, backwards) in restacked.items()}
        _eval_eqns(rest, env, special)
        gone = {v for steps in returned.values() for v in steps}
        return ([_reader(env)(v) for v in jaxpr.outvars if v not in gone]
                + [ys[stacked.index(j)] for j in returned])

    shapes = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in kept_args]
    shapes += [jax.ShapeDtypeStruct((repeats, *steps[0].aval.shape), steps[0].aval.dtype)
               for steps in arguments.values()]
    return fn, shapes


def _stacked_io(jaxpr, ios, xs: list[int], rows: dict, stacked: list[int], carried: set,
                read_outside: set) -> tuple[dict, dict]:
    """For `as_scan(..., stacked_arguments=True)`: {xs input: its steps' values} where each
    step reads a program argument of its own, and {stacked output: its steps' values}
    where each step's value is a program result that nothing else reads."""
    steps = len(ios)
    inputs = set(jaxpr.invars)
    arguments = {}
    for i in xs:
        values = [ios[k][0][i] for k in range(steps)]
        if not rows[i] and all(v in inputs for v in values) and len(set(values)) == steps:
            arguments[i] = values
    results = set(jaxpr.outvars)
    returned = {}
    for j in stacked:
        values = [ios[k][1][j] for k in range(steps)]
        if (j not in carried and len(set(values)) == steps
                and all(v in results and v not in read_outside for v in values)
                and sum(v in values for v in jaxpr.outvars) == steps):
            returned[j] = values
    return arguments, returned


def scan_remaining(fn, shapes, min_repeats: int, stacked_arguments: bool = False):
    """`(fn, shapes)` with the unrolled runs still left in it scanned too, longest first.

    The gradient of an unrolled loop repeats twice, forward and backward, and a user's
    `lax.scan` (or `nn.scan`, `hk.dynamic_unroll`) turns both into loops; scanning one of
    them alone is not what they would compile.
    """
    import jax

    from costmodel.features.jaxpr import repeated_block

    for _ in range(MAX_SCANS - 1):
        closed = jax.jit(fn).trace(*shapes).jaxpr
        eqns = closed.jaxpr.eqns
        size, repeats, start = repeated_block(
            eqns, [*closed.jaxpr.constvars, *closed.jaxpr.invars])
        # the rows an earlier scan's outputs are read back by repeat too: glue, not a loop
        glue = all(e.primitive.name in _DATA_MOVEMENT for e in eqns[start:start + size])
        rewritten = (as_scan(closed, start, size, repeats, min_repeats, stacked_arguments)
                     if repeats >= min_repeats and not glue else None)
        if rewritten is None:
            break
        fn, shapes = rewritten
    return fn, shapes


def _read_by(eqns, outvars, reads: dict | None = None) -> set:
    """The vars (not literals) that `eqns` read or the program returns (`reads`: as
    `_live`'s)."""
    from jax.extend.core import Literal

    return {v for eqn in eqns for v in (reads or {}).get(id(eqn), eqn.invars)
            if not isinstance(v, Literal)} | {v for v in outvars if not isinstance(v, Literal)}


def constants_as_arguments(closed_jaxpr):
    """A function taking the captured constants as leading arguments: (fn, arg_shapes)."""
    import jax

    jaxpr = closed_jaxpr.jaxpr
    n = len(jaxpr.constvars)

    def fn(*args):
        env = dict(zip(jaxpr.constvars, args[:n]))
        env.update(zip(jaxpr.invars, args[n:]))
        _eval_eqns(jaxpr.eqns, env)
        return [_reader(env)(v) for v in jaxpr.outvars]

    shapes = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype)
              for v in list(jaxpr.constvars) + list(jaxpr.invars)]
    return fn, shapes


def _jax_file(path: str) -> bool:
    return f"{os.sep}jax{os.sep}" in path or path.startswith(f"jax{os.sep}")


def is_user_jit(eqn) -> bool:
    """Whether an inner jit is one the user can call on its own, outside the outer jit.

    jax.numpy wraps many functions in jits of its own: some are called from jax's code
    (`_take`, `_where` behind `jnp.take`, `jnp.where`), others are public functions
    jitted where jax defines them (`jnp.clip`). Neither is a split a user can make.
    """
    if eqn.primitive.name not in _JIT_PRIMITIVES:
        return False
    name = str(eqn.params.get("name", ""))
    for module in _jax_namespaces():
        public = getattr(module, name, None)
        if callable(public) and str(getattr(public, "__module__", "")).startswith("jax"):
            return False
    traceback = eqn.source_info.traceback
    # Innermost first: jax's tracing machinery, then whoever called the jitted function.
    for frame in traceback.frames if traceback is not None else ():
        if not _jax_file(frame.file_name):
            return True
        if not _machinery(frame.file_name):
            return False  # called from jax's own library code
    return False


_MACHINERY = ("source_info_util", "interpreters", "core.py", "pjit.py", "api.py",
              "traceback_util", "linear_util", "api_util", "profiler.py", "dispatch.py",
              "stages.py", "config.py")


def _machinery(path: str) -> bool:
    """jax's own tracing and dispatch code, as opposed to its library (numpy, lax, nn)."""
    return any(part in path for part in _MACHINERY)


def _jax_namespaces():
    import jax
    import jax.numpy as jnp
    import jax.scipy.special

    return (jnp, jax.nn, jax.lax, jax.scipy.special, jnp.linalg, jax.random)


def inner_jit_parts(closed_jaxpr):
    """The programs compiled when each inner jit is jitted on its own: the distinct inner
    jits (identical ones compile once) and the glue around them, as (fn, arg_shapes, name).

    The glue is None when nothing but the inner jits is left: the caller then calls them
    one after another from Python and no glue program compiles at all.
    """
    import jax
    import jax.numpy as jnp

    # imported by name: `jax.extend` is not an attribute of `jax` until something imports it
    from jax.extend.core import jaxpr_as_fun

    jaxpr = closed_jaxpr.jaxpr
    parts, seen = [], set()
    for eqn in jaxpr.eqns:
        if not is_user_jit(eqn):
            continue
        inner = eqn.params["jaxpr"]
        key = (str(inner), tuple((v.aval.shape, str(v.aval.dtype)) for v in eqn.invars))
        if key in seen:
            continue
        seen.add(key)
        shapes = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
        parts.append((jaxpr_as_fun(inner), shapes,
                      str(eqn.params.get("name", "inner"))))

    def glue(*args):
        env = dict(zip(jaxpr.constvars, closed_jaxpr.consts))
        env.update(zip(jaxpr.invars, args))
        rest = []
        for eqn in jaxpr.eqns:
            if is_user_jit(eqn):
                _eval_eqns(rest, env)
                rest = []
                for var in eqn.outvars:  # the separately compiled part's result arrives here
                    env[var] = jnp.zeros(var.aval.shape, var.aval.dtype)
            else:
                rest.append(eqn)
        _eval_eqns(rest, env)
        return [_reader(env)(v) for v in jaxpr.outvars]

    if all(is_user_jit(eqn) for eqn in jaxpr.eqns):
        return parts, None
    shapes = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in jaxpr.invars]
    return parts, (glue, shapes, "glue")
