"""Keras 3 programs on its JAX backend, as its guide to custom JAX training loops writes
them: ``model.stateless_call`` for the forward pass and ``optimizer.stateless_apply`` for
the update, over the model's trainable, non-trainable and optimizer variables.

A functional transformer classifier (``MultiHeadAttention``, ``LayerNormalization``), a
CNN with ``BatchNormalization`` and ``Dropout``, and stacked ``LSTM`` layers (a scan, or
``unroll=True``). Keras builds concrete weights; the step's arguments are their shapes.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from .real_support import real_family, uses
from .registry import param_grid, sds

os.environ.setdefault("KERAS_BACKEND", "jax")  # must precede the first ``import keras``


def _keras():
    import keras

    if keras.backend.backend() != "jax":
        raise RuntimeError(f"keras was imported with the {keras.backend.backend()} backend")
    return keras


def _stateless_step(model, optimizer, loss):
    """``(fn, args_state)``: one training step of a built keras ``model`` as a pure JAX
    function of ``(trainable, non_trainable, optimizer_vars), x, y``."""
    optimizer.build(model.trainable_variables)

    def compute_loss(trainable, non_trainable, x, y):
        pred, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss(y, pred), non_trainable

    grad = jax.value_and_grad(compute_loss, has_aux=True)

    def fn(state, x, y):
        trainable, non_trainable, opt_vars = state
        (value, non_trainable), grads = grad(trainable, non_trainable, x, y)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return value, (trainable, non_trainable, opt_vars)

    def shapes(variables):
        return [sds(v.shape, v.dtype) for v in variables]

    state = (shapes(model.trainable_variables), shapes(model.non_trainable_variables),
             shapes(optimizer.variables))
    return fn, state


def build_keras_transformer_step(layers: int, d: int, seq: int = 64, batch: int = 8,
                                 vocab: int = 1000):
    """AdamW step of a functional post-norm transformer text classifier."""
    keras = _keras()
    L = keras.layers
    tokens = keras.Input((seq,), dtype="int32")
    x = L.Embedding(vocab, d)(tokens)
    for _ in range(layers):
        attn = L.MultiHeadAttention(num_heads=max(d // 64, 1), key_dim=64)(x, x)
        x = L.LayerNormalization()(x + L.Dropout(0.1)(attn))
        h = L.Dense(d)(L.Dense(4 * d, activation="gelu")(x))
        x = L.LayerNormalization()(x + h)
    out = L.Dense(2)(L.GlobalAveragePooling1D()(x))
    model = keras.Model(tokens, out)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    fn, state = _stateless_step(model, keras.optimizers.AdamW(1e-4), loss)
    return fn, (state, sds((batch, seq), np.int32), sds((batch,), np.int32))


def build_keras_cnn_step(stages: int, channels: int, image: int = 32, batch: int = 16):
    """Adam step of a Sequential CNN: per stage Conv2D, BatchNormalization, relu and
    max pooling, then Dropout and a Dense head."""
    keras = _keras()
    L = keras.layers
    stack = [keras.Input((image, image, 3))]
    for s in range(stages):
        stack += [L.Conv2D(channels * 2 ** min(s, 3), 3, padding="same"), L.BatchNormalization(),
                  L.Activation("relu")]
        if image >> (s + 1) >= 1:
            stack.append(L.MaxPooling2D(2, padding="same"))
    stack += [L.GlobalAveragePooling2D(), L.Dropout(0.2), L.Dense(10)]
    model = keras.Sequential(stack)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    fn, state = _stateless_step(model, keras.optimizers.Adam(1e-3), loss)
    return fn, (state, sds((batch, image, image, 3)), sds((batch,), np.int32))


def build_keras_lstm_step(steps: int, stacked: int, unroll: bool, units: int = 64,
                          batch: int = 16):
    """RMSprop step of stacked ``keras.layers.LSTM`` regressing a sequence summary."""
    keras = _keras()
    L = keras.layers
    stack = [keras.Input((steps, 8))]
    stack += [L.LSTM(units, return_sequences=i < stacked - 1, unroll=unroll) for i in range(stacked)]
    stack.append(L.Dense(1))
    model = keras.Sequential(stack)
    fn, state = _stateless_step(model, keras.optimizers.RMSprop(1e-3), keras.losses.MeanSquaredError())
    return fn, (state, sds((batch, steps, 8)), sds((batch, 1)))


if uses("keras", "keras"):
    real_family("keras", "keras_transformer_step",
                "Keras (JAX backend) functional transformer classifier, AdamW stateless step.",
                build_keras_transformer_step,
                param_grid(layers=(1, 2, 4, 8, 12, 16, 24, 32, 48, 64), d=(128, 256)))
    real_family("keras", "keras_cnn_step",
                "Keras Sequential CNN with BatchNormalization and Dropout, Adam stateless step.",
                build_keras_cnn_step,
                param_grid(stages=(1, 2, 3, 4, 5), channels=(16, 64)))
    real_family("keras", "keras_lstm_step",
                "Stacked keras LSTM layers (scan or unroll=True), RMSprop stateless step.",
                build_keras_lstm_step,
                param_grid(steps=(8, 32, 64, 128), stacked=(1, 2, 3), unroll=(False, True),
                           # unrolled 128 steps: an unrolled Haiku GRU of that length took 210 s
                           where=lambda p: not p["unroll"] or p["steps"] * p["stacked"] <= 128
                           and p["steps"] <= 64))
