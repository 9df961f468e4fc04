"""Feature extraction from jaxprs and StableHLO, shared by training and prediction."""

from .environment import KNOWN_BACKENDS as KNOWN_BACKENDS
from .environment import KNOWN_TARGETS as KNOWN_TARGETS
from .environment import Placement as Placement
from .environment import UnknownTargetError as UnknownTargetError
from .environment import normalize as normalize_target
from .extract import extract as extract
from .extract import from_lowered as from_lowered
from .extract import from_stablehlo as from_stablehlo
from .extract import lower as lower
from .schema import ALL_FEATURES as ALL_FEATURES
from .schema import JAXPR_FEATURES as JAXPR_FEATURES
from .schema import MODEL_FEATURES as MODEL_FEATURES
from .schema import SCHEMA_VERSION as SCHEMA_VERSION
from .schema import STABLEHLO_FEATURES as STABLEHLO_FEATURES
from .schema import Features as Features
from .text_guard import MAX_NESTING as MAX_NESTING
from .text_guard import RefusedText as RefusedText
from .text_guard import StableHLOParseError as StableHLOParseError

__all__ = [
    "ALL_FEATURES", "JAXPR_FEATURES", "KNOWN_BACKENDS", "KNOWN_TARGETS", "MAX_NESTING",
    "MODEL_FEATURES", "Placement", "SCHEMA_VERSION", "STABLEHLO_FEATURES", "Features",
    "RefusedText",
    "StableHLOParseError",
    "UnknownTargetError", "extract", "from_lowered", "from_stablehlo", "lower",
    "normalize_target",
]
