"""A tiny corpus family for sweep tests (imported by path into measurement processes)."""

import time

import jax
import jax.numpy as jnp

from costmodel.training import corpus


def _build(n: int):
    def f(x):
        for _ in range(n):
            x = jnp.sin(x) + 1.0
        return x
    return f, (jax.ShapeDtypeStruct((8,), jnp.float32),)


if "tiny_test" not in corpus.FAMILIES:
    corpus.register(corpus.Family(
        name="tiny_test", description="n sin+add steps on an 8-vector",
        build=_build, grid=tuple({"n": n} for n in (1, 2, 3, 4))))

if "tiny_many" not in corpus.FAMILIES:  # enough programs for timing comparisons
    corpus.register(corpus.Family(
        name="tiny_many", description="n sin+add steps on an 8-vector, 12 sizes",
        build=_build, grid=tuple({"n": n} for n in range(1, 13))))


def _slow(seconds: float):
    time.sleep(seconds)  # a program that takes long to build, for time-limit tests
    return _build(1)


if "tiny_slow" not in corpus.FAMILIES:
    corpus.register(corpus.Family(
        name="tiny_slow", description="sleeps before building one sin+add step",
        build=_slow, grid=({"seconds": 60.0},)))


def _chatty(n: int):
    print("a library saying hello on stdout")  # as brax and mujoco do while building
    return _build(n)


if "tiny_chatty" not in corpus.FAMILIES:
    corpus.register(corpus.Family(
        name="tiny_chatty", description="prints to stdout, then n sin+add steps",
        build=_chatty, grid=({"n": 2},)))


def _marked(path: str, tag: str):
    with open(path, "a") as f:  # which builds a measurement process made, in order
        f.write(tag + "\n")
    return _build(1)


if "tiny_marked" not in corpus.FAMILIES:
    corpus.register(corpus.Family(
        name="tiny_marked", description="writes a tag to a file when built, one sin+add",
        build=_marked, grid=()))
