"""The committed OpenAPI document is the served one, and a change to the API that can break a
client is caught unless CHANGELOG.md records it: each kind on small hand-made documents, and the
served document itself."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tools.openapi_compat import (
    CHANGELOG,
    DOCUMENT,
    STALE,
    WRITE,
    check,
    dumps,
    report,
    served,
    unrecorded,
)
from tools.openapi_diff import breaking_changes

SERVED = served()
Document = dict[str, Any]


def test_the_committed_document_is_the_served_one() -> None:
    committed = DOCUMENT.read_text()
    if committed != dumps(SERVED):
        changes = breaking_changes(json.loads(committed), SERVED)
        pytest.fail(f"{STALE}\n{report(changes, CHANGELOG.read_text())}")


def test_the_served_document_has_no_breaking_change_against_itself() -> None:
    assert breaking_changes(SERVED, copy.deepcopy(SERVED)) == []


def test_a_change_to_the_served_api_is_named_by_its_schema_and_role() -> None:
    changed = copy.deepcopy(SERVED)
    schemas = changed["components"]["schemas"]
    del schemas["JobPublic"]["properties"]["status"]
    schemas["JobSpec"]["required"] = [*schemas["JobSpec"].get("required", []), "epochs_x"]
    schemas["JobSpec"]["properties"]["epochs_x"] = {"type": "integer"}
    assert breaking_changes(SERVED, changed) == [
        "schema JobPublic (response): removed property status",
        "schema JobSpec (request): new required property epochs_x",
    ]


def ref(name: str) -> Document:
    return {"$ref": f"#/components/schemas/{name}"}


def json_body(schema: Document) -> Document:
    return {"content": {"application/json": {"schema": schema}}}


def base() -> Document:
    """A small API: list, get and create jobs; a job in responses, a closed spec in requests
    (and echoed in the job), a status enum in responses and a query."""
    limit = {"name": "limit", "in": "query", "required": False, "schema": {"type": "integer"}}
    status = {"name": "status", "in": "query", "schema": {"anyOf": [ref("Status"), {}]}}
    job = {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "status": ref("Status"),
            "epochs": {"type": "integer"},
            "predictions": {"type": "array", "items": {"type": "integer"}},
            "tree": ref("Node"),
            "spec": ref("Spec"),
        },
        "required": ["id", "status"],
    }
    spec = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "epochs": {"type": "integer"},
            "seed": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "optimizer": {"type": "string", "enum": ["sgd", "adam"]},
            "model": {"oneOf": [ref("Mlp"), ref("Cnn")]},
        },
        "required": ["epochs"],
    }
    node = {  # refers to itself: the comparison must end
        "type": "object",
        "properties": {"name": {"type": "string"}, "children": {"items": ref("Node")}},
    }
    layers = {"type": "object", "properties": {"layers": {"type": "integer"}}}
    return {
        "paths": {
            "/v1/jobs": {
                "get": {"parameters": [limit, status], "responses": {"200": json_body(ref("Job"))}},
                "post": {
                    "requestBody": {"required": False, **json_body(ref("Spec"))},
                    "responses": {"201": json_body(ref("Job")), "422": {"description": "bad"}},
                },
            },
            "/v1/jobs/{job_id}": {
                "get": {"responses": {"200": json_body(ref("Job")), "404": {"description": "no"}}}
            },
        },
        "components": {
            "schemas": {
                "Job": job,
                "Spec": spec,
                "Status": {"type": "string", "enum": ["queued", "running"]},
                "Node": node,
                "Mlp": layers,
                "Cnn": copy.deepcopy(layers),
            }
        },
    }


Change = Callable[[Document], None]


# Each returns the part of the document itself, for a change to change it.
def schemas(document: Document) -> Document:
    found: Document = document["components"]["schemas"]
    return found


def props(document: Document, name: str) -> Document:
    found: Document = schemas(document)[name]["properties"]
    return found


def operation(document: Document, path: str, method: str = "get") -> Document:
    found: Document = document["paths"][path][method]
    return found


def limit(document: Document) -> Document:
    found: Document = operation(document, "/v1/jobs")["parameters"][0]
    return found


def new_param(required: bool) -> Change:
    param = {"name": "owner", "in": "query", "required": required, "schema": {"type": "string"}}
    return lambda d: operation(d, "/v1/jobs")["parameters"].append(param)


def new_property(schema: str, required: bool) -> Change:
    def change(document: Document) -> None:
        props(document, schema)["extra"] = {"type": "string"}
        schemas(document)[schema]["required"] += ["extra"] if required else []

    return change


def write_out_job(document: Document, without: str) -> None:
    """GET /v1/jobs/{job_id}'s job written out in place, less the property `without`."""
    job = copy.deepcopy(schemas(document)["Job"])
    job["properties"].pop(without, None)
    operation(document, "/v1/jobs/{job_id}")["responses"]["200"] = json_body(job)


