"""The model download streamed from the store: ranges (206), on a directory and on SeaweedFS,
and a 503 with Retry-After when the store is down."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from app.domain.states import JobStatus
from app.storage.registry import get_store
from epochal_client import Client
from tests.app.api.test_artifacts import job_with_files
from tests.conftest import make_key
from tests.helpers import clear_caches, free_port, scaled
from tests.storage_server import BUCKET, SeaweedServer

MODEL = os.urandom(3 * 1024 * 1024 + 17)  # several of the store's chunks, and a ragged end


@pytest.fixture(params=["directory", "s3"])
def client(
    request: pytest.FixtureRequest, sqlite_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    """The app, its store the default directory or a prefix of its own in SeaweedFS."""
    if request.param == "s3":
        server: SeaweedServer = request.getfixturevalue("seaweed")
        request.getfixturevalue("s3_env")
        monkeypatch.setenv("EPOCHAL_STORE_URL", f"s3://{BUCKET}/api-{secrets.token_hex(4)}")
        monkeypatch.setenv("EPOCHAL_STORE_ENDPOINT", server.endpoint)
        clear_caches()
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        test_client.headers["Authorization"] = f"Bearer {make_key('owner')}"
        yield test_client


def job_with_model(client: TestClient) -> str:
    job_id, files = job_with_files(client, JobStatus.succeeded)
    files.model("pytorch").unlink()
    get_store().put(f"{job_id}/model/model.pt", MODEL)  # where the directory store has it too
    return job_id


def test_the_model_streams_whole_and_by_range(client: TestClient) -> None:
    job_id = job_with_model(client)
    items = client.get(f"/v1/jobs/{job_id}/artifacts").json()["items"]
    listed = next(item for item in items if item["kind"] == "model")
    assert (listed["name"], listed["size_bytes"]) == ("model.pt", len(MODEL))
    url = listed["url"]
    whole = client.get(url)
    assert whole.status_code == 200 and whole.content == MODEL
    assert whole.headers["accept-ranges"] == "bytes"
    assert whole.headers["content-length"] == str(len(MODEL))
    assert whole.headers["content-disposition"].endswith('.pt"')
    size = len(MODEL)
    for asked, start, end in (
        ("bytes=10-19", 10, 20),
        ("bytes=1048570-1048580", 1048570, 1048581),  # across a chunk boundary
        ("bytes=-5", size - 5, size),
        (f"bytes={size - 3}-", size - 3, size),
        (f"bytes=0-{size + 100}", 0, size),
    ):
        part = client.get(url, headers={"Range": asked})
        assert part.status_code == 206, asked
        assert part.content == MODEL[start:end], asked
        assert part.headers["content-range"] == f"bytes {start}-{end - 1}/{size}"
    past = client.get(url, headers={"Range": f"bytes={size}-"})
    assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{size}"
    for ignored in ("bytes=1-2,5-6", "lines=1-2", "bytes=9-3"):
        assert client.get(url, headers={"Range": ignored}).content == MODEL, ignored
    stale = client.get(url, headers={"Range": "bytes=0-9", "If-Range": '"old"'})
    assert stale.status_code == 200 and stale.content == MODEL


def test_a_store_that_is_down_answers_503_with_retry_after(
    sqlite_env: dict[str, str], s3_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.main import create_app

    monkeypatch.setenv("EPOCHAL_STORE_URL", f"s3://{BUCKET}/gone")
    monkeypatch.setenv("EPOCHAL_STORE_ENDPOINT", f"http://127.0.0.1:{free_port()}")  # no one
    clear_caches()
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_key('owner')}"
        job_id, _ = job_with_files(client, JobStatus.succeeded)
        started = time.monotonic()
        answer = client.get(f"/v1/jobs/{job_id}/artifacts/model")
    assert time.monotonic() - started < scaled(40)
    assert answer.status_code == 503 and answer.headers["retry-after"].isdigit()
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "store unavailable" in answer.json()["detail"]


def test_a_missing_model_is_404_on_both(client: TestClient, tmp_path: Path) -> None:
    job_id, files = job_with_files(client, JobStatus.succeeded)
    files.model("pytorch").unlink()
    assert client.get(f"/v1/jobs/{job_id}/artifacts/model").status_code == 404


def test_presigned_downloads_redirect_to_the_store(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """EPOCHAL_STORE_PRESIGN_SECONDS: an S3 store's bytes come from the store itself, by a
    signed URL (ranges too), and the client follows without sending its key there; a
    directory store cannot sign, so the API streams as before."""
    monkeypatch.setenv("EPOCHAL_STORE_PRESIGN_SECONDS", "60")
    get_settings.cache_clear()
    job_id = job_with_model(client)
    url = f"/v1/jobs/{job_id}/artifacts/model"
    answer = client.get(url, follow_redirects=False)
    if get_store().presigned_get("x", 1, "x", "x") is None:  # the directory
        assert answer.status_code == 200 and answer.content == MODEL
        return
    assert answer.status_code == 307 and answer.headers["cache-control"] == "no-store"
    location = answer.headers["location"]
    assert location.startswith(os.environ["EPOCHAL_STORE_ENDPOINT"]) and "Signature" in location
    whole = httpx.get(location)
    assert whole.status_code == 200 and whole.content == MODEL
    assert whole.headers["content-disposition"].endswith('.pt"')
    part = httpx.get(location, headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.content == MODEL[10:20]
    assert httpx.get(location.replace("Signature=", "Signature=0")).status_code == 403  # signed
    # The client follows the redirect; the store never sees the API key.
    seen: list[httpx.Request] = []
    routed = Routed(client._transport, seen)
    with Client("http://testserver", client.headers["Authorization"][7:], transport=routed) as c:
        saved = c.download_model(job_id, tmp_path)
    assert saved.read_bytes() == MODEL and saved.suffix == ".pt"
    assert [r.url.host for r in seen] == ["127.0.0.1"]
    assert "authorization" not in seen[0].headers


class Routed(httpx.BaseTransport):
    """The app for testserver, the network for the rest (recorded)."""

    def __init__(self, app: httpx.BaseTransport, seen: list[httpx.Request]) -> None:
        self.app, self.network, self.seen = app, httpx.HTTPTransport(), seen

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "testserver":
            return self.app.handle_request(request)
        self.seen.append(request)
        return self.network.handle_request(request)
