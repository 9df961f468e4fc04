"""MLIR tensor types decoded to shapes and element types, and their sizes in bytes."""

from __future__ import annotations

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


# Element counts saturate here: a declared shape may multiply out to thousands of digits
# (40 dimensions of 2**63), which no float holds; no array that exists comes near it.
MAX_ELEMENTS = 2 ** 62


def product(dims) -> int:
    """The product of `dims`, saturating at `MAX_ELEMENTS` (1 for none)."""
    total = 1
    for dim in dims:
        total *= dim
        if total > MAX_ELEMENTS:
            return MAX_ELEMENTS if all(d != 0 for d in dims) else 0
    return total


class TensorInfo:
    """A tensor type's shape and element type, with its element count and bytes worked
    out once (the walk asks for them at every op)."""

    __slots__ = ("shape", "dtype", "elements", "nbytes", "key", "wide", "complex")

    def __init__(self, shape: tuple[int, ...], dtype: str) -> None:
        self.shape, self.dtype = shape, dtype
        self.elements = product(shape)
        self.nbytes = self.elements * element_bytes(dtype)
        self.key = (shape, dtype)
        self.wide = dtype in ("f64", "complex<f64>")  # 64-bit floats
        self.complex = dtype.startswith("complex")

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorInfo) and (self.shape, self.dtype) == (other.shape,
                                                                               other.dtype)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"TensorInfo(shape={self.shape!r}, dtype={self.dtype!r})"


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
        info = types.get(mlir_type, types)
        if info is types:
            info = types[mlir_type] = tensor(mlir_type)
        return info

    return lookup
