"""The shipped models' figures on the committed bench runs, against their snapshot
(`tests/model_figures.json`). A retrain changes them on purpose: regenerate the snapshot
with `python tests/model_figures.py` and review its diff; any other change is drift."""

import json
import math

import model_figures
import pytest

REGENERATE = "after a retrain, run `python tests/model_figures.py` and review the diff"


@pytest.fixture(scope="module")
def snapshot():
    return json.loads(model_figures.SNAPSHOT.read_text())


def flat(value, prefix: str = "") -> dict:
    """Nested mappings and lists as one mapping of path -> leaf."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}{key}/").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{prefix}{i}/").items()}
    return {prefix.rstrip("/"): value}


def drift(computed, stored) -> dict:
    """Leaves of `computed` that differ from `stored` (numbers beyond float noise), and
    leaves only one of them has."""
    now, then = flat(computed), flat(stored)
    out = {key: (now.get(key), then.get(key)) for key in now.keys() ^ then.keys()}
    for key in now.keys() & then.keys():
        a, b = now[key], then[key]
        if isinstance(a, float) and isinstance(b, (int, float)):
            if not (math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))):
                out[key] = (a, b)
        elif a != b:
            out[key] = (a, b)
    return out


def test_drift_names_each_changed_leaf():
    stored = {"run": {"median_fold": 1.18, "rows": [1.0, 2.0]}, "name": "a"}
    assert drift(json.loads(json.dumps(stored)), stored) == {}
    assert drift({"run": {"median_fold": 1.18 * (1 + 1e-9), "rows": [1.0, 2.0]}, "name": "a"},
                 stored) == {}
    changed = {"run": {"median_fold": 1.19, "rows": [1.0]}, "name": "b"}
    assert drift(changed, stored) == {"run/median_fold": (1.19, 1.18), "run/rows/1": (None, 2.0),
                                      "name": ("b", "a")}


def test_the_snapshot_is_of_the_shipped_models(snapshot):
    assert snapshot["models"] == model_figures.versions(), REGENERATE


def test_the_snapshot_holds_every_figure(snapshot):
    assert sorted(snapshot["figures"]) == sorted(model_figures.FIGURES), REGENERATE


@pytest.mark.parametrize("name", sorted(model_figures.FIGURES))
def test_figure_matches_the_snapshot(snapshot, name):
    assert drift(model_figures.FIGURES[name](), snapshot["figures"][name]) == {}, REGENERATE
