"""StableHLO features from the MLIR module (never regex over text): parse, walk each function
once with one handler per op kind, combine the tallies along calls, assemble the features."""

from ..text_guard import StableHLOParseError as StableHLOParseError
from .assemble import stablehlo_features as stablehlo_features
from .parse import _context as _context
from .parse import parse_module as parse_module
from .tensors import element_bytes as element_bytes
