"""The OpenAPI document as client generators read it (openapi-python-client and the like).

FastAPI's document is refined in one place: every error answer is the Problem schema on
`application/problem+json` (what the server sends), each operation lists only the statuses it
can answer with (404 where the path names a resource, 413 where there is a body, 422 where
there is input), and FastAPI's own validation-error shapes, which the server never sends, go.
Operation ids are the routes' own (`create_job`, `get_job`, `list_metrics`, …), and the title
names the API, so a generated package (`epochal-api-client`) does not clash with the project's
own client (`epochal-client`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.errors import PROBLEM
from app.domain.states import JobStatus, StopReason, SweepStatus, TrialState
from app.schemas.api import FieldError, Problem

TITLE = "epochal API"
REF = "#/components/schemas/{model}"
PROBLEM_REF = {"$ref": REF.format(model="Problem")}
UNSENT = ("HTTPValidationError", "ValidationError")  # FastAPI's 422 shape; ours is Problem
# Fields the schemas keep as strings (app.schemas does not import app.domain), shown as the
# enums they hold: (schema, field) -> the enum.
ENUMS: dict[tuple[str, str], type[StrEnum]] = {
    **{(m, "status"): JobStatus for m in ("JobPublic", "JobSummary")},
    **{(m, "stop_reason"): StopReason for m in ("JobPublic", "JobSummary", "TrialPublic")},
    **{("TransitionPublic", f): JobStatus for f in ("from_status", "to_status")},
    **{(m, "status"): SweepStatus for m in ("SweepSummary", "SweepPublic")},
    ("TrialPublic", "state"): TrialState,
    ("TrialPublic", "status"): JobStatus,
}
# Statuses that follow from the shape of an operation, with what they mean there.
BY_SHAPE = {
    "404": "no such resource, or not yours",
    "413": "request body too large",
    "422": "invalid input; `errors` names each field",
}


def install(app: FastAPI) -> None:
    """Serve the refined document at /openapi.json (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=TITLE,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = refine(document)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def refine(document: dict[str, Any]) -> dict[str, Any]:
    """The document with problem bodies, per-operation statuses and no unsent schemas."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for model in (Problem, FieldError):
        schema = model.model_json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    for path, item in document.get("paths", {}).items():
        for operation in item.values():
            _statuses(path, operation)
            for status, response in operation.get("responses", {}).items():
                if int(status) < 400:
                    continue
                if _own_body(response):  # readyz's 503: its own body, or a Problem when busy
                    response["content"][PROBLEM] = {"schema": PROBLEM_REF}
                else:
                    response["content"] = {PROBLEM: {"schema": PROBLEM_REF}}
    for name in UNSENT:
        schemas.pop(name, None)
    _enums(schemas)
    return document


def _enums(schemas: dict[str, Any]) -> None:
    """Each ENUMS field refers to its enum's schema, kept nullable where it was."""
    for (model, field), enum in ENUMS.items():
        prop = schemas.get(model, {}).get("properties", {}).get(field)
        if prop is None:
            continue
        values = [member.value for member in enum]
        schemas[enum.__name__] = {"type": "string", "enum": values, "title": enum.__name__}
        ref = {"$ref": REF.format(model=enum.__name__)}
        nullable = any(option.get("type") == "null" for option in prop.get("anyOf", []))
        kept = {k: v for k, v in prop.items() if k in ("title", "description", "default")}
        prop.clear()
        prop.update(kept, **({"anyOf": [ref, {"type": "null"}]} if nullable else ref))


def _statuses(path: str, operation: dict[str, Any]) -> None:
    """Add the statuses the operation's shape implies; drop those it cannot answer with."""
    responses = operation.setdefault("responses", {})
    implied = {
        # or a body that names a resource (a job's init.from_job), where the route says so
        "404": path.startswith("/v1/") and ("{" in path or "404" in responses),
        "413": "requestBody" in operation,
        "422": bool(operation.get("parameters")) or "requestBody" in operation,
    }
    for status, applies in implied.items():
        if not applies:
            responses.pop(status, None)
        elif status not in responses or _unsent(responses[status]):
            responses[status] = {"description": BY_SHAPE[status]}


def _unsent(response: dict[str, Any]) -> bool:
    """FastAPI's own validation-error answer, which the server never sends."""
    text = str(response.get("content", {}))
    return any(f"/{name}'" in text for name in UNSENT)


def _own_body(response: dict[str, Any]) -> bool:
    """An error answer the route declares a body of its own for (readyz's 503), not Problem."""
    content = response.get("content") or {}
    schemas = [str(media.get("schema")) for media in content.values() if media.get("schema")]
    if not schemas:
        return False
    return not any("/Problem'" in s or any(f"/{n}'" in s for n in UNSENT) for s in schemas)