BREAKING: dict[str, tuple[Change, str]] = {
    "operation": (
        lambda d: d["paths"]["/v1/jobs"].pop("post"),
        "POST /v1/jobs: removed operation",
    ),
    "path": (
        lambda d: d["paths"].pop("/v1/jobs/{job_id}"),
        "GET /v1/jobs/{job_id}: removed operation",
    ),
    "response status": (
        lambda d: operation(d, "/v1/jobs/{job_id}")["responses"].pop("404"),
        "GET /v1/jobs/{job_id} 404: removed response",
    ),
    "response content type": (
        lambda d: operation(d, "/v1/jobs")["responses"].update({"200": {"content": {}}}),
        "GET /v1/jobs 200: removed content type application/json",
    ),
    "response property": (
        lambda d: props(d, "Job").pop("epochs"),
        "schema Job (response): removed property epochs",
    ),
    "response property optional": (
        lambda d: schemas(d)["Job"].update(required=["status"]),
        "schema Job (response): property id no longer required",
    ),
    "response type": (
        lambda d: props(d, "Job").update(epochs={"type": "string"}),
        "schema Job (response): type of epochs changed: integer -> string",
    ),
    "response nullable": (
        lambda d: props(d, "Job").update(epochs={"type": ["integer", "null"]}),
        "schema Job (response): type of epochs changed: integer -> integer, null",
    ),
    "format": (
        lambda d: props(d, "Job").update(id={"type": "string", "format": "uuid"}),
        "schema Job (response): format of id changed: none -> uuid",
    ),
    "response enum value": (
        lambda d: schemas(d)["Status"]["enum"].append("preempted"),
        'schema Status (request and response): new values: "preempted"',
    ),
    "enum value removed": (
        lambda d: schemas(d)["Status"]["enum"].remove("running"),
        'schema Status (request and response): removed values: "running"',
    ),
    "request enum value removed": (
        lambda d: props(d, "Spec")["optimizer"]["enum"].remove("adam"),
        'schema Spec (request): removed values of optimizer: "adam"',
    ),
    "request variant removed": (
        lambda d: props(d, "Spec").update(model={"oneOf": [ref("Mlp"), ref("Gpt")]}),
        "schema Spec (request): removed variants of model: Cnn",
    ),
    "request type narrowed": (
        lambda d: props(d, "Spec").update(seed={"type": "integer"}),
        "schema Spec (request): type of seed changed: integer, null -> integer",
    ),
    "new required request property": (
        new_property("Spec", required=True),
        "schema Spec (request): new required property extra",
    ),
    "request property required": (
        lambda d: schemas(d)["Spec"]["required"].append("optimizer"),
        "schema Spec (request): property optimizer became required",
    ),
    "closed request property": (
        lambda d: props(d, "Spec").pop("optimizer"),
        "schema Spec (request): removed property optimizer",
    ),
    "request body required": (
        lambda d: operation(d, "/v1/jobs", "post")["requestBody"].update(required=True),
        "POST /v1/jobs: request body became required",
    ),
    "parameter": (
        lambda d: operation(d, "/v1/jobs")["parameters"].pop(0),
        "GET /v1/jobs: removed parameter query limit",
    ),
    "parameter required": (
        lambda d: limit(d).update(required=True),
        "GET /v1/jobs: parameter query limit became required",
    ),
    "new required parameter": (
        new_param(required=True),
        "GET /v1/jobs: new required parameter query owner",
    ),
    "parameter type": (
        lambda d: limit(d).update(schema={"type": "string"}),
        "GET /v1/jobs parameter query limit: type changed: integer -> string",
    ),
    "component written out in place": (
        lambda d: write_out_job(d, without="epochs"),
        "GET /v1/jobs/{job_id} 200: removed property epochs",
    ),
    "inside a cycle": (
        lambda d: props(d, "Node").update(name={"type": "integer"}),
        "schema Node (response): type of name changed: string -> integer",
    ),
}

