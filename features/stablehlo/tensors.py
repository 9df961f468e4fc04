"""MLIR tensor types decoded to shapes and element types, and their sizes in bytes."""

from __future__ import annotations

import math
from dataclasses import dataclass

_ELEMENT_BYTES = {
    "f64": 8, "f32": 4, "f16": 2, "bf16": 2, "tf32": 4,
    "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i4": 1, "i2": 1, "i1": 1,
    "ui64": 8, "ui32": 4, "ui16": 2, "ui8": 1, "ui4": 1, "ui2": 1,
    "complex<f32>": 8, "complex<f64>": 16, "index": 8,
}


def element_bytes(element_type: str) -> int:
    """Bytes per element of an MLIR element type (`f32` → 4, unknown → 4)."""
    # Narrow floats are named f8E4M3FN, f6E2M3FN, f4E2M1FN...: match the "E" so f64 is not one
    if element_type.startswith(("f8E", "f6E", "f4E")):
        return 1
    return _ELEMENT_BYTES.get(element_type, 4)


@dataclass
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.elements * element_bytes(self.dtype)


def tensor(mlir_type) -> TensorInfo | None:
    """A ranked tensor type's shape (dynamic sizes as 1) and element type; None otherwise."""
    from jax._src.lib.mlir import ir

    try:
        ranked = ir.RankedTensorType(mlir_type)
    except (ValueError, TypeError):
        return None
    shape = tuple(d if d >= 0 else 1 for d in ranked.shape)
    return TensorInfo(shape, str(ranked.element_type))


def cached():
    """A `tensor` that decodes each type once: MLIR types are uniqued and a module uses few,
    so this halves a walk."""
    types: dict = {}

    def lookup(mlir_type) -> TensorInfo | None:
        if mlir_type not in types:
            types[mlir_type] = tensor(mlir_type)
        return types[mlir_type]

    return lookup
