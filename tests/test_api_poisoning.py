"""Poisoned samples against the retrain screen: copies of one program told apart only by a
comment, and one source's samples outnumbering the rows it did not send.

Real measured rows and the memorizing recipe (conftest's `shipped`, `served`), so that a
fit takes about a second; an honest batch is accepted in test_api_retrain.py
(`test_a_better_candidate_is_promoted_although_the_current_model_saw_the_holdout`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from retrain_support import sample_body, send, service
from test_api_support import SAMPLES_TOKEN, TOKEN, bearer, stablehlo, wait_for_job
from threadpoolctl import threadpool_limits

from costmodel.features import MODEL_FEATURES
from costmodel.training.evaluation.promotion import compare
from costmodel.training.evaluation.sample_groups import GROUP_PREFIX, program_groups, weigh_samples


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    with threadpool_limits(1):
        yield


@pytest.fixture(autouse=True)
def _numbered(numbered_sample_ids):
    """Sample ids in the order samples arrive (conftest)."""


def _retrain(client) -> dict:
    response = client.post("/v1/retrain", headers=bearer(TOKEN))
    assert response.status_code == 202, response.json

    def get(job_id):
        return client.get(f"/v1/retrain/{job_id}", headers=bearer(TOKEN)).json
    return wait_for_job(get, response.json["job"])


def _honest_predictions(client, shipped_rows, programs) -> np.ndarray:
    """Predicted compile seconds of honest programs: shipped rows' feature vectors and
    StableHLO modules."""
    bodies = [{"features": sample_body(r)["features"], "backend": "cpu"}
              for r in shipped_rows.to_dict("records")]
    bodies += [{"stablehlo": text} for text in programs]
    out = []
    for body in bodies:
        response = client.post("/v1/predict", json=body)
        assert response.status_code == 200, response.json
        out.append(response.json["predictions"][0]["compile_seconds"])
    return np.array(out)


def test_comment_salted_copies_of_one_program_do_not_move_the_model(tmp_path, served,
                                                                      shipped):
    app, client = service(tmp_path, served, shipped)
    honest = shipped[1].sample(40, random_state=3)
    programs = [stablehlo(5), stablehlo(3), stablehlo(8)]
    before = _honest_predictions(client, honest, programs)
    target = stablehlo(5)
    measured = before[len(honest)]
    # each copy its own program_sha256, one program: told apart by a comment alone
    for i in range(120):
        response = client.post("/v1/samples", headers=bearer(SAMPLES_TOKEN), json={
            "stablehlo": target + f"\n// run {i}\n", "backend": "cpu",
            "compile_seconds": 100.0 * measured})
        assert response.status_code == 201, response.json
    job = _retrain(client)
    (result,) = job["results"]
    assert result["samples"] == 120 and result["sample_groups"] == 1
    after = _honest_predictions(client, honest, programs)
    ratio = np.maximum(after / before, before / after)
    assert ratio.max() <= 1.1, (job, ratio.max())
    assert after[len(honest)] <= 1.1 * measured


def test_one_source_outnumbering_the_shipped_rows_does_not_decide_promotion(
        tmp_path, served, shipped):
    # 900 distinct junk programs from one client, all "5 s": twice the 441 shipped rows.
    app, client = service(tmp_path, served, shipped)
    version = client.get("/v1/models").json["models"][0]["version"]
    honest = shipped[1].sample(40, random_state=4)
    before = _honest_predictions(client, honest, [])
    junk = shipped[1].sample(900, replace=True, random_state=5).reset_index(drop=True)
    rng = np.random.default_rng(6)
    for name in MODEL_FEATURES:
        column = f"f_{name}"
        junk[column] = junk[column] * rng.uniform(0.5, 2.0, len(junk))
    junk["compile_seconds"] = 5.0
    send(client, junk, client_address="10.9.9.9")
    stored = app.extensions["costmodel"].samples.rows()
    assert stored["client"].value_counts().to_dict() == {"10.9.9.9": 900}
    job = _retrain(client)
    (result,) = job["results"]
    # the source brings at most half as many programs as the shipped rows; the screen
    # drops most of those; every shipped held-out row is scored on its own
    assert (result["samples"], result["sample_groups"], result["capped_groups"]) == (
        900, 900, 900 - 220)
    assert result["dropped_samples"] > 150 and result["trusted_holdout_rows"] == 85
    assert job["status"] == "rejected" and not result["swapped"], result
    assert client.get("/v1/models").json["models"][0]["version"] == version
    assert np.array_equal(_honest_predictions(client, honest, []), before)


# -- the pieces, on exact synthetic rows ----------------------------------------------------

def _samples(base, copies: int, client: str, seconds: float):
    out = base.loc[base.index.repeat(copies)].reset_index(drop=True)
    out["family"], out["client"] = "sample", client
    out["row_id"] = [f"{client}-{i}" for i in range(len(out))]
    out["compile_seconds"] = seconds * np.arange(1, len(out) + 1)
    return out


def test_copies_of_one_program_weigh_as_one_row_with_their_median_label(synthetic_rows):
    trusted = synthetic_rows(np.arange(10, 110, 10.0))
    sent = _samples(trusted.iloc[[0]], 7, "a", 1.0)  # labels 1..7 s, one program
    rows = pd.concat([trusted, sent], ignore_index=True)
    weighed = weigh_samples(rows, (rows["family"] == "sample").to_numpy())
    assert (weighed.samples, weighed.groups, weighed.capped) == (7, 1, 0)
    assert len(weighed.rows) == 11
    group = weighed.rows.iloc[-1]
    assert group["compile_seconds"] == 4.0 and group["copies"] == 7
    assert group["row_id"] == group["key"] and group["row_id"].startswith(GROUP_PREFIX)
    # the trusted row with the same features stays a row of its own
    assert (program_groups(weighed.rows.iloc[[0]]) == program_groups(
        weighed.rows.iloc[[-1]])).all()


def test_one_source_brings_at_most_its_share_of_programs(synthetic_rows):
    trusted = synthetic_rows(np.arange(1.0, 201.0))
    many = synthetic_rows(np.arange(300.0, 460.0), seed=7)
    many["family"], many["client"] = "sample", "10.0.0.1"
    few = synthetic_rows(np.arange(500.0, 510.0), seed=8)
    few["family"], few["client"] = "sample", "10.0.0.2"
    rows = pd.concat([trusted, many, few], ignore_index=True)
    weighed = weigh_samples(rows, (rows["family"] == "sample").to_numpy(), share=0.5,
                            min_source_rows=5)
    kept = weighed.rows[weighed.rows["family"] == "sample"]
    assert kept["client"].value_counts().to_dict() == {"10.0.0.1": 100, "10.0.0.2": 10}
    assert (weighed.samples, weighed.groups, weighed.capped) == (170, 170, 60)
    # the same choice in every job, whatever order the rows come in
    again = weigh_samples(rows[::-1].reset_index(drop=True),
                          (rows["family"] == "sample").to_numpy()[::-1], share=0.5,
                          min_source_rows=5)
    assert set(again.rows["row_id"]) == set(weighed.rows["row_id"])


def test_a_candidate_better_only_on_sent_rows_is_not_promoted(synthetic_rows):
    # held out: 10 shipped rows and 30 sent ones labelled 20x; the candidate fits the sent
    # ones exactly and misses the shipped ones 3x, the current model the reverse
    trusted = synthetic_rows(np.arange(10, 110, 10.0))
    sent = synthetic_rows(np.arange(200, 500, 10.0), seed=3)
    sent["family"] = "sample"
    sent["compile_seconds"] *= 20
    holdout = pd.concat([trusted, sent], ignore_index=True)
    shipped = (holdout["family"] != "sample").to_numpy()
    candidate, current = _Rule(3.0, 20.0), _Rule(1.0, 1.0)
    verdict = compare(candidate, current, holdout.iloc[:0], holdout, [], "cpu", "",
                      trusted=shipped)
    assert verdict.score_new == pytest.approx(0.0, abs=1e-12)
    assert verdict.score_to_beat == pytest.approx(np.log(20.0))
    assert verdict.score_new_trusted == pytest.approx(np.log(3.0))
    assert verdict.score_to_beat_trusted == pytest.approx(0.0, abs=1e-12)
    assert verdict.trusted_holdout_rows == 10 and not verdict.swapped
    # scored on every held-out row as if all were shipped, it would have been promoted
    assert compare(candidate, current, holdout.iloc[:0], holdout, [], "cpu", "").swapped


class _Rule:
    """Predicts the exact synthetic rule (conftest `make_rows`) times `shipped` for rows of
    fewer than 200 ops (the shipped ones here), times `sent` for the others."""

    def __init__(self, shipped: float, sent: float):
        self.shipped, self.sent = shipped, sent

    def predict(self, frame):
        ops = frame["hlo_ops"].to_numpy(float)
        return {"compile_seconds": {"point": 1e-6 * ops**2 * np.where(
            ops < 200, self.shipped, self.sent)}}
