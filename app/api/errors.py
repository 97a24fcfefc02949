"""Errors as application/problem+json with a stable shape; never a stack trace over HTTP."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg import OperationalError as PsycopgOperationalError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolCheckoutTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.core.async_db import DatabaseUnavailable
from app.core.db import transient
from app.domain.redact import without_server_paths
from app.storage.base import StoreUnavailable

log = logging.getLogger(__name__)
PROBLEM = "application/problem+json"


def problem(status: int, detail: str, errors: list[dict[str, Any]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": without_server_paths(detail),  # a library's message may hold one
    }
    if errors is not None:
        body["errors"] = [{**e, "msg": without_server_paths(str(e.get("msg", "")))} for e in errors]
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def field_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    """Each offending field: where, what is wrong, the error type (no echo of the input)."""
    out = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            out.append(invalid_json(err))
            continue
        loc = [str(part) for part in err.get("loc", ())]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        out.append(
            {
                "loc": loc,
                "field": ".".join(loc[1:] if loc[:1] == ["body"] else loc),
                "msg": msg,
                "type": str(err.get("type", "value_error")),
            }
        )
    return out


def invalid_json(err: Any) -> dict[str, Any]:
    """A body that does not parse: what the parser expected and where, not a field "23"."""
    loc = list(err.get("loc", ()))
    where = f" at character {loc[1]} of the body" if len(loc) > 1 else ""
    reason = str((err.get("ctx") or {}).get("error") or "not JSON")
    msg = f"the body is not valid JSON: {reason}{where}"
    return {"loc": ["body"], "field": "", "msg": msg, "type": "json_invalid"}


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = field_errors(exc)
    detail = "; ".join(f"{e['field'] or 'body'}: {e['msg']}" for e in errors[:5])
    return problem(422, detail, errors)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    response = problem(exc.status_code, str(exc.detail))
    for key, value in (exc.headers or {}).items():
        response.headers[key] = value
    return response


# How long a client should wait before retrying a request the database could not serve.
DB_RETRY_AFTER_SECONDS = 2


def database_unavailable(exc: BaseException) -> bool:
    """A failure of the database rather than of the request: server away or restarting, our
    connection cut mid-query, a statement timeout, no pooled connection free in time."""
    if isinstance(exc, DBAPIError):
        return transient(exc)
    return isinstance(exc, PoolCheckoutTimeout | PsycopgOperationalError | DatabaseUnavailable)


async def _database(request: Request, exc: Exception) -> JSONResponse:
    if not database_unavailable(exc):
        return await _unexpected(request, exc)
    return unavailable(request.method, request.url.path, exc)


def unavailable(method: str, path: str, exc: BaseException) -> JSONResponse:
    """The 503 for a request the database could not serve, logged in one line."""
    # The client may retry: a 503 that says when, not a 500 (and no traceback in the log).
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    log.warning("database unavailable on %s %s: %s", method, path, reason)
    response = problem(503, "database unavailable; retry shortly")
    response.headers["Retry-After"] = str(DB_RETRY_AFTER_SECONDS)
    return response


# The store's client has already retried with backoff before giving up.
STORE_RETRY_AFTER_SECONDS = 5


async def _store(request: Request, exc: Exception) -> JSONResponse:
    """A store that is down or throttling: a 503 that says when to retry, never a 500."""
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    log.warning("store unavailable on %s %s: %s", request.method, request.url.path, reason)
    response = problem(503, "artifact store unavailable; retry shortly")
    response.headers["Retry-After"] = str(STORE_RETRY_AFTER_SECONDS)
    return response


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem(500, "internal error; the server log has the details")


def documented(when: str) -> dict[str, Any]:
    """An error answer in a route's `responses`; app.api.openapi gives it the Problem body."""
    return {"description": when}


# Shown on every /v1 route in OpenAPI; app.api.openapi adds 404, 413 and 422 where they apply.
V1_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: documented("no API key sent, a malformed one, or an unknown or revoked key"),
    503: documented("the database is unavailable for now; retry after `Retry-After` seconds"),
}


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    for database_error in (
        DBAPIError,
        PoolCheckoutTimeout,
        PsycopgOperationalError,
        DatabaseUnavailable,
    ):
        app.add_exception_handler(database_error, _database)
    app.add_exception_handler(StoreUnavailable, _store)
    app.add_exception_handler(Exception, _unexpected)
