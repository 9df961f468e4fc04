"""Re-extraction: stored rows get their program's current features, labels untouched."""

import json

import pandas as pd

from costmodel.features import extract
from costmodel.training import corpus
from costmodel.training.measure.reextract import reextract

PARAMS = {"body": 1, "steps": 3, "style": "unrolled", "unroll": 1, "width": 16}


def test_features_are_recomputed_and_unknown_families_reported():
    fn, args = corpus.get_family("loop").build(**PARAMS)
    expected = extract(fn, *args)["hlo_ops_inlined"]
    rows = pd.DataFrame([
        {"key": "a", "family": "loop", "params": json.dumps(PARAMS), "backend": "cpu",
         "target": "", "compile_seconds": 0.25, "f_hlo_ops_inlined": -1.0},
        {"key": "b", "family": "no_such_family", "params": "{}", "backend": "cpu",
         "target": "", "compile_seconds": 0.5, "f_hlo_ops_inlined": -1.0},
    ])
    fresh, dropped = reextract(rows, progress=False)
    assert list(fresh["key"]) == ["a"] and len(dropped) == 1 and dropped[0].startswith("b:")
    assert fresh.loc[0, "f_hlo_ops_inlined"] == expected == 6.0
    assert fresh.loc[0, "compile_seconds"] == 0.25
    assert "f_op_tanh" in fresh.columns  # columns the stored rows lacked are added


def test_families_a_module_registers_are_re_extracted(tmp_path):
    """A bench's programs are families its own file registers (never in this process: the
    lowering runs in a fresh one, which imports the file first)."""
    module = tmp_path / "my_programs.py"
    module.write_text(
        "import jax.numpy as jnp\n"
        "from costmodel.training.corpus.registry import Family, register, sds\n"
        "register(Family('my_tanh_chain', 'tanh n times',\n"
        "                lambda n: (lambda x: [x := jnp.tanh(x) for _ in range(n)][-1],\n"
        "                           (sds((8,)),)), [{'n': 5}]))\n")
    rows = pd.DataFrame([{"key": "a", "family": "my_tanh_chain", "params": '{"n": 5}',
                          "backend": "cpu", "target": "", "f_hlo_ops_inlined": -1.0}])
    assert reextract(rows, progress=False)[0].empty  # unknown without the module
    fresh, dropped = reextract(rows, progress=False, modules=(str(module),))
    assert dropped == [] and fresh.loc[0, "f_hlo_ops_inlined"] == 5.0
    assert "my_tanh_chain" not in corpus.FAMILIES


def test_failed_measurements_that_do_not_lower_are_kept_and_the_rest_written_aside(tmp_path):
    """A row whose measurement failed and whose program does not lower here keeps its
    place unchanged (the deviceless H100 rows of programs that ask for a GPU); a measured
    row that no longer lowers is written beside the output, with why, not lost."""
    from costmodel.training.measure.reextract import main

    rows = pd.DataFrame([
        {"key": "ok|{}", "family": "loop", "params": json.dumps(PARAMS), "backend": "cpu",
         "target": "", "status": "ok", "compile_seconds": 0.25, "f_hlo_ops_inlined": -1.0},
        {"key": "failed|{\"a\": 1}", "family": "no_such_family", "params": "{}",
         "backend": "cpu", "target": "", "status": "error", "compile_seconds": None,
         "f_hlo_ops_inlined": None},
        {"key": "gone|{\"b\": 2}", "family": "no_such_family", "params": "{}",
         "backend": "cpu", "target": "", "status": "ok", "compile_seconds": 3.5,
         "f_hlo_ops_inlined": 7.0},
    ])
    path = tmp_path / "rows.parquet"
    rows.to_parquet(path, index=False)
    assert main([str(path)]) == 0
    fresh = pd.read_parquet(path)
    assert list(fresh["key"]) == ["ok|{}", "failed|{\"a\": 1}"]
    assert fresh["f_hlo_ops_inlined"].iloc[0] == 6.0 and pd.isna(fresh["f_hlo_ops_inlined"].iloc[1])
    aside = pd.read_parquet(tmp_path / "rows.left_out.parquet")
    assert list(aside["key"]) == ["gone|{\"b\": 2}"] and aside["compile_seconds"].iloc[0] == 3.5
    assert aside["f_hlo_ops_inlined"].iloc[0] == 7.0
    assert aside["left_out_why"].iloc[0].startswith("UnknownFamilyError: unknown family")


def test_a_corpus_program_lowers_in_the_x64_mode_of_its_family():
    """`corpus.lower` switches x64 per family, as the measurement process does: a float64
    family's program keeps f64 types, the next family's is float32 again."""
    import jax

    from costmodel.measure.harness import placement

    before = jax.config.jax_enable_x64
    try:
        params = corpus.FAMILIES["float64"].grid[0]
        _, wide = corpus.lower(placement("cpu", ""), "float64", params)
        _, narrow = corpus.lower(placement("cpu", ""), "loop", PARAMS)
        assert "f64" in wide.as_text() and "f64" not in narrow.as_text()
        assert "f32" in narrow.as_text()
    finally:
        jax.config.update("jax_enable_x64", before)
