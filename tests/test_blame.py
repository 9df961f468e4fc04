"""`costmodel.blame`: the prediction divided among the user's source lines."""

import inspect
import json
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import costmodel
from costmodel import cli
from costmodel._blame import FIXED, SHARED, without_regions
from costmodel.features.regions import region_tallies

X = jax.ShapeDtypeStruct((32, 64), jnp.float32)
W = jax.ShapeDtypeStruct((64, 64), jnp.float32)
TABLE = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)


def _line(fn, text: str) -> str:
    """`file.py:LINE` of the line of `fn` holding `text`."""
    source, first = inspect.getsourcelines(fn)
    offset = next(i for i, line in enumerate(source) if text in line)
    return f"test_blame.py:{first + offset}"


def hidden_loop(x, w):
    a = jnp.sum(jnp.sin(x)) * 2.0
    b = jnp.max(jnp.cos(x))
    for _ in range(300):
        x = jnp.tanh(x @ w) + 0.1 * x
    return a + b + jnp.sum(x)


def hidden_constant(x):
    a = jnp.sum(jnp.sin(x))
    folded = jnp.asarray(TABLE) @ jnp.asarray(TABLE)
    return a + jnp.sum(folded)


def library_calls(x, w):
    h = jax.nn.gelu(x @ w)
    return jnp.sum(jax.nn.softmax(h, axis=-1))


def costly_kinds(x):
    a = jnp.sum(jnp.tanh(jnp.exp(x)))
    y = x
    for _ in range(30):
        y = y + x
    return a + jnp.sum(y)


def _tallies(f, *args):
    return region_tallies(jax.jit(f).lower(*args).compiler_ir("stablehlo"))


def _predicted(features, values: dict) -> float:
    values = {**features.values, **values}
    return costmodel.predict_features(replace(features, values=values)).compile_seconds


def test_a_regions_part_is_what_the_model_predicts_removing_it_saves():
    features = costmodel.lower(costly_kinds, X).features(jaxpr=False)
    tallies = _tallies(costly_kinds, X)
    nothing, *without = without_regions(features.model_inputs(), list(tallies.values()))
    whole = costmodel.predict_features(features).compile_seconds
    blame = costmodel.blame(costly_kinds, X)
    seconds = {r.source: r.seconds for r in blame.regions}
    for source, values in zip(tallies, without):
        saved = whole - _predicted(features, values)
        assert seconds[source] == pytest.approx(max(saved, 0.0), rel=1e-6, abs=1e-12)
    assert seconds[FIXED] == pytest.approx(_predicted(features, nothing), rel=1e-6)
    assert seconds[SHARED] > 0  # the model's cost per op falls as the program grows
    assert sum(seconds.values()) == pytest.approx(blame.compile_seconds, rel=1e-9)


def test_a_region_is_charged_what_its_removal_saves_not_its_share_of_ops(monkeypatch):
    from costmodel import _blame

    names = list(_tallies(costly_kinds, X))
    costly, adds = _line(costly_kinds, "jnp.tanh"), _line(costly_kinds, "y = y + x")
    saves = {costly: 0.5, adds: 0.2}  # the 5-op line saves more than the 30 adds

    def model(artifact, inputs, tallies):
        without = [1.0 - saves.get(name, 0.0) for name in names]
        return {t: np.array([1.0, 0.1, *without]) for t in ("compile_seconds", "peak_rss_bytes")}

    monkeypatch.setattr(_blame, "counterfactuals", model)
    blame = costmodel.blame(costly_kinds, X)
    scale = blame.compile_seconds / 1.0  # this machine's calibration scales every row
    parts = {r.source: (r.seconds / scale, r.ops) for r in blame.regions}
    assert parts[costly] == (pytest.approx(0.5), 5) and parts[adds] == (pytest.approx(0.2), 30)
    assert parts[FIXED][0] == pytest.approx(0.1) and parts[SHARED][0] == pytest.approx(0.2)


def test_where_no_regions_removal_changes_the_prediction_the_baseline_is_divided(monkeypatch):
    from costmodel import _blame

    def flat(artifact, inputs, tallies):  # every row predicts as the whole program
        return {t: np.full(2 + len(tallies), 1.0) for t in ("compile_seconds", "peak_rss_bytes")}

    monkeypatch.setattr(_blame, "counterfactuals", flat)
    blame = costmodel.blame(hidden_loop, X, W)
    assert SHARED not in {r.source for r in blame.regions}
    assert sum(r.seconds for r in blame.regions) == pytest.approx(blame.compile_seconds)
    top = blame.regions[0]  # by its marginal cost under the size law
    assert top.source == _line(hidden_loop, "jnp.tanh(x @ w)") and top.share > 0.8


