"""Dots and convolutions: their flops, matrix-vector products and the operands XLA:CPU must
transpose, and their handlers."""

from __future__ import annotations

import re
from functools import lru_cache

from .parse import on_new_context
from .tensors import TensorInfo, product, tensor

_DOT_DIMS = re.compile(r"((?:lhs|rhs)_(?:batching|contracting)_dimensions) = \[([0-9, ]*)\]")


def dot_stats(op, tensor=tensor) -> tuple[float, bool, int]:
    """Flops of a dot, whether it multiplies a matrix by a vector (one side has no free,
    non-batch non-contracting, dimension larger than 1), and how many of its operands
    XLA:CPU must transpose first (`operand_transposed`).

    XLA:CPU emits matrix-vector dots as its own tiled LLVM loops instead of calling a GEMM
    library, and they cost several times more compile time than a matrix product of the
    same op count. `tensor` decodes an MLIR type (the walker passes its cached one).
    """
    lhs, rhs, out = (tensor(value.type) for value in (*op.operands[:2], op.results[0]))
    if lhs is None:
        return 0.0, False, 0
    if "dot_dimension_numbers" in op.attributes:
        dims = _dot_dims(op)
    else:  # stablehlo.dot: (m, k) x (k, n) or vectors
        dims = {"lhs_contracting_dimensions": [len(lhs.shape) - 1] if lhs.shape else [],
                "rhs_contracting_dimensions": [0] if rhs is not None and rhs.shape else []}

    def free_and_contracted(info: TensorInfo, side: str) -> tuple[int, int]:
        contracting = dims.get(f"{side}_contracting_dimensions", [])
        skipped = set(contracting) | set(dims.get(f"{side}_batching_dimensions", []))
        free = product([n for i, n in enumerate(info.shape) if i not in skipped])
        return free, product([info.shape[i] for i in contracting if i < len(info.shape)])

    lhs_free, contracted = free_and_contracted(lhs, "lhs")
    flops = 0.0 if out is None else 2.0 * out.elements * contracted
    transposes = len(transposed_dot_operands(op, tensor))
    if rhs is None:
        return flops, False, transposes
    rhs_free, _ = free_and_contracted(rhs, "rhs")
    return flops, contracted > 1 and min(lhs_free, rhs_free) == 1, transposes


def transposed_dot_operands(op, tensor=tensor) -> list[tuple[int, tuple]]:
    """(index, layout) of the operands of a dot that XLA:CPU copies into another layout
    first (`operand_transposed`). Each copy is a loop fusion into which XLA fuses the
    operand's producers; dots that want the same layout of one value share its copy."""
    if "dot_dimension_numbers" not in op.attributes:
        return []
    dims = _dot_dims(op)
    out = []
    for index, side in enumerate(("lhs", "rhs")):
        info = tensor(op.operands[index].type)
        batch = dims.get(f"{side}_batching_dimensions", [])
        contracting = dims.get(f"{side}_contracting_dimensions", [])
        if info is not None and operand_transposed(len(info.shape), batch, contracting, side):
            out.append((index, (side, tuple(batch), tuple(contracting))))
    return out


def _dot_dims(op) -> dict[str, list[int]]:
    return _dims_of(op.attributes["dot_dimension_numbers"])


@lru_cache(maxsize=4096)
def _dims_of(attribute) -> dict[str, list[int]]:
    # MLIR attributes are uniqued: a program's dots share a few, printed once each here
    # (read only: every dot with this attribute gets this dict)
    return {key: [int(d) for d in value.split(",") if d.strip()]
            for key, value in _DOT_DIMS.findall(str(attribute))}


# the cache holds attributes, which hold their context: dropped when it is replaced
on_new_context(_dims_of.cache_clear)


def operand_transposed(rank: int, batch: list[int], contracting: list[int],
                       side: str = "lhs") -> bool:
    """Whether XLA:CPU copies a dot operand into another layout before its batched matrix
    product. The batch dimensions must lead, in order. The rest must then be the free
    dimensions before the contracting ones (lhs) or after them (rhs), unless the operand
    is one free and one contracting dimension: a transposed matrix is only a layout.
    Measured (jax 0.10.2): `km,kn` and `bhqd,bhkd` are not copied; `k1 k2 m`, `k m1 m2`
    and `m1 k m2` as lhs, `n1 n2 k` as rhs, and `bqhd,bkhd` (batch not leading) are.
    `bench/archive/layout_cost.py`: ``bqhd,bkhd->bhqk`` compiled in 86 ms, ``bhqd,bhkd->bhqk`` in 11."""
    if list(batch) != list(range(len(batch))):
        return True
    rest = [d for d in range(rank) if d not in batch]
    free = [d for d in rest if d not in contracting]
    contracted = [d for d in rest if d in contracting]
    wanted = free + contracted if side == "lhs" else contracted + free
    return rest != wanted and not (len(free) == 1 and len(contracted) == 1)


_CONV_DIMS = re.compile(r"\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]")


