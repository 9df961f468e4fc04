"""The user's own code raising, told apart from costmodel's: one line naming the user's
exception and the line of theirs it came from, costmodel's and the libraries' frames left
out (`--debug` shows them all)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache


class UserCodeError(Exception):
    """The user's code raised while costmodel imported or traced it. `__cause__` holds
    their exception; `str()` is the one line the command prints."""


@dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{_shown(self.path)}:{self.line} in {self.function}"


@lru_cache(maxsize=1)
def _not_users() -> tuple[str, ...]:
    """Folders whose code is never the user's: costmodel's packages (some installed from
    folders beside `costmodel/`), the standard library and installed packages."""
    folders = set()
    for name in ("costmodel", "costmodel.features", "costmodel.models",
                 "costmodel.training", "costmodel.api"):
        spec = importlib.util.find_spec(name)
        folders.update(spec.submodule_search_locations or () if spec else ())
    paths = sysconfig.get_paths()
    folders.update(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths)
    return tuple(os.path.join(os.path.realpath(f), "") for f in folders)


def _is_users(path: str) -> bool:
    if path.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return False
    return not os.path.realpath(path).startswith(_not_users())


def _shown(path: str) -> str:
    """`path` relative to the current folder when it lies inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return path
    return path if rel.startswith(os.pardir) else rel


def _frames(exc: BaseException) -> list[Frame]:
    frames, tb = [], exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append(Frame(code.co_filename, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    return frames


def users_frame(exc: BaseException) -> Frame | None:
    """The innermost frame of the user's code the exception passed through, if any."""
    mine = [f for f in _frames(exc) if _is_users(f.path)]
    return mine[-1] if mine else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def describe(exc: BaseException, frame: Frame) -> str:
    """One line: a shape or type error JAX raised while tracing reads as the --args not
    fitting the function; anything else as the user's exception at their line."""
    raised_by_user = _frames(exc)[-1] == frame
    kind = type(exc).__name__
    if not raised_by_user and isinstance(exc, (TypeError, ValueError)):
        first = (str(exc).strip().splitlines() or [kind])[0]
        return (f"the function does not trace with these --args: {kind}: "
                f"{_one_line(first)} (at {frame})")
    message = _one_line(str(exc))
    return f"{frame}: {kind}{': ' + message if message else ''} (--debug for the traceback)"


@contextlib.contextmanager
def user_code() -> Iterator[None]:
    """Run the user's code (importing their module, tracing their function): an exception
    that passed through a frame of theirs becomes a `UserCodeError`; costmodel's own
    errors pass unchanged."""
    try:
        yield
    except Exception as exc:
        frame = users_frame(exc)
        if frame is None:
            raise
        raise UserCodeError(describe(exc, frame)) from exc
