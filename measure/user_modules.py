"""Importing a user's module or file: the sweep and its measurement processes do it to
register users' own corpus families, the command line to find a user's function. It imports
only the standard library, so `costmodel predict FILE.py:FN` pulls in no training dependency."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path


def import_module_or_file(where: str):
    """Import `package.module` or a file `path/to/file.py` (run as a fresh module)."""
    if not where.endswith(".py"):
        return importlib.import_module(where)
    path = Path(where)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    # one module per file: two files of the same name in different folders stay apart
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"_costmodel_user_{path.stem}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    # as `python path/to/file.py` does: the file may import the modules beside it
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
