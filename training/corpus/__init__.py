"""Corpus of parameterised JAX programs whose compile time the sweep measures.

Each :class:`Family` builds ``(fn, args)`` from a few size knobs; ``fn`` is a fresh,
un-jitted closure and ``args`` a tuple of ``jax.ShapeDtypeStruct`` pytrees, so
``jax.jit(fn).trace(*args).lower()`` needs no real inputs and is never a cache hit.
Importing this package registers the built-in families; list them with
:func:`programs` or :data:`FAMILIES`.

Register your own family the same way the built-in ones do::

    import jax
    from costmodel.training.corpus import Family, build, param_grid, register, sds

    def build_softmax_chain(n: int, width: int):
        def fn(x):  # defined inside build: a new function object every call
            for _ in range(n):
                x = jax.nn.softmax(x @ x.T) @ x
            return x
        return fn, (sds((width, width)),)

    register(Family("softmax_chain", "n chained softmax attentions", build_softmax_chain,
                    grid=param_grid(n=(1, 4, 16), width=(32, 256))))

    fn, args = build("softmax_chain", {"n": 4, "width": 32})
"""

from . import applied as _applied  # noqa: F401
from . import calibration as _calibration  # noqa: F401
from . import control as _control  # noqa: F401
from . import conv as _conv  # noqa: F401  (importing registers the families)
from . import dense as _dense  # noqa: F401
from . import envs as _envs  # noqa: F401
from . import games as _games  # noqa: F401
from . import library as _library  # noqa: F401
from . import linalg as _linalg  # noqa: F401
from . import loops as _loops  # noqa: F401
from . import misc as _misc  # noqa: F401
from . import modern as _modern  # noqa: F401
from . import numeric as _numeric  # noqa: F401
from . import real_blackjax as _real_blackjax  # noqa: F401  (real_*: only installed libraries)
from . import real_diffrax as _real_diffrax  # noqa: F401
from . import real_equinox as _real_equinox  # noqa: F401
from . import real_example_libraries as _real_example_libraries  # noqa: F401
from . import real_flax_linen as _real_flax_linen  # noqa: F401
from . import real_flax_nnx as _real_flax_nnx  # noqa: F401
from . import real_flowjax as _real_flowjax  # noqa: F401
from . import real_haiku as _real_haiku  # noqa: F401
from . import real_jaxley as _real_jaxley  # noqa: F401
from . import real_jaxsim as _real_jaxsim  # noqa: F401
from . import real_keras as _real_keras  # noqa: F401
from . import real_lineax as _real_lineax  # noqa: F401
from . import real_netket as _real_netket  # noqa: F401
from . import real_numpyro as _real_numpyro  # noqa: F401
from . import real_optax as _real_optax  # noqa: F401
from . import real_optimistix as _real_optimistix  # noqa: F401
from . import real_pennylane as _real_pennylane  # noqa: F401
from . import real_penzai as _real_penzai  # noqa: F401
from . import real_sympy2jax as _real_sympy2jax  # noqa: F401
from . import science as _science  # noqa: F401
from . import spectral as _spectral  # noqa: F401
from . import stencils as _stencils  # noqa: F401
from .loops import LOOP_STYLES
from .registry import (
    FAMILIES,
    Family,
    UnknownFamilyError,
    build,
    get_family,
    lower,
    param_grid,
    programs,
    register,
    sds,
)

__all__ = [
    "FAMILIES",
    "LOOP_STYLES",
    "Family",
    "UnknownFamilyError",
    "build",
    "get_family",
    "lower",
    "param_grid",
    "programs",
    "register",
    "sds",
]
