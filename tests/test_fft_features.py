"""Feature schema 18: a transform's points and the odd part of its length (what the TPU
compiler's time follows), appended so that the models and rows of 17 stay readable."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from costmodel.features import MODEL_FEATURES, SCHEMA_VERSION, extract
from costmodel.features.schema import OLDEST_READ, features_of, with_added
from costmodel.features.stablehlo.ops import odd_part
from costmodel.models import ArtifactError, load, load_default
from costmodel.training.fitting.fit import features_frame, fit_inputs
from costmodel.training.store.dataset import with_added_features

FFT = ("fft_points_max", "fft_odd_part_max", "fft_odd_length_twos")


def _fft_features(fn, *shapes):
    feats = extract(fn, *(jax.ShapeDtypeStruct(s, d) for s, d in shapes))
    return {name: feats[name] for name in FFT}


def test_odd_part_of_a_length():
    assert [odd_part(n) for n in (4096, 6000, 22050, 22562, 22528, 1, 0)] == [
        1, 375, 11025, 11281, 11, 1, 0]


def test_the_largest_transform_and_odd_part_are_read_from_fft_lengths():
    # an FFT convolution as `fftconvolve` of 22050 and 513 samples takes it: 22562 points
    conv = _fft_features(lambda x: jnp.fft.irfft(jnp.fft.rfft(x, 22562) ** 2, 22562),
                         ((8, 22050), jnp.float32))
    assert conv == {"fft_points_max": 22562.0, "fft_odd_part_max": 11281.0,
                    "fft_odd_length_twos": 2.0}
    # a 2-D transform: points multiply, the odd part is its longest axis's
    field = _fft_features(lambda x: jnp.fft.fft2(x), ((4, 96, 200), jnp.complex64))
    assert field == {"fft_points_max": 96.0 * 200, "fft_odd_part_max": 25.0,
                     "fft_odd_length_twos": 8.0}
    # a transform inside a loop body and one beside it: the largest of the two
    def loop(x):
        y = jax.lax.fori_loop(0, 3, lambda _, v: jnp.fft.ifft(jnp.fft.fft(v)), x)
        return y + jnp.fft.fft(x, 1536)[..., :1024]
    assert _fft_features(loop, ((1024,), jnp.complex64)) == {
        "fft_points_max": 1536.0, "fft_odd_part_max": 3.0, "fft_odd_length_twos": 512.0}
    # powers of two alone: no odd length
    assert _fft_features(lambda x: jnp.fft.fft(x, 4096), ((1024,), jnp.complex64)) == {
        "fft_points_max": 4096.0, "fft_odd_part_max": 1.0, "fft_odd_length_twos": 0.0}
    assert _fft_features(jnp.tanh, ((64,), jnp.float32)) == dict.fromkeys(FFT, 0.0)


def test_schema_18_appends_two_inputs_to_those_of_17():
    assert SCHEMA_VERSION == 19 and OLDEST_READ == 17
    assert MODEL_FEATURES[-3:] == FFT
    assert features_of(17) == MODEL_FEATURES[:-3]
    assert features_of(18) == features_of(19) == MODEL_FEATURES
    with pytest.raises(ValueError, match="feature schema 16 is not read here"):
        features_of(16)


def test_inputs_of_17_gain_zeros_without_an_fft_and_nothing_with_one():
    plain = with_added({"op_fft": 0.0, "hlo_ops": 5.0})
    assert plain == {"op_fft": 0.0, "hlo_ops": 5.0, **dict.fromkeys(FFT, 0.0)}
    assert with_added({"op_fft": 2.0}) == {"op_fft": 2.0}
    recorded = {"op_fft": 2.0, "fft_points_max": 6000.0, "fft_odd_part_max": 375.0,
                "fft_odd_length_twos": 16.0}
    assert with_added(recorded) == recorded


def test_the_shipped_models_of_17_load_and_read_their_own_inputs():
    h100 = load_default("gpu", "h100")
    assert h100.manifest["schema_version"] == 17
    inputs = features_frame(pd.DataFrame([{"f_" + n: 1.0 for n in MODEL_FEATURES}
                                           | {"backend": "gpu"}])).to_dict("records")[0]
    without = {k: v for k, v in inputs.items() if k not in FFT}
    same = h100.predict([inputs])["compile_seconds"]["point"]
    assert same == pytest.approx(h100.predict([without])["compile_seconds"]["point"], rel=0)
    assert h100.predict([{**inputs, "fft_odd_part_max": 1e4}])["compile_seconds"]["point"] \
        == pytest.approx(same, rel=0)


def test_the_cpu_model_of_18_does_not_read_the_transform_inputs():
    """XLA:CPU compiles FFTs in what their op counts say (`recipe.FFT_INPUTS`): the CPU
    model's trees leave the three inputs out, so they move none of its predictions."""
    cpu = load_default("cpu")
    assert cpu.manifest["schema_version"] == 18
    assert set(FFT) <= set(cpu.manifest["features"])
    inputs = features_frame(pd.DataFrame([{"f_" + n: 1.0 for n in MODEL_FEATURES}
                                           | {"backend": "cpu"}])).to_dict("records")[0]
    same = cpu.predict([inputs])["compile_seconds"]["point"]
    odd = {**inputs, "fft_points_max": 27000.0, "fft_odd_part_max": 3375.0,
           "fft_odd_length_twos": 8.0}
    assert cpu.predict([odd])["compile_seconds"]["point"] == pytest.approx(same, rel=0)