def conv_stats(op, tensor=tensor) -> tuple[float, int]:
    """Flops of a convolution, and how many of its input, kernel and result are not in the
    layout of XLA:CPU's library convolution (input and result [b, spatial..., f], kernel
    [spatial..., i, o]); each becomes a transposing loop kernel of its own.
    `bench/archive/layout_cost.py`: a 2-D convolution compiled in 116 ms channels-first (NCHW/OIHW),
    65 ms with only the kernel OIHW, 10.5 ms channels-last.

    dim_numbers prints as [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]; the kernel's `o` gives
    the output features the flops divide out.
    """
    text = str(op.attributes["dimension_numbers"]) if "dimension_numbers" in op.attributes else ""
    match = _CONV_DIMS.search(text)
    kernel_dims, transposes = [], 0
    if match is not None:
        lhs_dims, kernel_dims, out_dims = ([s.strip() for s in group.split(",")]
                                           for group in match.groups())
        spatial = [str(i) for i in range(len(lhs_dims) - 2)]
        transposes = ((lhs_dims != ["b", *spatial, "f"]) + (kernel_dims != [*spatial, "i", "o"])
                      + (out_dims != ["b", *spatial, "f"]))
    kernel, out = tensor(op.operands[1].type), tensor(op.results[0].type)
    if kernel is None or out is None or not kernel.shape:
        return 0.0, transposes
    out_features = kernel.shape[-1]
    if "o" in kernel_dims and kernel_dims.index("o") < len(kernel.shape):
        out_features = kernel.shape[kernel_dims.index("o")]
    return 2.0 * out.elements * kernel.elements / max(out_features, 1), transposes


def dot(op, site) -> None:
    flops, matrix_vector, transposes = dot_stats(op, site.tensor)
    site.tally.dot_flops += site.trips * flops
    site.tally.matrix_vector_dots += matrix_vector
    site.tally.layout_transposes += transposes


def convolution(op, site) -> None:
    flops, transposes = conv_stats(op, site.tensor)
    site.tally.conv_flops += site.trips * flops
    site.tally.layout_transposes += transposes


# Element types XLA's interpreter multiplies as float32, with its matrix library (the
# 8-bit floats, f8E..., too)
_LIBRARY_DTYPES = frozenset({"f32", "bf16", "f16"})


def _library_dtype(dtype: str) -> bool:
    return dtype in _LIBRARY_DTYPES or dtype.startswith("f8E")


def evaluator_library_dot(op, name: str, tensor=tensor) -> bool:
    """Whether XLA's HLO interpreter, folding this dot of constants, hands it to its matrix
    library rather than evaluating it one multiply-add at a time.

    The interpreter's library path (`HandleDot`, xla/hlo/evaluator/
    hlo_evaluator_typed_visitor.h) takes only (m, k) x (k, n) with no batch dimensions,
    one contracting dimension each, in a type it computes as float32. XLA:CPU rewrites
    dots before folding: operands are converted to the result's type (`OperandUpcaster`),
    batch dimensions of 1 are dropped (`BatchDotSimplification`), and a dot with more than
    one contracting or free dimension on a side (`DotDecomposer`) becomes a product of
    (batch, m, k) x (batch, k, n), m or n dropped where it is 1. Convolutions never take
    the library path (`bench/archive/fold_dot_paths.py`).
    """
    if name not in ("dot_general", "dot"):
        return False
    lhs, rhs, out = (tensor(value.type) for value in (*op.operands[:2], op.results[0]))
    if lhs is None or rhs is None or out is None or not all(
            _library_dtype(info.dtype) for info in (lhs, rhs, out)):
        return False
    if name == "dot":  # contracts the lhs's last dimension with the rhs's first
        return len(lhs.shape) == 2 and len(rhs.shape) == 2
    dims = _dot_dims(op)
    lhs_batch = dims.get("lhs_batching_dimensions", [])
    if any(lhs.shape[d] != 1 for d in lhs_batch if d < len(lhs.shape)):
        return False  # a batch dimension stays one through any rewrite
    # batch dimensions of 1 are dropped first (`BatchDotSimplification`)
    lhs_dims = [d for d in range(len(lhs.shape)) if d not in lhs_batch]
    rhs_batch = dims.get("rhs_batching_dimensions", [])
    rhs_dims = [d for d in range(len(rhs.shape)) if d not in rhs_batch]
    lhs_contracting = [lhs_dims.index(d) for d in dims.get("lhs_contracting_dimensions", [])
                       if d in lhs_dims]
    rhs_contracting = [rhs_dims.index(d) for d in dims.get("rhs_contracting_dimensions", [])
                       if d in rhs_dims]
    if len(lhs_contracting) == 1 == len(rhs_contracting) and len(lhs_dims) <= 2 \
            and len(rhs_dims) <= 2:  # left as it is
        return lhs_contracting == [1] and rhs_contracting == [0] and len(lhs_dims) == 2 \
            and len(rhs_dims) == 2
    free_lhs = product([lhs.shape[d] for i, d in enumerate(lhs_dims)
                        if i not in lhs_contracting])
    free_rhs = product([rhs.shape[d] for i, d in enumerate(rhs_dims)
                        if i not in rhs_contracting])
    return free_lhs != 1 and free_rhs != 1


def dot_flops(tensor):
    """(flops, whether XLA's interpreter hands it to a matrix library) of a dot or
    convolution op, None for other ops (for `ConstantFolding`)."""
    def flops(op, name: str) -> tuple[float, bool] | None:
        if name in ("dot_general", "dot"):
            return dot_stats(op, tensor)[0], evaluator_library_dot(op, name, tensor)
        if name == "convolution":
            return conv_stats(op, tensor)[0], False
        return None

    return flops
