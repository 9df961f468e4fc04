"""`costmodel.profile`: one traced compile, by part and HLO pass, beside the prediction."""

import jax
import jax.numpy as jnp
import pytest

import costmodel
from costmodel import cli
from costmodel._profile import CacheHit

X = jax.ShapeDtypeStruct((32, 64), jnp.float32)
W = jax.ShapeDtypeStruct((64, 64), jnp.float32)


def program(x, w):
    for _ in range(20):
        x = jnp.tanh(x @ w) + 0.5 * x
    return jnp.sum(x)


def test_profile_splits_the_measured_compile_into_parts_and_passes():
    result = costmodel.profile(program, X, W)
    assert set(result.parts) == {"hlo", "backend", "other"}
    assert sum(result.parts.values()) == pytest.approx(result.compile_seconds)
    assert result.parts["backend"] > 0 and result.parts["hlo"] > 0
    assert 0 < len(result.passes) <= 5 and all(s > 0 for s in result.passes.values())
    assert result.prediction.compile_seconds > 0
    assert "HLO passes" in str(result) and "<rect" in result.html()
    page = result.html()
    assert "Width: measured compile seconds" in page
    assert "s predicted (" not in page and "host memory 0 MB" not in page
    assert page.count(" s measured (") >= 4  # compile, its three parts
    assert "Host memory is not shown: a profile measures time only" in page


def test_a_program_compiled_before_is_not_measured_again():
    def other(x, w):  # not `program`: that one the test above compiled already
        return jnp.sum(jnp.cos(x @ w) * 7)

    stage = costmodel.lower(other, X, W)
    stage.profile()
    with pytest.raises(CacheHit, match="fresh process"):
        stage.profile()


def test_cli_profile_prints_the_parts(tmp_path, monkeypatch, capsys):
    (tmp_path / "profiled.py").write_text(
        "import jax.numpy as jnp\n\ndef f(x):\n    return jnp.sum(jnp.sin(x) * 3)\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "profiled.py:f", "--arg", "f32[64]", "--json"]) == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["compile_seconds"] == pytest.approx(sum(out["parts"].values()))


def _profile_with(passes: dict) -> str:
    from costmodel._profile import Profile

    prediction = costmodel.predict(program, X, W)
    return str(Profile(0.2, {"hlo": 0.05, "backend": 0.1, "other": 0.05}, passes, prediction))


def test_only_passes_that_took_measurable_time_are_named():
    text = _profile_with({"fusion": 0.0123, "copy-insertion": 0.0004, "cse": 0.001})
    assert text.splitlines()[-1] == "slowest HLO passes: fusion 12 ms, cse 1 ms"
    text = _profile_with({"copy-insertion": 0.0004, "layout-assignment": 0.0009})
    assert text.splitlines()[-1] == "no HLO pass took 1 ms or more"
    assert "HLO passes" not in _profile_with({}).splitlines()[-1]


def test_cli_profile_names_no_pass_it_did_not_measure(tmp_path, monkeypatch, capsys):
    (tmp_path / "small_mlp.py").write_text(
        "import jax\nimport jax.numpy as jnp\n\n"
        "def step(w, x):\n    return jnp.sum(jax.nn.relu(x @ w) ** 2)\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["profile", "small_mlp.py:step", "--arg", "f32[16,16]",
                     "--arg", "f32[4,16]"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    if last.startswith("slowest HLO passes: "):
        for named in last.removeprefix("slowest HLO passes: ").split(", "):
            assert not named.endswith(" 0 ms"), last
    else:
        assert last == "no HLO pass took 1 ms or more"


def test_a_tpu_profile_reads_libtpus_log_and_says_how_to_turn_it_on(monkeypatch):
    """On a TPU host the parts come from libtpu's log, not a profiler trace. Here the
    compile is a CPU one standing in for the chip's: its capture finds no TPU stages, and
    the error names the environment that turns the log on."""
    import dataclasses

    from costmodel.features import Placement

    def tpu_only(x, w):  # a program of its own: no other test compiled it
        return jnp.sum(jnp.sinh(x @ w) - 2)

    stage = costmodel.lower(tpu_only, X, W)
    cpu_prediction = stage.predict(backend="cpu")
    stage._lowerings["tpu"] = stage._lowered(Placement.of("cpu", None))
    monkeypatch.setattr(type(stage), "predict", lambda *a, **k: dataclasses.replace(
        cpu_prediction, backend="tpu", target="v5e"))
    with pytest.raises(RuntimeError, match="libtpu logged no compile stages.*"
                                           "TPU_MIN_LOG_LEVEL=0 TPU_STDERR_LOG_LEVEL=0"):
        stage.profile()


def test_a_tpu_profile_names_the_tpu_backend_parts():
    import dataclasses

    from costmodel._profile import Profile

    prediction = dataclasses.replace(costmodel.predict(program, X, W), backend="tpu",
                                     target="v5e")
    text = str(Profile(0.2, {"hlo": 0.05, "backend": 0.1, "other": 0.05}, {}, prediction))
    assert "backend passes, codegen" in text and "LLVM" not in text
