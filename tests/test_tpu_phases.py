"""XLA:TPU compile stages read from libtpu's log (measure/tpu_phases.py).

The parser runs on a real log (tests/data/tpu_compile_log.txt: two deviceless v5e
compiles captured in one window by `StderrCapture`, libtpu 0.0.42.1, with `LOG_ENV` and
`PASS_LOG_ENV` set; the lines of passes under 0.1 ms and of passes starting left out to
keep it small). The capture runs in a
subprocess that writes to file descriptor 2 as native code does. Only the last test needs
libtpu, and skips without it.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from costmodel.measure import phases
from costmodel.measure.phases import PHASES, TPU_PHASES, column, part_seconds
from costmodel.measure.tpu_phases import (
    LOG_ENV,
    LOG_OFF_HINT,
    PASS_LOG_ENV,
    STAGES,
    TpuStageLog,
    compile_of,
    compiles_of,
)

LOG = (Path(__file__).with_name("data") / "tpu_compile_log.txt").read_text()
# what the log's lines say, as written there (ms to seconds)
FIRST_STAGES = {"tpu_hlo": 0.02396227, "tpu_backend": 0.089841312,
                "tpu_codegen": 0.02273748, "tpu_end_to_end": 0.1430180635}
SECOND_END_TO_END = 0.30442655325
TOP_PASSES_F = {"tpu_fusion": 0.003349, "layout-assignment": 0.00107, "copy-insertion": 0.00107,
                "bfloat16-propagation": 0.000717,
                "hlo-memory-scheduler-with-brkga-fallback": 0.000551}


def test_both_compiles_of_a_real_log_with_their_four_stages():
    compiles = compiles_of(LOG)
    assert [c.module for c in compiles] == ["jit_f", "jit_g"]
    assert all(c.done for c in compiles)
    f, g = compiles
    assert f.stages == pytest.approx(FIRST_STAGES)
    assert set(g.stages) == set(STAGES)
    for c in compiles:  # the three named stages lie within END_TO_END
        named = c.stages["tpu_hlo"] + c.stages["tpu_backend"] + c.stages["tpu_codegen"]
        assert named < c.stages["tpu_end_to_end"]


def test_the_module_asked_for_is_the_one_read():
    found, error = compile_of(LOG, "jit_g")
    assert error == "" and found.module == "jit_g"
    assert found.stages["tpu_end_to_end"] == pytest.approx(SECOND_END_TO_END)
    found, error = compile_of(LOG, "jit_h")
    assert found is None and "2 compiles in the log, none of module 'jit_h'" in error
    assert "jit_f" in error and "jit_g" in error
    assert compile_of(LOG)[0] is None  # two compiles and no name: no guess


def test_top_passes_are_passes_not_the_pipelines_around_them():
    f = compiles_of(LOG)[0]
    assert "simplification-1" in f.pipelines and "Layout assignment" in f.pipelines
    top = f.top_passes()
    assert len(top) == phases.TOP_PASSES
    assert not set(top) & f.pipelines
    assert list(top.values()) == sorted(top.values(), reverse=True)
    assert top == TOP_PASSES_F


def test_units_and_thousands_separators():
    text = "\n".join([
        "I1205 23:41:50.163615   13864 deepsea_compiler_hlo_passes.cc:6046] XLA::TPU running "
        "hlo passes for 1,254 instructions, module: jit_fn",
        "I1205 23:41:50.5   13864 hlo_pass_pipeline.cc:303] Running HLO pass pipeline on "
        "module jit_fn: Main fusion",
        "I1205 23:41:50.6   13864 hlo_pass_pipeline.cc:176] HLO pass: tpu_fusion time: "
        "1.5 ms (1.5 ms) (cumulative: 2 ms, max: 1.5 ms, #called: 3)",
        "I1205 23:41:50.7   13864 hlo_pass_pipeline.cc:176] HLO pass: tpu_fusion time: "
        "250 us (250 us) (cumulative: 2 ms, max: 1.5 ms, #called: 4)",
        "I1205 23:41:50.9   13864 deepsea_compiler_hlo_passes.cc:6241] HLO_PASSES stage "
        "duration: 1.25s",
        "I1205 23:41:51.0   13913 deepsea_compiler_base.cc:3931] BACKEND_PASSES stage "
        "duration: 1,234.5ms",
        "I1205 23:41:51.1   13913 deepsea_compiler_backend.cc:1488] CODE_GENERATION stage "
        "duration: 95.9ms",
        "I1205 23:41:51.2   13864 deepsea_compiler_base.cc:985] END_TO_END stage duration: "
        "2.75s",
    ])
    found, error = compile_of(text, "jit_fn")
    assert error == ""
    assert found.stages == pytest.approx({"tpu_hlo": 1.25, "tpu_backend": 1.2345,
                                          "tpu_codegen": 0.0959, "tpu_end_to_end": 2.75})
    assert found.top_passes() == {"tpu_fusion": 0.00175}


def _line(thread: int, message: str) -> str:
    return f"I1205 23:41:50.163615 {thread:7d} x.cc:1] {message}"


def test_two_compiles_at_once_get_their_own_backend_stages():
    """Backend workers log their stages before naming the module; two compiles overlap."""
    text = "\n".join([
        _line(1, "XLA::TPU running hlo passes for 10 instructions, module: jit_a"),
        _line(2, "XLA::TPU running hlo passes for 20 instructions, module: jit_b"),
        _line(1, "HLO_PASSES stage duration: 1ms"),
        _line(2, "HLO_PASSES stage duration: 2ms"),
        _line(5, "BACKEND_PASSES stage duration: 10ms"),  # jit_a's, logged first
        _line(6, "BACKEND_PASSES stage duration: 20ms"),
        _line(6, "XLA::TPU module name: jit_b"),
        _line(6, "CODE_GENERATION stage duration: 3ms"),
        _line(6, "(HLO module jit_b): Executable fingerprint:91ef"),
        _line(5, "XLA::TPU module name: jit_a"),
        _line(5, "CODE_GENERATION stage duration: 4ms"),
        _line(2, "END_TO_END stage duration: 30ms"),
        _line(5, "(HLO module jit_a): Executable fingerprint:a58e"),
        _line(1, "END_TO_END stage duration: 40ms"),
    ])
    a, b = compiles_of(text)
    assert a.stages == pytest.approx({"tpu_hlo": 0.001, "tpu_backend": 0.010,
                                      "tpu_codegen": 0.004, "tpu_end_to_end": 0.040})
    assert b.stages == pytest.approx({"tpu_hlo": 0.002, "tpu_backend": 0.020,
                                      "tpu_codegen": 0.003, "tpu_end_to_end": 0.030})


def test_worker_stages_never_named_go_to_the_compile_that_ends():
    text = "\n".join([
        _line(1, "XLA::TPU running hlo passes for 10 instructions, module: jit_a"),
        _line(1, "HLO_PASSES stage duration: 1ms"),
        _line(5, "BACKEND_PASSES stage duration: 10ms"),
        _line(5, "CODE_GENERATION stage duration: 4ms"),
        _line(1, "END_TO_END stage duration: 20ms"),
    ])
    found, error = compile_of(text, "jit_a")
    assert error == "" and found.stages["tpu_backend"] == pytest.approx(0.010)
    assert found.stages["tpu_codegen"] == pytest.approx(0.004)


def test_a_log_without_stages_says_how_to_turn_it_on():
    found, error = compile_of("W1205 23:41:51.0 13913 llo_module.h:502] something\n", "jit_f")
    assert found is None and error == LOG_OFF_HINT
    assert "TPU_MIN_LOG_LEVEL=0" in error and "TPU_STDERR_LOG_LEVEL=0" in error


def test_a_tpu_row_splits_into_the_phase_share_parts():
    row = {column(p): None for p in PHASES}
    row.update({column("tpu_hlo"): 0.4, column("tpu_backend"): 0.3,
                column("tpu_codegen"): 0.1, column("tpu_end_to_end"): 0.9,
                phases.WALL_COLUMN: 1.0, "compile_seconds": 2.0})
    assert part_seconds(row) == pytest.approx({"hlo": 0.8, "backend": 0.8, "other": 0.4})
    cpu = {**row, column("hlo_through_layout"): 0.1, column("hlo_after_layout"): 0.1,
           column("backend"): 0.5}  # a row with CPU phases keeps using them
    assert part_seconds(cpu) == pytest.approx({"hlo": 0.4, "backend": 1.0, "other": 0.6})
    row[column("tpu_backend")] = math.nan  # as a parquet row without the stage reads
    assert part_seconds(row) is None


_WRITER = r"""
import os, sys
from costmodel.measure.tpu_phases import StderrCapture
os.write(2, b"before\n")
try:
    with StderrCapture() as cap:
        os.write(2, b"I1205 23:34:46.389658 3989 a.cc:1] HLO_PASSES stage duration: 1ms\n")
        os.write(2, b"    an INFO record's second line\n")
        os.write(2, b"W1205 23:34:46.389700 3990 b.cc:2] a warning\n    its second line\n")
        print("from python", file=sys.stderr)
        os.write(2, b"I1205 23:34:46.389800 3989 a.cc:3] more info\n")
        os.write(2, b"E1205 23:34:46.389900 3991 c.cc:4] an error, no newline")
        raise KeyError("inside")
