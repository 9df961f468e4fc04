"""How far a program lies from the training rows (`costmodel.models.novelty`), and models
that carry it."""

import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from costmodel.models import load_default
from costmodel.models.novelty import NEIGHBORS, SPREAD_FLOOR, Novelty, Widening
from costmodel.models.predictor import Predictor

ROOT = Path(__file__).resolve().parents[1]


def brute_force(train: np.ndarray, rows: np.ndarray) -> np.ndarray:
    logs = np.log1p(train)
    center, spread = logs.mean(0), np.maximum(logs.std(0), SPREAD_FLOOR)
    reference = np.unique((logs - center) / spread, axis=0)
    standardized = (np.log1p(rows) - center) / spread
    out = []
    for row in standardized:
        distances = np.sort(np.sqrt(((reference - row) ** 2).sum(1)))
        out.append(distances[:NEIGHBORS].mean())
    return np.array(out)


def test_the_distance_is_the_mean_over_the_nearest_training_rows():
    rng = np.random.default_rng(1)
    train = rng.integers(0, 1000, size=(300, 6)).astype(float)
    rows = np.vstack([train[:3], rng.integers(0, 10**6, size=(4, 6))])
    novelty = Novelty.of(train)
    assert novelty.distance(rows) == pytest.approx(brute_force(train, rows), rel=2e-3)
    # programs of counts a thousand times past the training rows lie farther than theirs
    assert novelty.distance(rows[3:]).min() > novelty.distance(rows[:3]).max()


def test_an_input_constant_over_the_training_rows_moves_the_distance_by_its_floor():
    train = np.column_stack([np.arange(100.0), np.zeros(100)])
    novelty = Novelty.of(train)
    assert novelty.spread[1] == SPREAD_FLOOR
    near, unseen = novelty.distance(np.array([[50.0, 0.0], [50.0, np.e - 1]]))
    # one e-fold of an input the rows never varied adds 1 / floor in that direction
    assert np.sqrt(unseen ** 2 - near ** 2) == pytest.approx(1 / SPREAD_FLOOR, rel=0.05)


def test_distances_of_the_shipped_model_rank_strangers_farther():
    """The outside libraries' programs (no training row holds them) against training rows'
    own inputs: every one of the latter lies nearer than the median stranger."""
    from costmodel.training.fitting.fit import features_frame, select_rows
    from costmodel.training.store import dataset

    predictor = load_default("cpu").predictor
    rows = select_rows(dataset.load([ROOT / "training/data/cpu/rows.parquet"]), "cpu")
    own = predictor.distance(features_frame(rows).head(200))
    results = json.loads((ROOT / "bench/results/outside_libraries.json").read_text())["results"]
    strangers = predictor.distance([row["model_inputs"] for row in results])
    # a training row is its own nearest neighbour: the mean over five is small
    assert np.median(own) < 2.0 < np.median(strangers)
    assert strangers.max() > 15


def test_a_model_saved_with_novelty_and_widenings_loads_the_same():
    # rules that grow with distance (the shipped ones do), one per widened target, must
    # survive saving
    rules = {"compile_seconds": Widening(factor=1.1, onset=5.5, power=0.5),
             "peak_rss_bytes": Widening(factor=1.2, onset=8.0, power=0.75)}
    predictor = replace(load_default("cpu").predictor, widenings=rules)
    assert predictor.novelty is not None
    buffer = io.BytesIO()
    predictor.save(buffer)
    buffer.seek(0)
    loaded = Predictor.load(buffer)
    assert loaded.widenings == rules
    assert loaded.novelty.reference.dtype == np.float16
    inputs = [json.loads((ROOT / "bench/results/outside_libraries.json").read_text()
                         )["results"][i]["model_inputs"] for i in range(3)]
    for target in rules:
        assert loaded.predict(inputs)[target]["hi"] == pytest.approx(
            predictor.predict(inputs)[target]["hi"])


def test_a_format_2_model_widens_only_compile_time():
    """Before host memory widened, a model held one rule, compile time's."""
    predictor = replace(load_default("cpu").predictor, widenings={})
    arrays = predictor.arrays()
    meta = json.loads(str(arrays["meta"][()]))
    meta["format"] = 2
    del meta["widenings"]
    meta["widening"] = {"factor": 1.3, "onset": None, "power": 0.0}
    arrays["meta"] = np.array(json.dumps(meta))
    old = Predictor.from_arrays(arrays)
    assert old.widenings == {"compile_seconds": Widening(factor=1.3)}
    inputs = [json.loads((ROOT / "bench/results/outside_libraries.json").read_text()
                         )["results"][0]["model_inputs"]]
    fitted, widened = predictor.predict(inputs), old.predict(inputs)
    assert np.log(widened["compile_seconds"]["hi"] / widened["compile_seconds"]["point"]) \
        == pytest.approx(1.3 * np.log(fitted["compile_seconds"]["hi"]
                                      / fitted["compile_seconds"]["point"]))
    assert widened["peak_rss_bytes"]["hi"] == pytest.approx(fitted["peak_rss_bytes"]["hi"])


