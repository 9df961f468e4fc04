"""costmodel: predict XLA compile time and memory of JAX programs before compiling,
and advise whether to split a jit.

Example:
    >>> import costmodel
    >>> costmodel.predict(f, x)          # a Prediction, never compiling
    >>> print(costmodel.lower(f, x).advise(budget_seconds=5))
"""

from ._advise import Advice as Advice
from ._advise import Alternative as Alternative
from ._advise import advise_features as advise_features
from ._blame import Blame as Blame
from ._blame import Region as Region
from ._blame import blame_stablehlo as blame_stablehlo
from ._explain import Effect as Effect
from ._guard import CompileBudgetExceeded as CompileBudgetExceeded
from ._guard import CompileBudgetWarning as CompileBudgetWarning
from ._guard import CompileGuardWarning as CompileGuardWarning
from ._guard import jit as jit
from ._predict import Prediction as Prediction
from ._predict import predict_features as predict_features
from ._predict import predict_stablehlo as predict_stablehlo
from ._record import record as record
from ._stage import Stage as Stage
from ._stage import advise as advise
from ._stage import blame as blame
from ._stage import lower as lower
from ._stage import predict as predict
from ._stage import profile as profile

__version__ = "0.1.0"

__all__ = [
    "Advice", "Alternative", "Blame", "CompileBudgetExceeded", "CompileBudgetWarning",
    "CompileGuardWarning", "Effect", "Prediction", "Region", "Stage", "advise",
    "advise_features", "blame", "blame_stablehlo", "jit", "lower", "predict",
    "predict_features", "predict_stablehlo", "profile", "record",
]
