"""The corpus's families build the programs they are named for: the ops each one is about
(gathers, scatters, convolution layouts, loops per step), counted on small instances."""

from __future__ import annotations

import collections
import re

import jax
import pytest
from corpus_programs import lower_program, program_features

from costmodel.training import corpus


def test_lookup_tables_are_embedded_and_gathered():
    embed = program_features("lookup_table", size=16384, count=2, mode="embed", grad=False)
    assert embed["dense_constant_bytes"] == 2 * 16384 * 4
    assert embed["op_gather"] == 2
    interp = program_features("lookup_table", size=1024, count=4, mode="interp", grad=False)
    # a sorted grid and its values per table
    assert interp["dense_constant_bytes"] == 4 * 2 * 1024 * 4


def test_experts_switch_is_a_select_under_vmap_and_a_case_in_a_scan():
    vmapped = program_features("experts", branches=4, width=16, mode="vmap", grad=False)
    scanned = program_features("experts", branches=4, width=16, mode="scan", grad=False)
    assert vmapped["case_count"] == 0 and vmapped["op_dot_general"] == 4 * 2
    assert scanned["case_count"] == 1 and scanned["while_count"] == 1


def test_gnn_aggregates_with_a_scatter_per_layer():
    feats = program_features("gnn", layers=3, nodes=64, aggregate="sum", grad=False)
    assert feats["op_scatter"] == 3
    assert feats["op_gather"] == 2 * 3


def test_resnet_gradient_adds_the_convolution_transposes():
    forward = program_features("resnet", blocks=2, channels=8, image=16, grad=False)
    train = program_features("resnet", blocks=2, channels=8, image=16, grad=True)
    convs = 1 + 2 * 2  # stem and two per block
    assert forward["op_convolution"] == convs
    # each conv also needs its input gradient (but the stem's) and its weight gradient
    assert train["op_convolution"] == convs + (convs - 1) + convs


def _conv_layouts(name: str, **params) -> collections.Counter:
    fn, args = corpus.build(name, params)
    text = jax.jit(fn).trace(*args).lower().as_text()
    return collections.Counter(re.findall(r"dim_numbers = (\[[^\]]*\]x\[[^\]]*\]->\[[^\]]*\])", text))


def test_wavenet_layout_decides_the_convolution_dimension_numbers():
    # the input conv and three per layer, less the last layer's unused residual conv
    convs = 1 + 3 * 3 - 1
    last = _conv_layouts("wavenet", layers=3, channels=16, layout="NWC", grad=False)
    first = _conv_layouts("wavenet", layers=3, channels=16, layout="NCW", grad=False)
    assert last == {"[b, 0, f]x[0, i, o]->[b, 0, f]": convs}
    assert first == {"[b, f, 0]x[o, i, 0]->[b, f, 0]": convs}


def test_vit_attention_batches_over_non_leading_dimensions():
    fn, args = corpus.build("vit", {"depth": 2, "width": 64, "patch": 8, "grad": False})
    text = jax.jit(fn).trace(*args).lower().as_text()
    # scores (bqhd,bkhd) and values (bhqk,bkhd) einsums, once per block
    assert text.count("batching_dims = [0, 2] x [0, 2]") == 2
    assert text.count("batching_dims = [0, 2] x [0, 1]") == 2
    assert re.findall(r"stride = \[(\d+), (\d+)\]", text) == [("8", "8")]


@pytest.mark.parametrize("matvecs", [1, 4])
def test_bcoo_products_gather_twice_and_scatter_once(matvecs):
    feats = program_features("bcoo_power", n=256, nnz_per_row=4, matvecs=matvecs, grad=False)
    products = matvecs + 1  # the iterations and the Rayleigh quotient's
    assert feats["op_scatter"] == products
    assert feats["op_gather"] == 2 * products


def test_beam_search_top_k_per_step_unrolled_and_once_in_a_scan():
    texts = {}
    for style in ("unrolled", "scan"):
        fn, args = corpus.build("beam_search", {"steps": 4, "beam": 4, "vocab": 512,
                                                "style": style})
        texts[style] = jax.jit(fn).trace(*args).lower().as_text()
    assert texts["unrolled"].count("chlo.top_k") == 4
    assert "stablehlo.while" not in texts["unrolled"]
    assert texts["scan"].count("chlo.top_k") == 1
    assert texts["scan"].count("stablehlo.while") == 1
    for text in texts.values():  # token ids per batch, beam and step
        assert "tensor<2x4x4xi32>" in text.splitlines()[1]