ADDITIONS: dict[str, Change] = {
    "operation": lambda d: d["paths"].update({"/v1/queue": {"get": {"responses": {}}}}),
    "response status": lambda d: operation(d, "/v1/jobs")["responses"].update({"409": {}}),
    "optional request property": new_property("Spec", required=False),
    "response property": new_property("Job", required=True),
    "request enum value": lambda d: props(d, "Spec")["optimizer"]["enum"].append("rmsprop"),
    "optional parameter": new_param(required=False),
    "request type widened": lambda d: props(d, "Spec").update(epochs={"type": ["integer", "null"]}),
    "response property required": lambda d: schemas(d)["Job"]["required"].append("epochs"),
    "response values restricted": lambda d: props(d, "Job")["id"].update(enum=["a", "b"]),
    "component written out in place": lambda d: write_out_job(d, without=""),
    "descriptions": lambda d: props(d, "Job")["id"].update(description="the job's id"),
}


@pytest.mark.parametrize("kind", BREAKING, ids=str)
def test_each_kind_of_breaking_change_is_found(kind: str) -> None:
    change, line = BREAKING[kind]
    old, new = base(), base()
    change(new)
    assert breaking_changes(old, new) == [line]


@pytest.mark.parametrize("kind", ADDITIONS, ids=str)
def test_an_addition_is_not_breaking(kind: str) -> None:
    new = base()
    ADDITIONS[kind](new)
    assert new != base()
    assert breaking_changes(base(), new) == []


def test_class_indices_becoming_names_in_a_response_list_is_caught() -> None:
    """The predictions of a job whose data set names its classes: integers became strings."""
    new = base()
    props(new, "Job")["predictions"]["items"] = {"type": "string"}
    line = "schema Job (response): type of predictions[] changed: integer -> string"
    assert breaking_changes(base(), new) == [line]


def test_a_changelog_entry_lets_exactly_its_change_through() -> None:
    changes = ["schema Job (response): removed property epochs"]
    entry = "## Unreleased\n\n- `schema Job (response): removed property epochs`: use `steps`.\n"
    assert unrecorded(changes, entry) == []
    assert unrecorded(changes, entry.replace("epochs`", "epochs_total`")) == changes
    assert unrecorded(changes, "## Unreleased\n") == changes


def test_write_refuses_an_unrecorded_breaking_change_and_check_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document, changelog = tmp_path / "openapi.json", tmp_path / "CHANGELOG.md"
    old = copy.deepcopy(SERVED)
    old["paths"]["/v1/gone"] = {"get": {"responses": {}}}
    document.write_text(dumps(old))
    changelog.write_text("# Changelog\n\n## Unreleased\n")
    assert check(document, changelog, SERVED, write=False) == 1
    assert WRITE in capsys.readouterr().err
    assert check(document, changelog, SERVED, write=True) == 1
    assert "GET /v1/gone: removed operation" in capsys.readouterr().err
    assert document.read_text() == dumps(old)
    changelog.write_text("## Unreleased\n\n- GET /v1/gone: removed operation (use /v1/here)\n")
    assert check(document, changelog, SERVED, write=True) == 0
    assert document.read_text() == dumps(SERVED)
    assert check(document, changelog, SERVED, write=False) == 0
