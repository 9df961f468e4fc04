"""What every command shares: usage errors, argument checks, output, finding the program."""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys

from costmodel.features import Placement

from .user_code import user_code


class UsageError(Exception):
    """A wrong use of the command line: reported as one line on stderr, exit status 2."""


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Appends each option's default, unless it is required or its help already says
    the default in words."""

    def _get_help_string(self, action) -> str:
        if action.required or "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """Shows defaults in every `--help`; a wrong argument is one line, not the usage."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Help)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _checked(kind: type, accept, what: str):
    """An argparse type: `kind(text)`, finite and accepted (nan, inf and -1 are refused)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not math.isfinite(value) or not accept(value):
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
        return value
    return parse


seconds = _checked(float, lambda v: v > 0, "a positive number of seconds")
positive = _checked(float, lambda v: v > 0, "a positive number")
count = _checked(int, lambda v: v >= 1, "a whole number >= 1")
port = _checked(int, lambda v: 0 <= v <= 65535, "a port number, 0-65535")


def emit(data, as_json: bool, text: str = "") -> None:
    print(json.dumps(data, indent=2, default=str) if as_json else text)


# where programs and models come from ----------------------------------------------
def where_label(backend: str, target: str) -> str:
    return Placement(backend, target).where


def shipped_models() -> list[tuple[str, str]]:
    """(backend, target) of every model that ships with costmodel."""
    from costmodel.features.environment import KNOWN_TARGETS
    from costmodel.models import default_path

    return [(b, t) for b, targets in KNOWN_TARGETS.items() for t in targets
            if (default_path(b, t) / "manifest.json").is_file()]


def known_placements() -> list[tuple[str, str]]:
    """(backend, target) of every placement costmodel can compile for."""
    from costmodel.features.environment import KNOWN_TARGETS

    return [(b, t) for b, targets in KNOWN_TARGETS.items() for t in targets]


def placements_offered(need_model: bool) -> str:
    """What a wrong --target is told instead, from what ships (never a fixed list): the
    placements with a model and those without, or every placement sweeps can measure."""
    known = known_placements()
    if not need_model:
        return "known targets: " + ", ".join(where_label(*k) for k in known if k[1])
    shipped = shipped_models()
    text = "models ship for " + ", ".join(where_label(*s) for s in shipped)
    if without := [where_label(*k) for k in known if k not in shipped]:
        text += (f"; known, but no model ships for {', '.join(without)} (measure and train "
                 "one, then pass --model)")
    return text


def backend_and_target(backend: str | None, target: str | None,
                       need_model: bool = False) -> tuple[str, str]:
    """Validated (backend, target): a target alone means the backend that has it. A wrong
    target is told what exists (`placements_offered`), never blaming a backend the user
    did not name."""
    from costmodel.features import normalize_target
    from costmodel.features.environment import KNOWN_BACKENDS, KNOWN_TARGETS, model_target

    if target:
        key = target.lower()
        owners = [b for b in KNOWN_BACKENDS
                  if model_target(b, key) in KNOWN_TARGETS.get(b, ())]
        if backend is None and key in KNOWN_BACKENDS:
            raise UsageError(f"{target!r} is a backend, not a target: use --backend {key}; "
                             f"{placements_offered(need_model)}")
        if not owners:
            asked = "" if backend is None else f" for --backend {backend}"
            raise UsageError(f"unknown target {target!r}{asked}; "
                             f"{placements_offered(need_model)}")
        if backend is None and len(owners) > 1:
            raise UsageError(f"--target {target} is a target of {' and '.join(owners)}: "
                             "name one with --backend")
        if backend is not None and backend.lower() not in owners:
            has_none = "" if any(KNOWN_TARGETS.get(backend.lower(), ("",))) else \
                f" ({backend.upper()} models have no target)"
            raise UsageError(f"--target {target} is a {owners[0].upper()} target: use it "
                             f"with --backend {owners[0]}{has_none}")
        backend = backend or owners[0]
    return normalize_target(backend or "cpu", target)


def served_by(backend: str, target: str) -> tuple[str, str]:
    """(backend, target) of the model that serves a placement: a TPU topology's chip's."""
    served = Placement(backend, target).model
    return served.backend, served.target


def model_placement(args) -> tuple[str | None, str | None]:
    """(backend, target) for predict and advise: as asked, else the --model's own; without
    --model, one that has a shipped model (None, None: the local default backend)."""
    from .._predict import load_model

    if args.model:
        artifact = load_model(args.model)
        if args.backend is None and args.target is None:
            return artifact.backend, artifact.target
        asked = backend_and_target(args.backend, args.target, need_model=False)
        if served_by(*asked) != (artifact.backend, artifact.target):
            raise UsageError(f"--model {args.model} predicts for "
                             f"{where_label(artifact.backend, artifact.target)}, not {where_label(*asked)}")
        return asked
    if args.backend is None and args.target is None:
        return None, None
    asked = backend_and_target(args.backend, args.target, need_model=True)
    shipped = shipped_models()
    if served_by(*asked) not in shipped:
        raise UsageError(
            f"no model ships for {where_label(*asked)} (models ship for "
            f"{', '.join(where_label(*s) for s in shipped)}); measure it with `costmodel sweep "
            f"--backend {asked[0]} --target {asked[1]}`, `costmodel train`, then pass --model")
    return asked


def import_user_module(where: str):
    from .._argspec import import_module_or_file

    if os.getcwd() not in sys.path:  # `cli_prog:fn` finds ./cli_prog.py, as `python -m` does
        sys.path.insert(0, os.getcwd())
    try:
        return import_module_or_file(where)
    except (ImportError, SyntaxError) as exc:
        raise UsageError(f"cannot import {where!r}: {exc}") from None


def _function(ref: str):
    from .._argspec import load_function

    if ":" in ref:
        import_user_module(ref.rpartition(":")[0])
    fn = load_function(ref)
    if not callable(fn):
        raise UsageError(f"{ref} is a {type(fn).__name__}, not a function")
    return fn


def _check_arguments(fn, ref: str, shapes: list) -> None:
    """The --args must fit the function's positional parameters."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature to check (a builtin): tracing will tell
        return
    try:
        signature.bind(*shapes)
    except TypeError as exc:
        raise UsageError(f"{ref}{signature} cannot take {len(shapes)} --arg: {exc}") from None


def program_of(args):
    from .._argspec import parse_arg

    with user_code():  # the module's own top level may raise
        fn = _function(args.function)
    shapes = [parse_arg(a) for a in args.arg]
    _check_arguments(fn, args.function, shapes)
    return fn, shapes


def traced(call):
    """Run `call()`, which traces the user's function: their exception is a
    `UserCodeError`, and one JAX raised before reaching their code (the --args are no
    arrays it takes) a wrong use."""
    try:
        with user_code():
            return call()
    except TypeError as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"the function does not trace with these --args: {first}") from None


# commands ---------------------------------------------------------------------------