@jax.jit
def twice(x):
    return jnp.sin(x) @ x.T


def many_kinds(x, c):
    a = twice(x) + twice(x * 2)
    b, ys = lax.scan(lambda carry, _: (jnp.tanh(carry @ carry), carry.sum()), x, None, length=7)
    d = lax.cond(c > 0, jnp.cos, lambda v: v * 3, x)
    e = lax.fori_loop(0, 5, lambda i, v: v + jnp.exp(v), x)
    f = jnp.linalg.cholesky(x @ x.T + 8 * jnp.eye(8))
    return a.sum() + b.sum() + ys.sum() + d.sum() + e.sum() + f.sum()


def test_the_regions_counts_add_up_to_the_programs_model_inputs():
    args = (jax.ShapeDtypeStruct((8, 8), jnp.float32), jax.ShapeDtypeStruct((), jnp.float32))
    inputs = costmodel.lower(many_kinds, *args).features(jaxpr=False).model_inputs()
    tallies = _tallies(many_kinds, *args)
    names = {name for tally in tallies.values() for name in tally.counts}
    assert {"hlo_ops", "hlo_ops_trip_weighted", "op_sine", "cat_control_flow", "dot_flops",
            "while_total_iterations", "case_count", "custom_call_linalg"} <= names
    totals = {name: sum(t.counts.get(name, 0.0) for t in tallies.values()) for name in names}
    assert totals == {name: inputs[name] for name in names}
    # a function called twice: once in the module's count, twice inlined
    assert inputs["hlo_ops"] < inputs["hlo_ops_inlined"] < inputs["hlo_ops_trip_weighted"]


def planted(x, plant: bool):
    s = jnp.sum(jnp.sin(x))
    if plant:
        x = jnp.tanh(x @ x.T) @ x + jnp.sum(x[:, :, None] * x[:, None, :], axis=-1)
    return s + jnp.sum(x)


def test_a_program_less_a_regions_tally_is_the_program_lowered_without_it():
    whole = costmodel.lower(planted, X, plant=True).features(jaxpr=False).model_inputs()
    alone = costmodel.lower(planted, X, plant=False).features(jaxpr=False).model_inputs()
    tallies = _tallies(lambda x: planted(x, True), X)
    line = _line(planted, "jnp.tanh")
    tally = tallies[line]
    assert tally.counts["op_dot_general"] == 2 and tally.counts["dot_flops"] > 0
    assert tally.largest["tensor_max_rank"] == 3 > alone["tensor_max_rank"]
    without = without_regions(whole, list(tallies.values()))[1 + list(tallies).index(line)]
    exact = [*tally.counts, *tally.largest, "distinct_shapes"]
    assert {name: without[name] for name in exact} == {name: alone[name] for name in exact}


def test_regions_sum_to_the_prediction():
    blame = costmodel.blame(hidden_loop, X, W)
    assert sum(r.seconds for r in blame.regions) == pytest.approx(blame.compile_seconds)
    assert sum(r.share for r in blame.regions) == pytest.approx(1.0)
    assert sum(r.peak_memory_bytes for r in blame.regions) == pytest.approx(
        blame.peak_memory_bytes)
    assert blame.compile_seconds == costmodel.predict(hidden_loop, X, W).compile_seconds


def test_the_unrolled_loop_is_blamed_first_by_its_line():
    regions = costmodel.blame(hidden_loop, X, W).regions
    top = regions[0]
    assert top.source == _line(hidden_loop, "jnp.tanh(x @ w)")
    # over half (its 300 steps are the same few kernels, which XLA:CPU compiles once, and
    # the fixed cost of any compile is most of the rest; 65%), every other line of it
    # 3.3% at most
    assert top.name == "hidden_loop" and top.share > 0.55
    assert all(r.share < 0.04 for r in regions[1:] if r.source.startswith("test_blame.py"))
    assert top.ops >= 300 * 4


def test_a_folded_captured_constant_is_blamed_on_the_line_that_uses_it():
    regions = costmodel.blame(hidden_constant, X).regions
    assert regions[0].source == _line(hidden_constant, "jnp.asarray(TABLE) @")
    assert regions[0].share > 0.4  # the folded product; summing it folds too


