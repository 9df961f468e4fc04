"""The command line: argument specs and errors (prediction commands need the model)."""

import json

import jax.numpy as jnp
import pytest

from costmodel import cli
from costmodel._argspec import ArgSpecError, load_function, parse_arg


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
                 "serve", "export"):
        with pytest.raises(SystemExit) as info:
            parser.parse_args([name, "--help"])
        assert info.value.code == 0
