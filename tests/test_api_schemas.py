"""The request models (`api.schemas`) as the server uses them: the document it serves
carries its own limits, and what it refuses is worded from the same schemas."""

from __future__ import annotations

import json

import psutil
import pytest
from test_api_support import config, error, feature_body, one_thread_model

from costmodel.api import create_app
from costmodel.features import MODEL_FEATURES

BAD = "Bad Request"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return one_thread_model(tmp_path_factory)


@pytest.fixture
def client(tmp_path, model_dir):
    return create_app(config(tmp_path, model_dir)).test_client()


def test_a_feature_past_the_float_range_is_out_of_range(client):
    # JSON has no infinity, but 1e400 parses to one
    body = json.dumps(feature_body(hlo_ops=12345.0)).replace("12345.0", "1e400")
    response = client.post("/v1/predict", data=body, content_type="application/json")
    assert response.json == error(400, BAD, "features.hlo_ops: must be a number >= 0 and "
                                  "<= 1e+30, got inf")


def test_openapi_document_carries_this_servers_limits(tmp_path, model_dir):
    client = create_app(config(tmp_path, model_dir, MAX_BATCH=3)).test_client()
    document = client.get("/openapi.json").json
    schemas = document["components"]["schemas"]
    assert document["openapi"].startswith("3.1")
    for batch in ("PredictBatch", "AdviseBatch"):
        assert schemas[batch]["properties"]["instances"]["maxItems"] == 3
    memory = schemas["SampleRequest"]["properties"]["peak_memory_bytes"]["anyOf"][0]
    assert memory["maximum"] == psutil.virtual_memory().total * 16
    assert schemas["FeatureVector"]["required"] == ["schema_version", *MODEL_FEATURES]
    assert schemas["SampleFeatureVector"]["properties"]["hlo_ops"]["maximum"] == 1e20
    # what the server refuses past that limit says the same number
    response = client.post("/v1/predict", json={"instances": [feature_body()] * 4})
    assert response.json["description"] == "instances: at most 3 programs per request, got 4"


@pytest.mark.parametrize("path, body, description", [
    # a misspelt field is said before the field it leaves missing
    ("/v1/blame", {"stablehlx": "x"}, "unknown field(s): stablehlx; allowed: stablehlo, "
     "backend, target (and 1 more problem)"),
    # each instance's missing features are one problem, named by where they are missing
    ("/v1/predict", {"instances": [{"features": {"schema_version": feature_body()[
        "features"]["schema_version"]}}] * 2},
     f"instances[0].features: missing {len(MODEL_FEATURES)} required feature(s): "
     f"{', '.join(MODEL_FEATURES)} (and 1 more problem)"),
])
def test_several_problems_are_said_one_first(client, path, body, description):
    response = client.post(path, json=body)
    assert response.json == error(400, BAD, description)
