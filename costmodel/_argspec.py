"""Parsing command-line argument specs like `f32[1024,1024]` and `FILE.py:FUNC`."""

from __future__ import annotations

import re

DTYPES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8",
    "u64": "uint64", "u32": "uint32", "u16": "uint16", "u8": "uint8",
    "c64": "complex64", "c128": "complex128", "bool": "bool",
}
_SPEC = re.compile(r"^\s*([a-z0-9]+)\s*\[\s*([0-9,\s]*)\]\s*$")


class ArgSpecError(ValueError):
    """An argument spec or FILE:FUNC reference that cannot be understood."""


def parse_arg(spec: str):
    """`f32[1024,1024]` → `jax.ShapeDtypeStruct((1024, 1024), float32)`; `f32[]` is a scalar."""
    import jax

    match = _SPEC.match(spec)
    if not match or match.group(1) not in DTYPES:
        raise ArgSpecError(
            f"cannot read argument {spec!r}: write DTYPE[d0,d1,...] with DTYPE one of "
            f"{', '.join(DTYPES)} (e.g. f32[1024,1024], i32[] for a scalar)")
    dims = tuple(int(d) for d in match.group(2).split(",") if d.strip())
    return jax.ShapeDtypeStruct(dims, DTYPES[match.group(1)])


def import_module_or_file(where: str):
    """Import `package.module` or a file `path/to/file.py` (run as a fresh module)."""
    from costmodel.measure import user_modules

    try:
        return user_modules.import_module_or_file(where)
    except FileNotFoundError as error:
        raise ArgSpecError(str(error)) from None


def load_function(ref: str):
    """Import `path/to/file.py:function` (or `package.module:function`) and return it."""
    if ":" not in ref:
        raise ArgSpecError(f"expected FILE.py:FUNC or module:FUNC, got {ref!r}")
    where, _, name = ref.rpartition(":")
    module = import_module_or_file(where)
    try:
        return getattr(module, name)
    except AttributeError:
        raise ArgSpecError(f"{where} has no attribute {name!r}") from None