def test_a_model_of_a_schema_not_read_is_refused(tmp_path):
    import shutil

    folder = shutil.copytree(load_default("cpu").path, tmp_path / "cpu")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["schema_version"] = 16
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="feature schema 16.*reads models of 17 to 19"):
        load(folder)
    # a model of 17 whose manifest names 18's inputs is not what 17 was
    manifest["schema_version"], manifest["features"] = 17, list(MODEL_FEATURES)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="feature names mismatch.*has extra"):
        load(folder)


def test_rows_of_17_gain_the_inputs_where_they_have_no_fft_and_a_fit_refuses_the_rest():
    base = {"f_" + n: 1.0 for n in features_of(17)} | {"f_op_select": 0.0}
    rows = pd.DataFrame([
        {**base, "key": "plain", "backend": "cpu", "status": "ok", "f_op_fft": 0.0,
         "f_schema_version": 17},
        {**base, "key": "fft", "backend": "cpu", "status": "ok", "f_op_fft": 2.0,
         "f_schema_version": 17},
        {**base, "key": "new", "backend": "cpu", "status": "ok", "f_op_fft": 1.0,
         "f_schema_version": 18, "f_fft_points_max": 64.0, "f_fft_odd_part_max": 1.0,
         "f_fft_odd_length_twos": 0.0},
    ])
    up = with_added_features(rows)
    assert list(up["f_schema_version"]) == [19, 17, 19]
    columns = ["f_" + name for name in FFT]
    assert up.loc[0, columns].tolist() == [0.0, 0.0, 0.0]
    assert up.loc[1, columns].isna().all()
    assert up.loc[2, "f_fft_points_max"] == 64.0
    assert features_frame(up.iloc[[0, 2]])["fft_points_max"].tolist() == [0.0, 64.0]
    assert features_frame(up)["fft_points_max"].isna().tolist() == [False, True, False]
    with pytest.raises(ValueError, match="1 rows lack model inputs.*FFT.*--stale-only"):
        fit_inputs(up)


def test_stale_rows_alone_are_lowered_again_and_keep_their_place(tmp_path):
    from costmodel.training.measure.reextract import main

    params = {"kind": "conv1d", "n": 1500, "transforms": 1}
    base = {"f_" + n: 1.0 for n in features_of(17)} | {"f_op_select": 0.0}
    rows = pd.DataFrame([
        {**base, "key": "a", "family": "loop", "params": "{}", "backend": "cpu",
         "target": "", "status": "ok", "f_op_fft": 0.0, "f_schema_version": 17,
         "compile_seconds": 0.1},
        {**base, "key": "b", "family": "spectral_odd", "params": json.dumps(params),
         "backend": "cpu", "target": "", "status": "ok", "f_op_fft": 2.0,
         "f_schema_version": 17, "compile_seconds": 0.2},
        {**base, "key": "c", "family": "loop", "params": "{}", "backend": "cpu",
         "target": "", "status": "ok", "f_op_fft": 0.0, "f_schema_version": 17,
         "compile_seconds": 0.3},
    ])
    path = tmp_path / "rows.parquet"
    rows.to_parquet(path, index=False)
    assert main([str(path), "--stale-only"]) == 0
    fresh = pd.read_parquet(path)
    assert list(fresh["key"]) == ["a", "b", "c"]
    assert list(fresh["compile_seconds"]) == [0.1, 0.2, 0.3]
    # the plain rows were not lowered (their family's params would not build)
    assert fresh.loc[0, "f_hlo_ops"] == 1.0 and fresh.loc[0, "f_fft_points_max"] == 0.0
    assert fresh.loc[1, "f_fft_points_max"] == 3000.0
    assert fresh.loc[1, "f_fft_odd_part_max"] == 375.0
    assert fresh.loc[1, "f_fft_odd_length_twos"] == 8.0
    assert list(fresh["f_schema_version"]) == [19, 19, 19]
    assert np.isfinite(fresh.loc[1, "f_hlo_ops"]) and fresh.loc[1, "f_hlo_ops"] > 1


def test_only_the_tpu_recipe_lets_its_trees_read_the_transform_inputs():
    from costmodel.training.fitting.recipe import BACKEND_TERMS

    for backend in ("cpu", "gpu"):
        assert set(FFT) <= set(BACKEND_TERMS[backend]["tree_exclude"])
    assert not set(FFT) & set(BACKEND_TERMS["tpu"]["tree_exclude"])
    assert set(BACKEND_TERMS["gpu"]["tree_exclude"]) - set(FFT) == set(
        BACKEND_TERMS["tpu"]["tree_exclude"])
