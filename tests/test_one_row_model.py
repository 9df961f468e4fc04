"""A prediction reads one row: the model's one-row paths give what its batch paths give
(the trees bit for bit), and the walk's shortcuts exactly what the bindings' full lists
give."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel.features import from_lowered
from costmodel.models import load_default
from costmodel.models.power_law import overhead_log
from costmodel.models.table import counts_or_zero


@pytest.fixture(scope="module")
def predictor():
    return load_default("cpu", "").predictor


def _rows(predictor, n: int) -> list[dict]:
    rng = np.random.default_rng(3)
    rows = []
    for _ in range(n):
        values = rng.lognormal(rng.uniform(0, 6), 2.0, len(predictor.feature_names))
        values[rng.random(len(values)) < 0.15] = 0.0
        values[rng.random(len(values)) < 0.05] = np.nan
        rows.append(dict(zip(predictor.feature_names, values)))
    rows[0][predictor.feature_names[0]] = np.inf
    return rows


def test_one_row_predictions_are_the_batchs(predictor):
    rows = _rows(predictor, 40)
    batch, batch_distance = predictor.predict_with_distance(rows)
    for i, row in enumerate(rows):
        one, distance = predictor.predict_with_distance([row])
        # matrix products (the baseline's, the distance's): BLAS sums one row in another
        # order than many, so the last bits may differ
        assert distance[0] == pytest.approx(batch_distance[i], rel=1e-12)
        for target, parts in one.items():
            for part, values in parts.items():
                assert values[0] == pytest.approx(batch[target][part][i], rel=1e-12), \
                    (target, part, i)


def test_one_row_trees_are_the_batchs_bit_for_bit(predictor):
    table = predictor.table(_rows(predictor, 30))
    for fitted in predictor.targets.values():
        if fitted.forest is None:
            continue
        batch = fitted.forest.predict(table.values)
        one = np.concatenate([fitted.forest.predict(table.values[i:i + 1])
                              for i in range(len(table))])
        assert one.tobytes() == batch.tobytes()


def test_counts_or_zero_is_nan_to_num_of_counts():
    values = np.array([np.nan, np.inf, 0.0, -0.0, 3.5, 1e300, np.finfo(float).max])
    assert counts_or_zero(values).tobytes() == np.nan_to_num(values).tobytes()
    assert counts_or_zero(values)[1] == np.finfo(float).max


def test_the_overhead_form_adds_each_term_once():
    rng = np.random.default_rng(7)
    logs, extra = rng.normal(size=(5, 3)) * 4, rng.normal(size=(5, 2)) * 4
    b, added = np.array([0.5, 1.1, 0.2]), np.array([-3.0, 1.0, 0.7, 0.05])
    terms = [np.full(5, -2.0), 0.3 + logs @ b,
             added[0] + added[2] * extra[:, 0], added[1] + added[3] * extra[:, 1]]
    expected = np.logaddexp(np.logaddexp(np.logaddexp(terms[0], terms[1]), terms[2]),
                            terms[3])
    assert overhead_log(-2.0, 0.3, b, added, logs, extra).tobytes() == expected.tobytes()
    assert overhead_log(-2.0, 0.3, b, added[:0], logs, extra[:, :0]).tobytes() == \
        np.logaddexp(terms[0], terms[1]).tobytes()


def test_lone_results_read_as_the_list_of_results_reads_them(monkeypatch):
    from costmodel.features.stablehlo import kinds

    def f(x):  # a reduction of two results (argmax), then reductions of one
        return jnp.argmax(x, axis=0), x.sum(0), jnp.tanh(x).max(1)

    traced = jax.jit(f).trace(jax.ShapeDtypeStruct((16, 8), jnp.float32))
    lowered = traced.lower()
    fast = from_lowered(traced, lowered, backend="cpu", jaxpr=False)
    init = kinds.OpKind.__init__

    def listed(self, full, view=None):  # every kind reads the list of results
        init(self, full, view)
        self.one_result = False

    monkeypatch.setattr(kinds.OpKind, "__init__", listed)
    slow = from_lowered(traced, lowered, backend="cpu", jaxpr=False)
    assert fast.values["op_reduce"] == 3 and fast.values["fusion_groups"] > 0
    assert {k: v for k, v in fast.values.items() if v == v} == \
        {k: v for k, v in slow.values.items() if v == v}