def test_nbody_forms_the_forces_twice_per_leapfrog_step():
    unrolled = program_features("nbody", particles=16, steps=3, style="unrolled", grad=False)
    scanned = program_features("nbody", particles=16, steps=3, style="scan", grad=False)
    assert unrolled["op_rsqrt"] == 2 * 3 and unrolled["while_count"] == 0
    assert scanned["op_rsqrt"] == 2 and scanned["while_count"] == 1


def test_kmeans_multiplies_twice_per_iteration():
    feats = program_features("kmeans", points=256, clusters=4, iterations=3, style="unrolled")
    # distances and one-hot means per iteration, and the final assignment's distances
    assert feats["op_dot_general"] == 2 * 3 + 1


@pytest.mark.parametrize("length", [4, 9])
def test_hmm_takes_a_logsumexp_per_time_step(length):
    unrolled = program_features("hmm", states=8, length=length, style="unrolled", grad=False)
    scanned = program_features("hmm", states=8, length=length, style="scan", grad=False)
    # two log-softmax normalizations and the final logsumexp besides the recursion's
    assert unrolled["op_exponential"] == (length - 1) + 3
    assert scanned["op_exponential"] == 1 + 3 and scanned["while_count"] == 1


def test_segments_scatter_three_times_per_round_and_sort_once():
    plain = program_features("segments", rounds=2, segments=16, items=4096, sort=False)
    ordered = program_features("segments", rounds=2, segments=16, items=4096, sort=True)
    assert plain["op_scatter"] == ordered["op_scatter"] == 3 * 2
    assert plain["op_sort"] == 0 and ordered["op_sort"] == 1


def test_llama_rotates_queries_and_keys_in_every_layer():
    feats = program_features("llama", layers=3, width=64, seq=32, grad=False)
    assert feats["op_sine"] == feats["op_cosine"] == 2 * 3


def test_quantized_layers_multiply_int8_into_int32():
    text = lower_program(corpus.get_family("quantized"), {"layers": 3, "width": 64, "batch": 8,
                                                   "per_channel": True}).as_text()
    dots = re.findall(r"stablehlo.dot_general .*: \((tensor<[^>]*>), (tensor<[^>]*>)\) -> "
                      r"(tensor<[^>]*>)", text)
    assert dots == [("tensor<8x64xi8>", "tensor<64x64xi8>", "tensor<8x64xi32>")] * 3


def test_mobilenet_convolves_per_channel_and_upsamples_by_input_dilation():
    text = lower_program(corpus.get_family("mobilenet"), {"blocks": 3, "channels": 16, "image": 32,
                                                   "grad": False}).as_text()
    assert text.count("feature_group_count = 16") == 3  # one depthwise conv per block
    assert text.count("lhs_dilate = [2, 2]") == 2  # the two transposed convolutions


def test_tensor_network_contracts_twice_per_site():
    feats = program_features("tensor_network", sites=5, bond=4, physical=2, grad=False)
    assert feats["op_dot_general"] == 2 * 5


def test_implicit_euler_solves_by_lu_factorization():
    feats = program_features("implicit_euler", steps=2, dim=8, newton=3, grad=False)
    assert feats.info["custom_call_targets"] == {"lapack_sgetrf_ffi": 1, "lapack_strsm_ffi": 2}


def test_vae_encoder_and_decoder_are_mlps_of_the_given_depth():
    feats = program_features("vae", layers=3, width=64, latent=8, grad=False)
    assert feats["op_dot_general"] == 2 * (3 + 1)


def test_ppo_advantages_are_a_loop_only_as_a_scan():
    scanned = program_features("ppo", layers=1, width=32, horizon=8, style="scan")
    unrolled = program_features("ppo", layers=1, width=32, horizon=8, style="unrolled")
    assert scanned["while_count"] == 1 and unrolled["while_count"] == 0
    assert unrolled["hlo_ops_inlined"] > scanned["hlo_ops_inlined"]


def test_conv3d_convolves_rank_five_volumes():
    text = lower_program(corpus.get_family("conv3d"),
                  {"blocks": 3, "channels": 8, "frames": 4, "grad": False}).as_text()
    assert text.count("stablehlo.convolution") == 3
    assert text.count("[b, 0, 1, 2, f]x[0, 1, 2, i, o]->[b, 0, 1, 2, f]") == 3