except KeyError:
    pass
os.write(2, b"after\n")
sys.stdout.write(repr(cap.text))
"""


def test_the_capture_keeps_everything_and_passes_on_all_but_info():
    done = subprocess.run([sys.executable, "-c", _WRITER], capture_output=True, text=True,
                          check=True)
    captured = eval(done.stdout)  # the repr of the captured text
    shown = done.stderr.splitlines()
    assert "HLO_PASSES stage duration: 1ms" in captured and "more info" in captured
    assert "a warning\n    its second line\n" in captured
    assert captured.endswith("an error, no newline")
    assert "from python" not in captured  # Python's stderr bypasses the capture
    assert shown[0] == "before" and shown[-1] == "after"
    assert "from python" in shown
    assert any(line.endswith("] a warning") for line in shown)
    assert "    its second line" in shown
    assert any(line.endswith("] an error, no newline") for line in shown)
    assert not any("stage duration" in line or "more info" in line
                   or "INFO record" in line for line in shown)


def test_a_stage_log_row_has_every_phase_column():
    log = TpuStageLog("jit_f")
    found, log.error = compile_of(LOG, "jit_f")
    log.seconds.update(found.stages)
    log.passes = found.top_passes()
    row = log.row(0.75)
    assert set(row) == {*phases.SECONDS_COLUMNS, phases.PASSES_COLUMN, phases.ERROR_COLUMN}
    assert row[column("tpu_hlo")] == pytest.approx(FIRST_STAGES["tpu_hlo"])
    assert row[column("backend")] is None and row[phases.WALL_COLUMN] == 0.75
    assert json.loads(row[phases.PASSES_COLUMN]) == TOP_PASSES_F


def test_the_measurement_process_sets_the_log_only_for_traced_tpu_rows(monkeypatch):
    from costmodel.training.measure.child import configure

    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items()
                                         if k not in {*LOG_ENV, *PASS_LOG_ENV}})
    configure({"backend": "tpu"})
    assert all(os.environ[k] == v for k, v in LOG_ENV.items())
    assert not set(PASS_LOG_ENV) & set(os.environ)  # per-pass times: only when asked
    os.environ.update(PASS_LOG_ENV)
    configure({"backend": "tpu"})
    assert os.environ["TPU_VMODULE"] == "hlo_pass_pipeline=1"
    configure({"backend": "tpu", "trace_phases": False})  # --no-phases
    assert not {*LOG_ENV, *PASS_LOG_ENV} & set(os.environ)
    configure({"backend": "tpu"})
    configure({"backend": "cpu"})
    assert not set(LOG_ENV) & set(os.environ)


def test_a_deviceless_tpu_row_carries_its_compile_stages(monkeypatch):
    """A real measurement process (needs libtpu): the stages of its first timed compile."""
    from conftest import corpus_library_missing

    try:
        import libtpu  # noqa: F401
    except ImportError:
        corpus_library_missing("libtpu is not installed (pip install -e '.[tpu]')")
    from costmodel.training.measure.runner import run_child

    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # beside other libtpu processes
    monkeypatch.setenv("TPU_VMODULE", PASS_LOG_ENV["TPU_VMODULE"])  # the opt-in pass times
    tiny = str(Path(__file__).with_name("tiny_family.py"))
    result = run_child({"family": "tiny_test", "params": {"n": 3}, "modules": [tiny],
                        "backend": "tpu", "target": "v5e", "max_repeats": 1},
                       use_zygote=False)
    if result["status"] != "ok" and "TPU" in result.get("message", ""):
        corpus_library_missing(f"no deviceless TPU compile here: {result['message'][:200]}")
    assert result["status"] == "ok", result["message"]
    assert result["phase_error"] == ""
    stages = {p: result[column(p)] for p in TPU_PHASES}
    assert all(s > 0 for s in stages.values()), stages
    assert stages["tpu_hlo"] + stages["tpu_backend"] < stages["tpu_end_to_end"]
    assert stages["tpu_end_to_end"] <= result[phases.WALL_COLUMN]
    assert result[phases.WALL_COLUMN] == result["compile_seconds_all"][0]
    assert result[column("backend")] is None  # no CPU phases on a TPU row
    passes = json.loads(result[phases.PASSES_COLUMN])
    assert 0 < sum(passes.values()) < stages["tpu_hlo"]


def _exported_tanh_dots(tmp_path: Path) -> list[dict]:
    """Two small programs exported for TPU with their manifest in `tmp_path` (skips
    without libtpu and flatbuffers)."""
    from conftest import corpus_library_missing

    try:
        import flatbuffers  # noqa: F401
        import libtpu  # noqa: F401
    except ImportError:
        corpus_library_missing("libtpu or flatbuffers is not installed (pip install -e '.[tpu]')")
    import jax
    import jax.numpy as jnp

    programs = []
    for i, n in enumerate((64, 96)):
        spec = jax.ShapeDtypeStruct((n, n), jnp.float32)
        exported = jax.export.export(jax.jit(lambda x: jnp.tanh(x @ x).sum()),
                                     platforms=["tpu"])(spec)
        (tmp_path / f"p{i}.bin").write_bytes(exported.serialize())
        programs.append({"name": f"p{i}", "file": f"p{i}.bin", "key": f"tanh_dot|{n}",
                         "x64": False, "here_s": 0.1})
    (tmp_path / "manifest.json").write_text(json.dumps({"programs": programs}))
    return programs


def _chip_runner(tmp_path: Path, *flags: str) -> list[dict]:
    """The lines `tpu_device_run.py` writes for `tmp_path`'s programs, run deviceless."""
    from conftest import corpus_library_missing

    out = tmp_path / "rows.jsonl"
    run = Path(__file__).resolve().parents[1] / "bench" / "evaluations" / "tpu_device_run.py"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    done = subprocess.run([sys.executable, str(run), str(tmp_path), "--out", str(out),
                           "--deviceless-only", *flags], capture_output=True, text=True,
                          env=env, timeout=300)
    if done.returncode and "TPU" in done.stderr[-2000:] and "topology" in done.stderr[-2000:]:
        corpus_library_missing(f"no deviceless TPU compile here: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_the_chip_runner_compiles_deviceless_alone_on_a_host_without_a_chip(tmp_path):
    """`tpu_device_run.py --deviceless-only` (needs libtpu and flatbuffers): each exported
    program compiled deviceless here, its stages logged, and no chip asked for."""
    _exported_tanh_dots(tmp_path)
    lines = _chip_runner(tmp_path, "--stages")
    assert lines[0]["environment"]["libtpu_version"]
    rows = lines[1:]
    assert [r["key"] for r in rows] == ["tanh_dot|64", "tanh_dot|96"]
    for r in rows:
        assert r["status"] == "ok", r
        assert "device_s" not in r and "ref_device_s" not in r
        assert len(r["deviceless_s"]) == 1 and 0 < r["deviceless_s"][0] < 60
        assert len(r["ref_deviceless_s"]) == 1 and r["ref_deviceless_s"][0] > 0
        (stages,) = r["deviceless_stages"]
        assert set(stages) == set(STAGES) and stages["tpu_end_to_end"] <= r["deviceless_s"][0]


def test_the_chip_runner_measures_each_program_in_a_fresh_process_as_sweeps_do(tmp_path):
    """`--fresh-each`: a child process per program, the reference compiled untimed and
    timed first, then the program three times (under 2 s) with a reference between, and
    the first compile's host RSS growth; the positions say where each compile sat."""
    _exported_tanh_dots(tmp_path)
    lines = _chip_runner(tmp_path, "--fresh-each")
    assert lines[0]["environment"]["fresh_each"] and lines[0]["environment"]["deviceless_only"]
    rows = lines[1:]
    assert [r["key"] for r in rows] == ["tanh_dot|64", "tanh_dot|96"]
    for r in rows:
        assert r["status"] == "ok" and r["fresh_process"], r
        assert len(r["device_s"]) == 3 and all(0 < s < 60 for s in r["device_s"])
        assert len(r["ref_device_s"]) == 3 and r["positions"] == [2, 4, 6]
        assert r["device_rss_bytes"] > 0 and r["child_s"] > sum(r["device_s"])
        assert r["device_kind"] == "TPU v5 lite"
