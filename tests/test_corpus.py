"""Tests for the program corpus (costmodel.training.corpus)."""

from __future__ import annotations

import collections
import inspect
import json

import jax
import numpy as np
import pytest
from corpus_programs import lower_program

from costmodel.training import corpus

# Real-program families lower through their libraries in tests/test_real_corpus.py.
FAMILY_NAMES = sorted(name for name, family in corpus.FAMILIES.items() if not family.library)


def _op_count(lowered) -> int:
    return lowered.as_text().count("stablehlo.")


def test_synthetic_corpus_is_large_enough():
    # The real-program families (tests/test_real_corpus.py) come on top of these.
    synthetic = {name: f for name, f in corpus.FAMILIES.items() if not f.library}
    assert len(synthetic) >= 50
    # constant_fold's sizes are bounded by what XLA's interpreter folds in under ~10 s
    # (~25 s for the contractions it evaluates one multiply-add at a time);
    # the calibration set is what `costmodel calibrate` times, a minute in all; a tree
    # search of 16 stages compiles in tens of seconds; a complex recurrence's gradient of
    # 256 steps took 50 s, and longer ones time out; a one-channel 7x7 stencil compiles
    # for TPU in 35 s, as a 3-D FFT of 64^3 three times does; a grid world's 48 rules
    # compile in 2-3 s, and the family's 32 programs are a few minutes of sweep
    small = {name: len(f.grid) for name, f in synthetic.items() if len(f.grid) < 50}
    assert small == {"constant_fold": 41, "calibration_set": 5, "tree_search": 20,
                     "complex_recurrence": 40, "thin_conv": 32, "spectral": 20,
                     "spectral_odd": 35, "grid_world": 32}
    assert 3085 <= sum(len(f.grid) for f in synthetic.values()) <= 3185


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_smallest_point_builds_and_lowers(name):
    family = corpus.get_family(name)
    params = family.grid[0]
    fn, args = corpus.build(name, params)
    assert isinstance(args, tuple)
    leaves = jax.tree_util.tree_leaves(args)
    assert leaves
    assert all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in leaves)
    lowered = lower_program(family, params)
    assert "func.func public @main" in lowered.as_text()


@pytest.mark.parametrize("name", FAMILY_NAMES)
def test_build_returns_a_fresh_plain_function(name):
    params = corpus.get_family(name).grid[0]
    fn1, _ = corpus.build(name, params)
    fn2, _ = corpus.build(name, params)
    assert fn1 is not fn2
    assert inspect.isfunction(fn1)  # a jitted wrapper is not a plain Python function
    assert not hasattr(fn1, "lower")


def test_grids_are_json_serialisable():
    for name, params in corpus.programs():
        assert json.loads(json.dumps(params)) == params, name


def test_programs_counts_equal_grid_sizes():
    everything = corpus.programs()
    counts = collections.Counter(name for name, _ in everything)
    assert counts == {name: len(f.grid) for name, f in corpus.FAMILIES.items()}
    assert everything == corpus.programs()  # deterministic
    # Families come in registration order, each grid in its own order.
    assert list(dict.fromkeys(name for name, _ in everything)) == list(corpus.FAMILIES)
    mlp, loop = corpus.get_family("mlp"), corpus.get_family("loop")
    picked = corpus.programs(["mlp", "loop"])
    assert picked == [("mlp", p) for p in mlp.grid] + [("loop", p) for p in loop.grid]


def test_programs_returns_copies():
    name, params = corpus.programs(["mlp"])[0]
    params["depth"] = -1
    assert corpus.get_family("mlp").grid[0]["depth"] != -1


def test_unknown_family_lists_known_names():
    with pytest.raises(corpus.UnknownFamilyError) as info:
        corpus.get_family("nope")
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "nope" in message
    for name in ("mlp", "loop", "cholesky_seed"):
        assert name in message
    with pytest.raises(corpus.UnknownFamilyError):
        corpus.build("nope", {})
    with pytest.raises(corpus.UnknownFamilyError):
        corpus.programs(["mlp", "nope"])


