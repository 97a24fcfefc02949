"""Schemathesis against the app's own OpenAPI schema, in-process (ASGI), on a real SQLite
database and filesystem broker in tmp, with an API key: no request it makes gets a 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis.internal import lambda_sources
from schemathesis.checks import not_a_server_error

from app.main import create_app
from tests.conftest import make_key


def _describe_lambda(f: object) -> str:
    """Hypothesis names its filters by parsing their lambda's source; on CPython 3.11.7 that
    ast.parse fails with "AST constructor recursion depth mismatch" (a SystemError) when
    another thread parses at the same time. The name is only a repr."""
    try:
        return _lambda_description(f)
    except SystemError:
        return "lambda: <unknown>"


_lambda_description = lambda_sources._lambda_description
lambda_sources._lambda_description = _describe_lambda
app = create_app()
# POST /v1/jobs/{id}/predict also takes an .npy body (a binary string in the schema): sent as is.
schemathesis.serializer.alias("application/x-npy", "application/octet-stream")
# The schema straight from the app, not from_asgi("/openapi.json", app): that serves it through
# the app's lifespan, whose maintenance thread then ran on while the other test modules were
# collected, on no database, and logged its failures; Python 3.11's traceback formatting
# parses source (ast), and a parse beside pytest's assertion rewriting failed another module's
# collection ("AST constructor recursion depth mismatch", CPython gh-106905).
schema = schemathesis.openapi.from_dict(orjson.loads(orjson.dumps(app.openapi())))
schema.app = app
schema.location = "/openapi.json"


@pytest.fixture
def api_headers(sqlite_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Requests resolve the database per call, so this test's SQLite file serves them."""
    yield {"Authorization": f"Bearer {make_key('fuzzer')}"}


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_no_request_gets_a_server_error(
    case: schemathesis.Case, api_headers: dict[str, str]
) -> None:
    # Only the server-error check: errors are application/problem+json with codes
    # (401/404/409/413/429) the generated schema does not list per route, and a schema-valid
    # cursor can still be one this API never issued (422) — neither is a defect.
    case.call_and_validate(headers=api_headers, checks=[not_a_server_error])
