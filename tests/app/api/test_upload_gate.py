"""`POST /v1/datasets` without a live key is a 401 before its body is read. FastAPI
parses (and spools) a multipart form before a route's dependencies run, so the key was checked
only once the whole upload had been received. The app is called as an ASGI server would, its
body handed over chunk by chunk, counting what it asks for. Both databases. One key's uploads
in flight are bounded too: the next is a 429, also before its body is read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from anyio import Event
from fastapi.testclient import TestClient
from starlette.types import Message

from app.api.upload_gate import UPLOADS
from app.core.config import get_settings
from app.core.db import session_scope
from app.domain.keys import revoke
from tests.app.api.test_datasets import images, npz
from tests.conftest import make_key
from tests.helpers import wait_until

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
    assert client.portal is not None
    return client.portal.call(send_upload, client, authorization, content, None)


async def send_upload(
    client: TestClient, authorization: str | None, content: bytes | None, held: Event | None
) -> tuple[int, int]:
    """post's upload; `held`: its body stops after the first chunk until the event is set."""
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
        if received == 1 and held is not None:
            await held.wait()
        received += 1
        return {
            "type": "http.request",
            "body": chunks[received - 1],
            "more_body": received < len(chunks),
        }

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]

    await client.app(scope, receive, send)
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


def test_a_keys_uploads_past_its_limit_get_429_before_their_body_is_read(
    client: TestClient,
) -> None:
    """Each upload holds its file and arrays in the API process: one key's at once are bounded."""
    busy, other = make_key("busy"), make_key("other")
    limit = get_settings().max_uploads_per_key
    content = npz(**images())
    assert client.portal is not None
    held = client.portal.call(Event)
    slow = [
        client.portal.start_task_soon(send_upload, client, f"Bearer {busy}", content, held)
        for _ in range(limit)
    ]
    wait_until(lambda: UPLOADS.held[busy.split("_")[1]] == limit, 10, "the uploads to start")
    refused = client.portal.call(refused_upload, client, f"Bearer {busy}", content)
    assert refused[:2] == (429, 0)
    assert "EPOCHAL_MAX_UPLOADS_PER_KEY" in refused[2] and refused[3] == "5"
    assert post(client, f"Bearer {other}", content) == (201, 3)  # another key's are not held up
    client.portal.call(held.set)
    assert [upload.result(timeout=30) for upload in slow] == [(201, 3)] * limit
    assert post(client, f"Bearer {busy}", content) == (201, 3)  # slots given back
    assert busy.split("_")[1] not in UPLOADS.held


async def refused_upload(
    client: TestClient, authorization: str, content: bytes
) -> tuple[int, int, str, str]:
    """An upload's status, body chunks read, problem detail and Retry-After, sent as post."""
    answer: dict[str, Any] = {}

    async def receive() -> Message:
        answer["read"] = answer.get("read", 0) + 1
        return {"type": "http.request", "body": content, "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
            answer["headers"] = dict(message["headers"])
        elif message["type"] == "http.response.body" and message.get("body"):
            answer["body"] = message["body"]

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/datasets", "raw_path": b"/v1/datasets",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
        "headers": [(b"authorization", authorization.encode()),
                    (b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode())],
    }  # fmt: skip
    await client.app(scope, receive, send)
    detail = json.loads(answer["body"])["detail"]
    return (
        answer["status"],
        answer.get("read", 0),
        detail,
        answer["headers"][b"retry-after"].decode(),
    )