def test_register_rejects_duplicates_and_accepts_new():
    def build_tiny(n: int):
        def fn(x):
            return x * n

        return fn, (corpus.sds((n,)),)

    tiny = corpus.Family("test_tiny", "tiny", build_tiny, grid=[{"n": 1}, {"n": 2}])
    try:
        assert corpus.register(tiny) is tiny
        assert corpus.programs(["test_tiny"]) == [("test_tiny", {"n": 1}), ("test_tiny", {"n": 2})]
        with pytest.raises(ValueError, match="already registered"):
            corpus.register(corpus.Family("test_tiny", "again", build_tiny, grid=()))
        with pytest.raises(ValueError, match="already registered"):
            corpus.register(corpus.get_family("mlp"))
    finally:
        corpus.FAMILIES.pop("test_tiny", None)
    assert isinstance(tiny.grid, tuple)


def test_family_rejects_non_json_grid_values():
    with pytest.raises(ValueError):
        corpus.Family("bad", "bad", lambda n: None, grid=({"n": np.int64(3)},))


def test_seed_families():
    chol = corpus.get_family("cholesky_seed")
    assert chol.x64 and "seed" in chol.tags
    assert "seed" in corpus.get_family("scan_seed").tags
    assert {"nbatch": 16, "nobs": 256, "ngp": 64, "grad": True} in chol.grid
    assert {"length": 80, "width": 2, "mode": "grad"} in corpus.get_family("scan_seed").grid
    text = lower_program(chol, {"nbatch": 16, "nobs": 256, "ngp": 64, "grad": True}).as_text()
    assert "tensor<16x128xf64>" in text
    assert "tensor<256x128xf64>" in text  # the captured design matrix


def test_complex_recurrences_grow_in_complex_ops_with_their_steps():
    """XLA:CPU compiles complex elementwise ops many times slower than real ones; the
    family's programs are complex64 through and through, and their ops grow with steps."""
    family = corpus.get_family("complex_recurrence")
    assert len(family.grid) == 40
    for kind in ("elementwise", "layered"):
        texts = {n: lower_program(family, {"steps": n, "width": 16, "kind": kind, "grad": False}
                           ).as_text() for n in (4, 16)}
        assert "complex<f32>" in texts[4]
        # elementwise: multiply, exp, multiply, add, abs, add, divide and the step's slice
        # and reshape (and converts); layered: a few more, with the matmul
        per_step = (texts[16].count("stablehlo.") - texts[4].count("stablehlo.")) / 12
        assert per_step == (12 if kind == "elementwise" else 13)
        if kind == "layered":
            assert texts[16].count("stablehlo.dot_general") == 16
    grad = lower_program(family, {"steps": 4, "width": 16, "kind": "elementwise", "grad": True})
    assert grad.as_text().count("stablehlo.") > texts[4].count("stablehlo.")
    with pytest.raises(ValueError, match="kind"):
        corpus.build("complex_recurrence", {"steps": 1, "width": 4, "kind": "scan", "grad": False})


def _loop(style: str, steps: int, **extra):
    params = {"style": style, "steps": steps, "body": 2, "width": 16, "unroll": 1, **extra}
    return lower_program(corpus.get_family("loop"), params)


def test_unrolled_loop_op_count_is_linear_in_steps():
    texts = {n: _loop("unrolled", n).as_text() for n in (1, 2, 10)}
    one, two, ten = (texts[n].count("stablehlo.") for n in (1, 2, 10))
    body = two - one
    overhead = one - body
    # Closed form: a step is body=2 stages of one dot_general and one tanh each.
    assert body == 4
    for op in ("stablehlo.dot_general", "stablehlo.tanh"):
        assert texts[1].count(op) == 2
        assert texts[10].count(op) == 20
    assert ten == overhead + 10 * body


@pytest.mark.parametrize("style", ["scan", "fori"])
def test_rolled_loops_have_a_while_and_constant_size(style):
    text10 = _loop(style, 10).as_text()
    assert "stablehlo.while" in text10
    assert _op_count(_loop(style, 1000)) == text10.count("stablehlo.")
    assert "stablehlo.while" not in _loop("unrolled", 10).as_text()


def test_loop_styles_grid_share_steps():
    grid = corpus.get_family("loop").grid
    steps = {s: {p["steps"] for p in grid if p["style"] == s} for s in corpus.LOOP_STYLES}
    assert steps["unrolled"] == steps["scan"] == steps["fori"]
    assert {p["unroll"] for p in grid if p["style"] == "scan"} > {1}


