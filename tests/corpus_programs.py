"""Lowering and extracting corpus programs, for the corpus tests."""

import jax

from costmodel import features as F
from costmodel.training import corpus


def lower_program(family: corpus.Family, params: dict):
    """The program lowered for the CPU, in the x64 mode its family needs (restored after)."""
    fn, args = corpus.build(family.name, params)
    with jax.enable_x64(family.x64):
        return jax.jit(fn).trace(*args).lower()


def program_features(name: str, **params):
    fn, args = corpus.build(name, params)
    return F.extract(fn, *args)
