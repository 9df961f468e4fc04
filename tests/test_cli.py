"""The command line: argument specs and errors (prediction commands need the model)."""

import json
import shutil
import sys

import jax.numpy as jnp
import pandas as pd
import pytest

from costmodel import cli
from costmodel._argspec import ArgSpecError, load_function, parse_arg
from costmodel.cli.training_commands import shipped_data
from costmodel.models import default_path, load

SHIPPED_CPU = shipped_data("cpu", "")


def test_parse_arg_specs():
    s = parse_arg("f32[1024, 16]")
    assert s.shape == (1024, 16) and s.dtype == jnp.float32
    assert parse_arg("i32[]").shape == ()
    assert parse_arg("bf16[2]").dtype == jnp.bfloat16
    with pytest.raises(ArgSpecError, match="DTYPE"):
        parse_arg("float[3]")


def test_load_function_from_file(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text("import jax.numpy as jnp\ndef f(x):\n    return jnp.sin(x) @ x\n")
    assert load_function(f"{path}:f").__name__ == "f"
    with pytest.raises(ArgSpecError, match="no attribute"):
        load_function(f"{path}:g")


def test_bad_arg_is_a_clear_error_exit_2(capsys, tmp_path):
    path = tmp_path / "prog.py"
    path.write_text("def f(x):\n    return x\n")
    code = cli.main(["predict", f"{path}:f", "--arg", "q7[3]"])
    assert code == 2
    assert "DTYPE" in capsys.readouterr().err


def test_predict_command_json(capsys, tmp_path):
    path = tmp_path / "prog.py"
    path.write_text("import jax.numpy as jnp\ndef f(x):\n    return jnp.tanh(x @ x)\n")
    assert cli.main(["predict", f"{path}:f", "--arg", "f32[64,64]", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "cpu" and out["compile_seconds"] > 0


def test_every_command_has_help():
    parser = cli.build_parser()
    for name in ("demo", "predict", "advise", "sweep", "train", "evaluate", "calibrate",
                 "serve", "retrain-worker", "export"):
        with pytest.raises(SystemExit) as info:
            parser.parse_args([name, "--help"])
        assert info.value.code == 0


# wrong uses: one line on stderr, exit status 2, never a traceback -------------------
def wrong_use(capsys, argv) -> str:
    """Run the command line; it must fail as a wrong use. Returns what it said."""
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # argparse refuses before any command runs
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    return err


@pytest.fixture
def prog(tmp_path, monkeypatch):
    """`cli_prog.py` in the current folder, found as module `cli_prog` (sys.path restored)."""
    (tmp_path / "cli_prog.py").write_text(
        "import jax.numpy as jnp\nscale = 2.0\n"
        "def fn(x, w):\n    return jnp.tanh(x @ w) * scale\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    sys.modules.pop("cli_prog", None)
    yield "cli_prog"
    sys.modules.pop("cli_prog", None)


ARGS = ["--arg", "f32[8,16]", "--arg", "f32[16,16]"]


def test_a_module_in_the_current_folder_is_found(prog, capsys):
    assert cli.main(["predict", f"{prog}:fn", *ARGS, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["compile_seconds"] > 0
    assert cli.main(["predict", f"{prog}.py:fn", *ARGS, "--json"]) == 0


@pytest.mark.parametrize("argv, said", [
    (["predict", "no_such_module_xyz:fn"], "cannot import 'no_such_module_xyz'"),
    (["predict", "cli_prog:missing"], "has no attribute 'missing'"),
    (["predict", "cli_prog:scale"], "cli_prog:scale is a float, not a function"),
    (["predict", "cli_prog:fn", "--arg", "f32[8,16]"], "cannot take 1 --arg"),
    (["advise", "cli_prog:fn", *ARGS, "--arg", "f32[3]"], "cannot take 3 --arg"),
    (["predict", "cli_prog:fn", "--arg", "f32[8,16]", "--arg", "f32[9,9]"],
     "does not trace with these --args"),
    (["predict", "cli_prog:fn", *ARGS, "--target", "a100"], "no model ships for gpu/a100"),
    (["predict", "cli_prog:fn", *ARGS, "--target", "h200"], "no model ships for gpu/h200"),
    (["predict", "cli_prog:fn", *ARGS, "--target", "v100"], "unknown target 'v100'"),
    (["predict", "cli_prog:fn", *ARGS, "--backend", "cpu", "--target", "h100"],
     "--target h100 is a GPU target: use it with --backend gpu"),
    (["sweep", "--out", "x", "--backend", "cpu", "--target", "h100"], "is a GPU target"),
    (["advise", "cli_prog:fn", *ARGS, "--budget", "-1"], "must be a positive number"),
    (["advise", "cli_prog:fn", *ARGS, "--budget", "nan"], "not 'nan'"),
    (["advise", "cli_prog:fn", *ARGS, "--budget", "inf"], "not 'inf'"),
    (["demo", "--budget", "0"], "must be a positive number of seconds"),
    (["sweep", "--out", "x", "--limit", "0"], "must be a whole number >= 1"),
    (["sweep", "--out", "x", "--timeout", "-5"], "argument --timeout"),
    (["serve", "--port", "70000"], "must be a port number"),
    (["predict", "cli_prog:fn", *ARGS, "--model", "no/such/model"], "no model artifact"),
    (["predict", "cli_prog:fn", *ARGS, "--model", str(default_path("cpu")), "--backend", "gpu"],
     "predicts for cpu, not gpu/h100"),
    (["train", "--data", "no/such/rows.parquet", "--out", "m"], "no dataset file"),
    (["predict"], "the following arguments are required: function"),
])
def test_every_wrong_use_is_one_line_and_exit_2(prog, capsys, argv, said):
    assert said in wrong_use(capsys, argv)


def test_a_target_alone_means_the_gpu_backend(prog, capsys):
    assert cli.main(["predict", f"{prog}:fn", *ARGS, "--target", "h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["backend"], out["target"]) == ("gpu", "h100")


def test_target_help_offers_only_shipped_models():
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["predict"].format_help()
    assert "h100" in help_text and "a100" not in help_text and "h200" not in help_text


def test_every_help_shows_the_defaults():
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    assert len(commands) == 13
    for name, parser in commands.items():
        text = " ".join(parser.format_help().split())
        options = [a for a in parser._actions
                   if a.option_strings and a.dest != "help" and not a.required]
        assert text.count("(default: ") == len(options), name  # each once, none twice
        for action in options:
            if action.default is not None:
                assert f"(default: {action.default})" in text, (name, action.dest)
    advise = " ".join(commands["advise"].format_help().split())
    assert "budget in seconds (default: 10.0)" in advise


# --model -------------------------------------------------------------------------
def test_model_flag_predicts_with_that_model_and_its_backend(prog, capsys):
    gpu = default_path("gpu", "h100")
    assert cli.main(["predict", f"{prog}:fn", *ARGS, "--model", str(gpu), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["backend"], out["target"]) == ("gpu", "h100")
    assert out["model_version"] == load(gpu).version
    assert cli.main(["advise", f"{prog}:fn", *ARGS, "--model", str(gpu), "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)
    assert advice["prediction"]["model_version"] == load(gpu).version


def test_serve_passes_each_model_for_its_backend(monkeypatch, tmp_path):
    import importlib

    seen = {}
    serving = importlib.import_module("costmodel.api.serve")  # the package exports the function
    monkeypatch.setattr(serving, "serve", lambda **kw: seen.update(kw))
    mine = tmp_path / "mine"
    shutil.copytree(default_path("cpu"), mine)
    assert cli.main(["serve", "--port", "0", "--model", str(mine)]) == 0
    assert seen["config"]["MODEL_PATHS"] == {("cpu", ""): mine,
                                             ("gpu", "h100"): default_path("gpu", "h100"),
                                             ("tpu", "v5e"): default_path("tpu", "v5e")}
    assert cli.main(["serve", "--port", "0"]) == 0 and seen["config"] is None
    assert "threads" not in seen and "read_timeout" not in seen  # serve()'s defaults
    assert cli.main(["serve", "--port", "0", "--threads", "8", "--read-timeout", "2.5"]) == 0
    assert (seen["threads"], seen["read_timeout"]) == (8, 2.5)


# evaluate ------------------------------------------------------------------------
def test_evaluate_defaults_to_the_shipped_data_and_shows_progress(monkeypatch, capsys):
    from costmodel.training.evaluation import evaluate

    def fake(rows, backend, target, progress, jobs=1):  # the real one takes minutes here
        assert (len(rows), backend, target) == (len(pd.read_parquet(SHIPPED_CPU)), "cpu", "")
        for fold in evaluate.folds(rows, "leave_family_out"):
            progress(fold[0])
        return evaluate.Evaluation(report={"n": len(rows)}, predictions=None)

    monkeypatch.setattr(evaluate, "run_evaluation", fake)
    assert cli.main(["evaluate", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"n": len(pd.read_parquet(SHIPPED_CPU))}
    # 75 families of 92 folds (and 16 libraries, one extrapolation fold)
    assert "evaluate cpu" in captured.err and "75/92" in captured.err


def test_demo_prints_its_budget_and_changes_one_program(capsys):
    from costmodel import _demo

    rows = _demo.run(compile_programs=False)
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "advice judged against a compile budget of 1 s (--budget)"
    advice = {row["program"]: row["advice"] for row in rows}
    assert advice.pop("4 stages x 500 unrolled") == "scan"
    assert set(advice.values()) == {"keep"}


def test_a_command_whose_extra_is_missing_names_the_extra(monkeypatch, capsys):
    def needs_pandas(args):
        raise ModuleNotFoundError("No module named 'pandas'", name="pandas")

    monkeypatch.setattr(cli, "cmd_export", needs_pandas)
    assert cli.main(["export", "--data", "x", "--out", "y.parquet"]) == 2
    expected = "needs the 'train' extra (pandas is not installed): pip install 'costmodel[train]'"
    assert expected in capsys.readouterr().err


def test_record_without_its_extra_says_what_to_install(monkeypatch, tmp_path):
    import importlib.util

    import costmodel

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "psutil" else real(name, *a))
    with pytest.raises(ImportError, match=r"costmodel.record needs the 'train' extra "
                                          r"\(psutil missing\): pip install 'costmodel\[train\]'"):
        with costmodel.record(tmp_path / "rows.jsonl"):
            pass


def test_retrain_worker_uses_the_configured_store_and_fails_orphans(monkeypatch, tmp_path):
    from costmodel.api.db import Database
    from costmodel.api.jobs import DIED, JobStore
    from costmodel.api.tables import jobs

    path = tmp_path / "store.sqlite3"
    monkeypatch.setenv("COSTMODEL_SAMPLES_DB", str(path))
    store = JobStore(Database(f"sqlite:///{path}"))
    orphan = store.create({"backend": None, "target": None})
    with store.db.connect() as conn:  # its web worker died before running it
        conn.execute(jobs.update().values(pid=_dead_pid()))
    assert cli.main(["retrain-worker", "--once", "--poll", "0.1"]) == 0
    assert (store.get(orphan)["status"], store.get(orphan)["error"]) == ("failed", DIED)


def _dead_pid() -> int:
    import subprocess

    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


# the user's own exception: one line with their frame, exit 2 -----------------------
RAISING = ("import jax.numpy as jnp\n\n\n"
           "def check(y):\n"
           "    raise ValueError(f'bad width {y.shape[1]}')\n\n\n"
           "def boom(x, w):\n"
           "    return check(x @ w)\n")


@pytest.fixture
def raising(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(RAISING)
    monkeypatch.chdir(tmp_path)
    return ["predict", "mine.py:boom", "--arg", "f32[32,64]", "--arg", "f32[64,64]"]


def test_a_users_exception_is_one_line_with_their_frame(raising, capsys):
    said = wrong_use(capsys, raising)
    assert said == ("costmodel predict: mine.py:5 in check: ValueError: bad width 64 "
                    "(--debug for the traceback)\n")


def test_debug_shows_the_users_exception_itself(raising):
    with pytest.raises(ValueError, match="bad width 64") as info:
        cli.main([*raising, "--debug"])
    frames = [(f.filename, f.lineno) for f in traceback_frames(info.value)]
    assert frames[-1][1] == 5 and frames[-1][0].endswith("mine.py")
    assert any(f.endswith("_stage.py") for f, _ in frames)  # costmodel's frames shown too


def traceback_frames(exc):
    import traceback

    return traceback.extract_tb(exc.__traceback__)


def test_a_shape_error_inside_the_users_function_is_one_line(prog, capsys):
    said = wrong_use(capsys, ["predict", f"{prog}:fn", "--arg", "f32[]", "--arg", "f32[16,16]"])
    assert said.startswith("costmodel predict: the function does not trace with these --args: "
                           "ValueError: matmul input operand 0 must have ndim at least 1")
    assert said.endswith("(at cli_prog.py:4 in fn)\n")


def test_a_module_that_raises_on_import_is_one_line(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken.py").write_text("import os\nos.environ['NO_SUCH_KEY_57']\n")
    monkeypatch.chdir(tmp_path)
    said = wrong_use(capsys, ["advise", "broken.py:f", "--arg", "f32[3]"])
    assert said.startswith("costmodel advise: broken.py:2 in <module>: KeyError: 'NO_SUCH_KEY_57'")


# --target: what ships, never a backend the user did not name ------------------------
def test_an_unknown_target_names_the_placements_that_have_models(prog, capsys):
    from costmodel.cli.common import known_placements, shipped_models, where_label

    said = wrong_use(capsys, ["predict", f"{prog}:fn", *ARGS, "--target", "tpu"])
    assert said.startswith("costmodel predict: 'tpu' is a backend, not a target: use --backend "
                           "tpu; models ship for ")
    said = wrong_use(capsys, ["predict", f"{prog}:fn", *ARGS, "--target", "v4"])
    assert said.startswith("costmodel predict: unknown target 'v4'; models ship for ")
    assert "backend 'gpu'" not in said and "--backend" not in said.split(";")[0]
    offered, _, without = said.partition("; known, but no model ships for ")
    shipped = [where_label(*s) for s in shipped_models()]
    missing = [where_label(*k) for k in known_placements() if k not in shipped_models()]
    assert offered.split("models ship for ")[1].split(", ") == shipped
    assert "cpu" in shipped and "gpu/h100" in shipped
    assert "gpu/a100" in missing and "gpu/h200" in missing
    assert without.split(" (")[0].split(", ") == missing
    # the backend the user did name is the one the message names
    said = wrong_use(capsys, ["predict", f"{prog}:fn", *ARGS, "--backend", "gpu", "--target",
                              "v4"])
    assert "unknown target 'v4' for --backend gpu; models ship for " in said


def test_a_measuring_command_offers_every_known_target(capsys):
    from costmodel.cli.common import known_placements, where_label

    said = wrong_use(capsys, ["sweep", "--out", "x", "--target", "v4"])
    known = [where_label(b, t) for b, t in known_placements() if t]
    assert {"gpu/h100", "gpu/a100", "gpu/h200", "tpu/v5e"} <= set(known)
    assert said == f"costmodel sweep: unknown target 'v4'; known targets: {', '.join(known)}\n"


# --help, --explain, a closed pipe ----------------------------------------------------
COMMANDS = {"demo", "predict", "advise", "blame", "profile", "sweep", "train", "evaluate",
            "calibrate", "serve", "retrain-worker", "export", "convert-model"}


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    listed = {line.split()[0] for line in text.split("commands:")[1].splitlines()
              if line.startswith("    ") and not line.startswith("     ")}
    assert listed == COMMANDS
    assert set(cli.build_parser()._subparsers._group_actions[0].choices) == COMMANDS


def test_explain_prints_each_effect_as_the_library_words_it(prog, capsys):
    import costmodel

    assert cli.main(["predict", f"{prog}:fn", *ARGS, "--explain", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["explain"]
    assert cli.main(["predict", f"{prog}:fn", *ARGS, "--explain"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    x, w = (jnp.zeros(s, jnp.float32) for s in ((8, 16), (16, 16)))
    effects = costmodel.predict(sys.modules["cli_prog"].fn, x, w).explain()
    assert effects and lines == [f"  {effect}" for effect in effects]
    assert shown == [effect.to_dict() for effect in effects]
    assert all(e["factor"] < 0.99 for e in shown)


def test_a_closed_pipe_ends_the_command_quietly(prog):
    import os
    import subprocess

    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written (`| head` done early)
    child = subprocess.run([sys.executable, "-m", "costmodel.cli", "predict", f"{prog}:fn",
                            *ARGS, "--json"], stdout=write, stderr=subprocess.PIPE, text=True,
                           timeout=120)
    os.close(write)
    assert child.stderr == "" and child.returncode == 141
