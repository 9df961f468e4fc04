"""Penzai programs as its users write them: its transformer variants built from configs,
parameters unbound (``pz.unbind_params``) so the model becomes a pure function of frozen
values, named-axis inputs (``pz.nx``).

A Llama-like decoder's Adam train step (SwiGLU or GeGLU, blocks unrolled or as Penzai's
layer stack) and GPT-NeoX forward logits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .real_support import optax_step, real_family, uses
from .registry import param_grid, sds


def _unbound(build_model):
    """``(unbound_model, frozen_param_shapes)``. The model is built concretely (it holds
    constant arrays of its own, which must stay real); only the parameters become shapes."""
    from penzai import pz

    unbound, params = pz.unbind_params(build_model(), freeze=True)
    return unbound, jax.tree.map(lambda a: sds(a.shape, a.dtype), params)


def _logits(unbound, params, tokens):
    from penzai import pz

    model = pz.bind_variables(unbound, params)
    out = model(pz.nx.wrap(tokens).tag("batch", "seq"),
                token_positions=pz.nx.arange("seq", tokens.shape[1]))
    return out.untag("batch", "seq", "vocabulary").unwrap()


def build_penzai_llamalike_step(blocks: int, mlp: str, stacked: bool, d: int = 128,
                                seq: int = 64, batch: int = 4, vocab: int = 512):
    """Adam step of a Llama-like decoder (grouped-query attention, RoPE, RMSNorm) on
    next-token cross-entropy."""
    import optax
    from penzai.models.transformer.variants import llamalike_common as ll

    config = ll.LlamalikeTransformerConfig(
        num_kv_heads=2, query_head_multiplier=2, embedding_dim=d, projection_dim=32,
        mlp_hidden_dim=3 * d, num_decoder_blocks=blocks, vocab_size=vocab, mlp_variant=mlp,
        tie_embedder_and_logits=True, use_layer_stack=stacked)
    unbound, params = _unbound(lambda: ll.build_llamalike_transformer(config, jax.random.key(0)))
    optimizer = optax.adam(3e-4)

    def loss(params, tokens):
        logits = _logits(unbound, params, tokens[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    step = optax_step(loss, optimizer)

    def fn(params, opt_state, tokens):
        return step(params, opt_state, tokens)

    return fn, (params, jax.eval_shape(optimizer.init, params), sds((batch, seq + 1), np.int32))


def build_penzai_neox_logits(blocks: int, d: int, seq: int = 128, batch: int = 4, vocab: int = 1024):
    """Forward logits of a GPT-NeoX transformer (parallel attention and MLP, partial
    RoPE), softmaxed to next-token probabilities."""
    from penzai.models.transformer.variants import gpt_neox

    config = gpt_neox.GPTNeoXTransformerConfig(
        num_attention_heads=max(d // 64, 1), embedding_dim=d, projection_dim=64, mlp_hidden_dim=4 * d,
        num_decoder_blocks=blocks, vocab_size=vocab, activation_fn="gelu_exact", rope_subset_size=16,
        rope_wavelength=10_000.0, layernorm_epsilon=1e-5, parameter_dtype=jnp.float32,
        activation_dtype=jnp.float32)
    unbound, params = _unbound(lambda: gpt_neox.build_gpt_neox_transformer(config, jax.random.key(0)))

    def fn(params, tokens):
        return jax.nn.softmax(_logits(unbound, params, tokens), axis=-1)

    return fn, (params, sds((batch, seq), np.int32))


if uses("penzai", "penzai", "optax"):
    real_family("penzai", "penzai_llamalike_step",
                "Penzai Llama-like decoder (SwiGLU/GeGLU, unrolled or layer stack), Adam step.",
                build_penzai_llamalike_step,
                param_grid(blocks=(1, 2, 4, 8, 12, 16, 24, 32, 48, 64), mlp=("swiglu", "geglu_approx"),
                           stacked=(False, True),
                           where=lambda p: not p["stacked"] or p["blocks"] in (4, 32)))
    real_family("penzai", "penzai_neox_logits",
                "Penzai GPT-NeoX forward next-token probabilities.",
                build_penzai_neox_logits,
                param_grid(blocks=(1, 2, 4, 8, 16, 32, 48), d=(128, 256)))