def test_bad_knob_value_raises():
    with pytest.raises(ValueError, match="style"):
        corpus.build("loop", {"style": "recursive", "steps": 1, "body": 1, "width": 4})


@pytest.mark.parametrize("name", ["lstm", "beam_search", "ode_rk4", "nbody", "kmeans", "hmm",
                                  "ppo"])
def test_a_bad_loop_style_is_refused_when_building_not_when_tracing(name):
    params = {**next(p for p in corpus.get_family(name).grid if p["style"] == "scan"),
              "style": "fori"}
    with pytest.raises(ValueError, match="style must be 'unrolled' or 'scan', got 'fori'"):
        corpus.build(name, params)


@pytest.mark.parametrize("tags, library", [
    (("real", "flax"), "flax"),            # a real-program corpus family
    (("outside", "jax-md"), "jax-md"),     # bench/evaluations/outside_programs.py: never trained on
    (("probe", "flax"), "flax"),           # bench/evaluations/failure_class_programs.py
    (("seed",), ""), (("outside",), ""), ((), ""),
])
def test_a_family_names_its_library_only_after_real_outside_or_probe(tags, library):
    family = corpus.Family("noop", "identity", lambda: (lambda x: x, ()), grid=({},), tags=tags)
    assert family.library == library


@pytest.mark.parametrize("stages, rules, selects", [(1, 3, 167), (1, 6, 277), (3, 3, 501)])
def test_tree_search_holds_its_loops_once_per_stage(stages, rules, selects):
    """Each stage is its own search: the simulation loop, the descent, the playout and the
    backup, three deep, and the loops random numbers bring. Under `vmap` the move rules'
    switch and the game-over cond take a batched index: every rule is computed and
    selected (37 selects a rule)."""
    from costmodel.features import extract

    fn, args = corpus.build("tree_search", {"batch": 4, "board": 3, "simulations": 4,
                                             "depth": 2, "rollout": 3, "rules": rules,
                                             "stages": stages})
    feats = extract(fn, *args)
    assert (feats["while_count"], feats["while_max_depth"]) == (12 * stages, 3)
    assert (feats["case_count"], feats["op_select"]) == (0, selects)


def test_a_benchs_builders_register_one_family_each_with_its_grid_and_library():
    from costmodel.training.corpus.registry import FAMILIES, register_builders

    def tanh_chain(n: int):
        """tanh n times
        (more text)"""
        return (lambda x: [x := jax.numpy.tanh(x) for _ in range(n)][-1]), (corpus.sds((8,)),)

    def square(width: int):
        """x squared"""
        return (lambda x: x * x), (corpus.sds((width,)),)

    try:
        chain, sq = register_builders(
            [(tanh_chain, {"n": 2}), (square, {"width": 4}), (tanh_chain, {"n": 5})],
            "probe", {"tanh_chain": "jax", "square": "jax.numpy"})
        assert (chain.name, chain.description, chain.library) == (
            "probe_tanh_chain", "tanh n times", "jax")
        assert list(chain.grid) == [{"n": 2}, {"n": 5}] and list(sq.grid) == [{"width": 4}]
        assert FAMILIES["probe_square"] is sq and sq.library == "jax.numpy"
    finally:
        FAMILIES.pop("probe_tanh_chain", None)
        FAMILIES.pop("probe_square", None)


@pytest.mark.parametrize("rules, rollout, selects, of_one_value, loops", [
    (0, 0, 99, 34, 0), (8, 0, 161, 65, 0), (8, 16, 184, 79, 5)])
def test_a_grid_world_step_is_a_batched_switch_of_selects(rules, rollout, selects,
                                                          of_one_value, loops):
    """Under `vmap` the switch over moves and each rule's cond select every leaf of the
    state; a third or more of the selects pick one value on both sides (a leaf the branch
    left alone), what the outside suites' grid worlds hold and the corpus did not."""
    import re

    from costmodel.features import extract

    fn, args = corpus.build("grid_world", {"batch": 4, "size": 5, "actions": 6,
                                           "rules": rules, "rollout": rollout})
    text = jax.jit(fn).trace(*args).lower().as_text()
    found = re.findall(r"stablehlo.select %([\w#.]+), %([\w#.]+), %([\w#.]+)", text)
    assert sum(a == b for _, a, b in found) == of_one_value
    feats = extract(fn, *args)
    assert (feats["op_select"], feats["while_count"]) == (selects, loops)
