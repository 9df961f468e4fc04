"""Feature schema 19 changed what the fusion inputs measure in programs holding selects
(a select of one value on both sides is dropped): rows and stored bench inputs of 18 read
as 19 where they hold no select, and must be lowered again where they do."""

import json

import pandas as pd
import pytest

from costmodel.features.schema import CHANGED, SCHEMA_VERSION, features_of, stale
from costmodel.models import load_default
from costmodel.training.evaluation.outside import score
from costmodel.training.fitting.fit import fit_inputs
from costmodel.training.store.dataset import with_added_features


def _rows(**selects):
    base = {"f_" + n: 1.0 for n in features_of(18)}
    return pd.DataFrame([{**base, "key": key, "family": "loop", "params": "{}",
                          "backend": "cpu", "target": "", "status": "ok",
                          "f_op_select": count, "f_schema_version": version,
                          "compile_seconds": 0.1}
                         for key, (count, version) in selects.items()])


def test_inputs_of_18_without_a_select_read_as_19_and_with_one_are_stale():
    assert SCHEMA_VERSION == 19 and CHANGED == {19: "op_select"}
    assert not stale(18, {"op_select": 0.0, "hlo_ops": 4.0})
    assert stale(18, {"op_select": 3.0})
    assert not stale(19, {"op_select": 3.0})
    up = with_added_features(_rows(plain=(0.0, 18), selects=(2.0, 18), fresh=(2.0, 19)))
    assert list(up["f_schema_version"]) == [19, 18, 19]
    with pytest.raises(ValueError, match="1 rows lack model inputs.*select.*--stale-only"):
        fit_inputs(up)
    assert len(fit_inputs(up.iloc[[0, 2]])) == 2


def test_stale_rows_are_lowered_again_and_the_rest_keep_their_inputs(tmp_path):
    from costmodel.training.measure.reextract import main

    rows = _rows(a=(0.0, 18), b=(5.0, 18))
    rows.loc[1, ["family", "params"]] = ["grid_world", json.dumps(
        {"batch": 2, "size": 5, "actions": 3, "rules": 0, "rollout": 0})]
    path = tmp_path / "rows.parquet"
    rows.to_parquet(path, index=False)
    assert main([str(path), "--stale-only"]) == 0
    fresh = pd.read_parquet(path)
    assert list(fresh["f_schema_version"]) == [19, 19]
    assert fresh.loc[0, "f_hlo_ops"] == 1.0  # not lowered: its params would not build
    assert fresh.loc[1, "f_op_select"] > 5 and fresh.loc[1, "f_hlo_ops"] > 100


def test_a_bench_run_of_18_with_selects_is_refused_until_its_inputs_are_refreshed():
    inputs = {name: 1.0 for name in features_of(18)}
    run = {"schema_version": 18, "backend": "cpu", "target": "",
           "results": [{"program": "p", "model_inputs": inputs, "measured_s": 1.0}]}
    with pytest.raises(ValueError, match="schema 19 changed for some of these programs"):
        score(load_default("cpu"), run)
