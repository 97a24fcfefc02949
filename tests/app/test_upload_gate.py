"""Issue 25: `POST /v1/datasets` without a live key is a 401 before its body is read. FastAPI
parses (and spools) a multipart form before a route's dependencies run, so the key was checked
only once the whole upload had been received. The app is called as an ASGI server would, its
body handed over chunk by chunk, counting what it asks for. Both databases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import Message

from app.core.db import session_scope
from app.domain.keys import revoke
from tests.app.test_datasets import images, npz
from tests.conftest import make_key

MiB = 2**20
CHUNKS = 64  # a 64 MiB file: what the app would spool before its 401
BOUNDARY = "gate0boundary"


@pytest.fixture
def client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


def multipart(content: bytes | None) -> list[bytes]:
    """The chunks of a multipart upload of `content`, or of CHUNKS MiB of zeros."""
    head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="d.npz"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    body = [content] if content is not None else [bytes(MiB)] * CHUNKS
    return [head, *body, f"\r\n--{BOUNDARY}--\r\n".encode()]


def post(client: TestClient, authorization: str | None, content: bytes | None = None) -> Any:
    """(status, body chunks the app received) of the upload, sent as an ASGI server would."""
    chunks = multipart(content)
    headers = [
        (b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode()),
        (b"content-length", str(sum(map(len, chunks))).encode()),
    ]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/datasets", "raw_path": b"/v1/datasets",
        "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 40000), "server": ("testserver", 80),
    }  # fmt: skip
    received, answer = 0, {}

    async def receive() -> Message:
        nonlocal received
        if received == len(chunks):
            return {"type": "http.disconnect"}
        received += 1
        return {
            "type": "http.request",
            "body": chunks[received - 1],
            "more_body": received < len(chunks),
        }

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]

    async def call() -> None:
        await client.app(scope, receive, send)  # type: ignore[arg-type]

    assert client.portal is not None
    client.portal.call(call)
    return answer["status"], received


def test_an_upload_without_a_live_key_is_refused_before_its_body_is_read(
    client: TestClient,
) -> None:
    revoked = make_key("revoked")
    with session_scope() as session:
        assert revoke(session, revoked.split("_")[1])
    unknown = "ep_0123456789ab_" + "x" * 43
    for authorization in (
        None,
        "Basic abc",
        "Bearer junk",
        f"Bearer {unknown}",
        f"Bearer {revoked}",
    ):
        status, received = post(client, authorization)
        assert (status, received) == (401, 0), authorization  # was (401, 66): all of it read


def test_an_upload_with_a_live_key_is_read_and_stored(client: TestClient) -> None:
    status, received = post(client, f"Bearer {make_key('uploader')}", npz(**images()))
    assert (status, received) == (201, 3)
