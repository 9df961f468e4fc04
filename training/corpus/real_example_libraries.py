"""``jax.example_libraries`` programs as their users write them: ``stax`` combinators for
the network and ``optimizers`` (``opt_init, opt_update, get_params``) for the update.

A convolutional classifier with batch norm, residual networks from ``FanOut`` /
``parallel`` / ``FanInSum`` blocks, and deep MLPs under each of the optimizers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import real_family, uses
from .registry import param_grid, sds

_OPTIMIZERS = ("sgd", "momentum", "nesterov", "adagrad", "rmsprop", "adam", "adamax")


def _optimizer(name: str):
    from jax.example_libraries import optimizers

    return {"sgd": lambda: optimizers.sgd(1e-2), "momentum": lambda: optimizers.momentum(1e-2, 0.9),
            "adagrad": lambda: optimizers.adagrad(1e-2), "rmsprop": lambda: optimizers.rmsprop(1e-3),
            "adam": lambda: optimizers.adam(1e-3), "adamax": lambda: optimizers.adamax(1e-3),
            "nesterov": lambda: optimizers.nesterov(1e-2, 0.9)}[name]()


def _stax_step(network, input_shape, optimizer: str, labels: int):
    """``(fn, (opt_state, step, x, y))`` for one classifier step of the stax ``network``
    ``(init_fun, apply_fun)`` under the named optimizer."""
    init_fun, apply_fun = network
    opt_init, opt_update, get_params = _optimizer(optimizer)
    params = jax.eval_shape(lambda: init_fun(jax.random.PRNGKey(0), input_shape)[1])
    opt_state = jax.eval_shape(opt_init, params)

    def loss(params, x, y):
        return -jnp.mean(jnp.sum(apply_fun(params, x) * jax.nn.one_hot(y, labels), axis=-1))

    def fn(opt_state, i, x, y):
        value, grads = jax.value_and_grad(loss)(get_params(opt_state), x, y)
        return value, opt_update(i, grads, opt_state)

    return fn, (opt_state, sds((), np.int32), sds(input_shape), sds(input_shape[:1], np.int32))


def build_stax_convnet_step(depth: int, channels: int, optimizer: str, image: int = 28,
                            batch: int = 32):
    """Conv, BatchNorm, Relu per layer (every other one strided), then Flatten, Dense and
    LogSoftmax."""
    from jax.example_libraries import stax

    layers = []
    for i in range(depth):
        stride = (2, 2) if i % 2 == 1 else (1, 1)
        layers += [stax.Conv(channels, (3, 3), stride, padding="SAME"), stax.BatchNorm(), stax.Relu]
    layers += [stax.Flatten, stax.Dense(10), stax.LogSoftmax]
    return _stax_step(stax.serial(*layers), (batch, image, image, 1), optimizer, 10)


def build_stax_resnet_step(blocks: int, channels: int, image: int = 32, batch: int = 16):
    """A residual network of identity blocks built with ``FanOut``/``parallel``/``FanInSum``
    (three convolutions with batch norm on the main path), momentum SGD."""
    from jax.example_libraries import stax

    def block():
        main = stax.serial(stax.Conv(channels, (1, 1)), stax.BatchNorm(), stax.Relu,
                           stax.Conv(channels, (3, 3), padding="SAME"), stax.BatchNorm(), stax.Relu,
                           stax.Conv(channels, (1, 1)), stax.BatchNorm())
        return stax.serial(stax.FanOut(2), stax.parallel(main, stax.Identity), stax.FanInSum,
                           stax.Relu)

    network = stax.serial(stax.Conv(channels, (3, 3), padding="SAME"), stax.BatchNorm(), stax.Relu,
                          *[block() for _ in range(blocks)], stax.AvgPool((image, image)),
                          stax.Flatten, stax.Dense(10), stax.LogSoftmax)
    return _stax_step(network, (batch, image, image, 3), "momentum", 10)


def build_stax_mlp_step(depth: int, width: int, optimizer: str, batch: int = 128):
    """Dense and Gelu layers, then a 10-way LogSoftmax head."""
    from jax.example_libraries import stax

    layers = [layer for _ in range(depth) for layer in (stax.Dense(width), stax.Gelu)]
    network = stax.serial(*layers, stax.Dense(10), stax.LogSoftmax)
    return _stax_step(network, (batch, 784), optimizer, 10)


if uses("jax.example_libraries", "jax.example_libraries.stax"):
    real_family("jax.example_libraries", "stax_convnet_step",
                "jax.example_libraries stax CNN with BatchNorm under optimizers.* step.",
                build_stax_convnet_step,
                param_grid(depth=(2, 4, 8, 16, 32), channels=(16, 64), optimizer=("adam", "rmsprop")))
    real_family("jax.example_libraries", "stax_resnet_step",
                "stax residual network of FanOut/parallel/FanInSum blocks, momentum step.",
                build_stax_resnet_step,
                param_grid(blocks=(1, 2, 4, 8, 16, 32, 48, 64), channels=(16, 64)))
    real_family("jax.example_libraries", "stax_mlp_step",
                "stax deep MLP under each jax.example_libraries optimizer.",
                build_stax_mlp_step,
                param_grid(depth=(2, 8, 32), width=(256,), optimizer=_OPTIMIZERS))
