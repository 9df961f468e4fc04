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
