"""bench/api_fuzz.py: its cases are rebuilt from (seed, index) alone, and a sample of
them sent to the app in-process gets no 5xx (the bench sends thousands through gunicorn);
bench/api_faults.py tells crashed workers from recycled ones in gunicorn's log."""

from __future__ import annotations

from collections import Counter

import pytest
from test_api_support import SAMPLES_TOKEN, bearer, config, train_artifact

from costmodel.api import create_app


@pytest.fixture(scope="module")
def fuzz():
    from conftest import bench_module

    return bench_module("api_fuzz")


def test_a_case_is_the_same_whenever_it_is_rebuilt(fuzz):
    assert fuzz.case(3, 17, "t") == fuzz.case(3, 17, "t")
    assert fuzz.case(3, 17, "t") != fuzz.case(4, 17, "t")
    routes = Counter(fuzz.request(0, i)["route"] for i in range(300))
    assert set(routes) == {"/v1/predict", "/v1/advise", "/v1/blame", "/v1/samples", "GET ids"}
    assert min(routes.values()) > 20


def test_generated_requests_get_no_server_error_in_process(fuzz, tmp_path):
    model = train_artifact(tmp_path / "cpu", seed=1)
    app = create_app(config(tmp_path, model, SAMPLES_TOKEN=SAMPLES_TOKEN))
    client = app.test_client()
    statuses = Counter()
    for index in range(60):
        parts = fuzz.request(11, index)
        if parts["mutated"] is not None:
            continue  # raw framing: the gunicorn run sends those
        headers = {"Content-Type": "application/json", **bearer(SAMPLES_TOKEN)}
        response = client.open(parts["path"], method=parts["method"], data=parts["body"],
                               headers=headers)
        statuses[response.status_code] += 1
        assert response.status_code < 500, (index, response.json)
    # half the modules are valid before mutation: some get predictions, most are refused
    assert sum(statuses.values()) > 45 and statuses[200] > 2 and statuses[400] > 20


def test_crashed_workers_are_told_from_recycled_ones():
    from conftest import bench_module

    faults = bench_module("api_faults")
    log = "\n".join([
        "[INFO] Booting worker with pid: 10", "[INFO] Autorestarting worker after current request.",
        "[INFO] Worker (pid:10) was sent SIGTERM!", "[CRITICAL] WORKER TIMEOUT (pid:11)",
        "[ERROR] Worker (pid:11) was sent SIGKILL! Perhaps out of memory?",
        "[WARNING] Worker (pid:12) was sent SIGSEGV!", "[ERROR] Worker (pid:13) exited with code 1."])
    assert (faults.worker_crashes(log), faults.worker_recycles(log)) == (4, 1)