def test_library_code_is_charged_to_the_users_line_that_called_it():
    sources = {r.source for r in costmodel.blame(library_calls, X, W).regions}
    assert _line(library_calls, "jax.nn.gelu") in sources
    assert _line(library_calls, "jax.nn.softmax") in sources
    assert not any("jax" in s.split(":")[0] for s in sources)


def test_cli_blame_prints_the_top_regions_and_json(tmp_path, monkeypatch, capsys):
    program = tmp_path / "prog.py"
    program.write_text("import jax.numpy as jnp\n\n"
                       "def step(x, w):\n"
                       "    s = jnp.sum(jnp.sin(x))\n"
                       "    for _ in range(100):\n"
                       "        x = jnp.tanh(x @ w)\n"
                       "    return s + jnp.sum(x)\n")
    monkeypatch.chdir(tmp_path)
    args = ["prog.py:step", "--arg", "f32[32,64]", "--arg", "f32[64,64]"]
    # a 79 ms compile of 100 steps that are one kernel: the fixed cost of any compile
    # (39%) and what the loop shares with the rest (32%) come before the loop's line (24%)
    assert cli.main(["blame", *args, "--top", "3"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 5
    assert {row.split("  ")[0] for row in table[2:4]} == {
        "(fixed cost of any compile)", "(shared by several regions)"}
    assert table[4].startswith("prog.py:6")
    assert cli.main(["blame", *args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lines = [r["source"] for r in out["regions"] if r["source"].startswith("prog.py")]
    # the loop's line first; the two one-line reductions take 1-4% each
    assert lines == ["prog.py:6", "prog.py:4", "prog.py:7"]
    assert sum(r["seconds"] for r in out["regions"]) == pytest.approx(out["compile_seconds"])


def helper(x, w):
    for _ in range(40):
        x = jnp.tanh(x @ w)
    return x


def two_callers(x, w):
    a = helper(x, w)
    b = helper(x * 2, w)
    return jnp.sum(a + b)


def test_the_call_tree_nests_a_helper_under_each_caller():
    blame = costmodel.blame(two_callers, X, W)
    tree = blame.tree
    assert tree.seconds == pytest.approx(blame.compile_seconds)
    assert sum(c.seconds for c in tree.children.values()) == pytest.approx(tree.seconds)
    callers = {c.source: c for c in tree.children.values()}
    first, second = callers[_line(two_callers, "a = helper")], callers[_line(two_callers, "b =")]
    loop = _line(helper, "jnp.tanh")
    assert [c.source for c in first.ordered()][0] == loop
    assert [c.source for c in second.ordered()][0] == loop
    assert first.seconds == pytest.approx(second.seconds, rel=0.1)


def test_trace_events_nest_inside_their_parents():
    events = costmodel.blame(two_callers, X, W).trace()["traceEvents"]
    assert events[0]["name"] == "program" and all(e["ph"] == "X" for e in events)
    end = events[0]["ts"] + events[0]["dur"]
    assert all(0 <= e["ts"] and e["ts"] + e["dur"] <= end * (1 + 1e-9) for e in events)
    depth = {e["args"]["depth"] for e in events}
    assert max(depth) >= 2  # program -> caller line -> helper's loop


def test_the_icicle_page_draws_one_rectangle_per_visible_node():
    page = costmodel.blame(two_callers, X, W).html()
    assert page.startswith("<!doctype html>") and "<script" not in page
    assert page.count("<rect") >= 4 and "helper" in page
    assert 'id=\'icicle\'' in page


def test_the_text_table_cuts_no_file_line_and_no_function_name():
    def step_whose_name_runs_past_any_column_width(x, w):
        return jnp.sum(helper(x, w))

    blame = costmodel.blame(step_whose_name_runs_past_any_column_width, X, W)
    lines = str(blame).splitlines()
    assert lines[1].split() == ["source", "seconds", "share", "memory", "function"]
    rows = {line.split()[0]: line for line in lines[2:]}
    loop = rows[_line(helper, "jnp.tanh")]
    assert loop.endswith("  helper")
    caller = rows[_line(step_whose_name_runs_past_any_column_width, "helper(x, w)")]
    assert caller.endswith("  test_the_text_table_cuts_no_file_line_and_no_function_name."
                           "<locals>.step_whose_name_runs_past_any_column_width")