def test_a_format_1_model_loads_and_says_why_it_has_no_distances():
    predictor = replace(load_default("gpu", "h100").predictor, novelty=None, widenings={})
    arrays = predictor.arrays()
    meta = json.loads(str(arrays["meta"][()]))
    meta["format"] = 1
    del meta["novelty"], meta["widenings"]
    arrays["meta"] = np.array(json.dumps(meta))
    old = Predictor.from_arrays(arrays)
    assert old.novelty is None and old.widenings == {}
    with pytest.raises(ValueError, match="format 1"):
        old.distance([{name: 1.0 for name in old.feature_names}])
    meta["format"] = 7
    arrays["meta"] = np.array(json.dumps(meta))
    with pytest.raises(ValueError, match="reads formats 1, 2, 3, 4, 5, 6"):
        Predictor.from_arrays(arrays)


def test_a_fitted_estimator_keeps_its_training_rows():
    from costmodel.training.fitting.fit import features_frame, select_rows, train
    from costmodel.training.store import dataset

    rows = select_rows(dataset.load([ROOT / "training/data/cpu/rows.parquet"]), "cpu")
    small = rows[rows["family"].isin(["loop", "mlp"])].reset_index(drop=True)
    model = train(small, "cpu", max_iter=5)
    values = features_frame(small).to_numpy(float)
    assert model.predictor.novelty.distance(values) == pytest.approx(
        Novelty.of(values).distance(values))
    assert model.predictor.widenings == {}
    assert Widening().scale(model.predictor.distance(features_frame(small).head(2))) == \
        pytest.approx([1.0, 1.0])


def test_a_prediction_reports_its_distance_and_far_programs_get_wider_intervals():
    """An unrolled tanh-matmul loop (the corpus's `loop` family is this) lies near the
    training rows; an FFT, a sort and a determinant of a complex vector lie far from them.
    The shipped CPU rule (one factor, 1.28, fitted on the stored runs) widens both alike;
    a rule that grows past an onset between them widens the far one more."""
    import jax.numpy as jnp

    import costmodel

    def loop(x, w):
        for _ in range(50):
            x = jnp.tanh(x @ w)
        return x

    def odd(z):
        return jnp.sort(jnp.fft.fft(z).real)[::-1].cumsum() + jnp.linalg.det(
            jnp.outer(z.real, z.imag)[:8, :8])

    near = costmodel.predict(loop, jnp.ones((8, 64)), jnp.ones((64, 64)))
    far = costmodel.predict(odd, jnp.ones((4096,), jnp.complex64))
    assert near.distance_from_training == pytest.approx(1.19, abs=0.01)
    assert far.distance_from_training == pytest.approx(12.85, abs=0.01)  # its transform too
    assert far.to_dict()["distance_from_training"] == far.distance_from_training
    shipped = load_default("cpu").predictor
    unwidened = replace(shipped, widenings={})
    by_distance = replace(shipped, widenings={
        "compile_seconds": Widening(factor=1.0, onset=5.52, power=0.5)})
    far_scale = (far.distance_from_training / 5.52) ** 0.5
    assert far_scale == pytest.approx(1.53, abs=0.01)
    for prediction, scale in ((near, 1.0), (far, far_scale)):
        inputs = [prediction.features.model_inputs()]
        fitted = unwidened.predict(inputs)["compile_seconds"]
        fitted_width = np.log(fitted["hi"][0] / fitted["point"][0])
        lo, hi = prediction.compile_seconds_interval
        assert np.log(hi / prediction.compile_seconds) == pytest.approx(
            shipped.widenings["compile_seconds"].scale(
                np.array([prediction.distance_from_training]))[0]
            * fitted_width)
        grown = by_distance.predict(inputs)["compile_seconds"]
        assert np.log(grown["hi"][0] / grown["point"][0]) == pytest.approx(
            scale * fitted_width)
        # host memory widens by its own rule, in the log of bytes + 1 MiB the model works
        # in: one factor at any distance (1.063)
        memory = unwidened.predict(inputs)["peak_rss_bytes"]
        rule = shipped.widenings["peak_rss_bytes"]
        assert (rule.factor, rule.power) == (pytest.approx(1.063, abs=1e-3), 0.0)
        memory_scale = rule.scale(np.array([prediction.distance_from_training]))[0]
        assert memory_scale == rule.factor
        low, high = prediction.peak_memory_bytes_interval
        offset = 2.0 ** 20
        assert np.log((high + offset) / (prediction.peak_memory_bytes + offset)) == \
            pytest.approx(memory_scale * np.log((memory["hi"][0] + offset)
                                                / (memory["point"][0] + offset)))
