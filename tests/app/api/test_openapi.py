"""The OpenAPI document as client generators read it: named for the API, short explicit
operation ids, the Problem schema on every error, only the statuses a route can answer with,
typed bodies on every 2xx, enums for statuses and frameworks, binary downloads."""

from __future__ import annotations

import re
from typing import Any

import pytest

from app.api.errors import PROBLEM
from app.domain.states import JobStatus, StopReason, SweepStatus, TrialState
from app.main import create_app

DOCUMENT = create_app().openapi()
SCHEMAS = DOCUMENT["components"]["schemas"]
OPERATIONS = {
    f"{method.upper()} {path}": operation
    for path, item in DOCUMENT["paths"].items()
    for method, operation in item.items()
}


def test_the_title_does_not_name_a_generated_package_like_the_projects_client() -> None:
    assert DOCUMENT["info"]["title"] == "epochal API"  # -> epochal-api-client / epochal_api_client


def test_operation_ids_are_short_explicit_and_unique() -> None:
    ids = [operation["operationId"] for operation in OPERATIONS.values()]
    assert len(ids) == len(set(ids)) >= 25
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+){0,2}", i) for i in ids), ids
    expected = {
        "POST /v1/jobs": "create_job",
        "GET /v1/jobs": "list_jobs",
        "GET /v1/jobs/{job_id}": "get_job",
        "GET /v1/jobs/{job_id}/metrics": "list_metrics",
        "POST /v1/jobs/{job_id}/cancel": "cancel_job",
        "GET /v1/jobs/{job_id}/artifacts/model-card": "download_model_card",
        "GET /v1/sweeps/{sweep_id}": "get_sweep",
    }
    assert {k: OPERATIONS[k]["operationId"] for k in expected} == expected


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_each_operation_lists_what_it_answers(name: str) -> None:
    method, path = name.split(" ", 1)
    operation = OPERATIONS[name]
    responses: dict[str, Any] = operation["responses"]
    for status, response in responses.items():
        if int(status) >= 400:  # what the server sends: a Problem, as problem+json
            schema = response["content"][PROBLEM]["schema"]
            assert schema == {"$ref": "#/components/schemas/Problem"}, (status, response)
        elif 300 <= int(status) < 400:  # a redirect: where to, in its Location header
            assert response["headers"]["Location"]["schema"], (status, response)
        elif status != "204":
            assert response.get("content"), (status, response)
            assert all(media.get("schema") for media in response["content"].values())
    assert ("413" in responses) == ("requestBody" in operation)
    # its init.from_job or continues (a sweep's base.init.from_job): another key's is a 404
    names_a_job = name in ("POST /v1/jobs", "POST /v1/sweeps")
    assert ("404" in responses) == (path.startswith("/v1/") and ("{" in path or names_a_job))
    assert ("401" in responses) == (path.startswith("/v1/") or path == "/metrics")
    if method == "GET":
        assert "413" not in responses


def test_the_idempotent_replay_and_the_downloads_are_typed() -> None:
    submit = OPERATIONS["POST /v1/jobs"]["responses"]
    for status in ("200", "201"):
        schema = submit[status]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/JobPublic"}
    assert {"409", "429", "507"} <= set(submit)
    for kind in ("model", "onnx"):
        content = OPERATIONS[f"GET /v1/jobs/{{job_id}}/artifacts/{kind}"]["responses"]["200"]
        assert content["content"] == {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
        }


def test_statuses_and_frameworks_are_enums() -> None:
    def enum_of(model: str, field: str) -> list[str]:
        prop = SCHEMAS[model]["properties"][field]
        ref = prop.get("$ref") or next(o["$ref"] for o in prop["anyOf"] if "$ref" in o)
        return list(SCHEMAS[ref.rsplit("/", 1)[1]]["enum"])

    for model in ("JobPublic", "JobSummary"):
        assert enum_of(model, "status") == [s.value for s in JobStatus]
        assert enum_of(model, "stop_reason") == [s.value for s in StopReason]
        assert SCHEMAS[model]["properties"]["framework"]["enum"] == ["pytorch", "tensorflow"]
    assert enum_of("TransitionPublic", "to_status") == [s.value for s in JobStatus]
    assert enum_of("SweepSummary", "status") == [s.value for s in SweepStatus]
    assert enum_of("TrialPublic", "state") == [s.value for s in TrialState]
    assert "HTTPValidationError" not in SCHEMAS  # FastAPI's 422 shape: never sent
    assert set(SCHEMAS["Problem"]["properties"]) == {"type", "title", "status", "detail", "errors"}


def test_the_two_bearer_schemes_say_what_they_carry() -> None:
    schemes = DOCUMENT["components"]["securitySchemes"]
    assert set(schemes) == {"ApiKey", "MetricsToken"}
    assert "epochal keys create" in schemes["ApiKey"]["description"]
    assert "EPOCHAL_METRICS_TOKEN" in schemes["MetricsToken"]["description"]
