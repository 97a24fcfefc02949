"""The stores under test: each test that takes `store` runs on a directory and on SeaweedFS."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.storage.base import Store
from app.storage.registry import open_store
from tests.storage_server import BUCKET, CREDENTIALS, SeaweedServer, start_seaweed


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One SeaweedFS for the session, stopped and its folder removed at the end."""
    server = start_seaweed(tmp_path_factory.mktemp("seaweed") / "data")
    yield server
    server.stop()


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The standard AWS variables, as a deployment sets them (no file of the user's read)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh, empty store: a folder, or a prefix of its own in SeaweedFS's test bucket."""
    if request.param == "directory":
        return open_store((tmp_path / "store").as_uri())
    server: SeaweedServer = request.getfixturevalue("seaweed")
    request.getfixturevalue("s3_env")
    return open_store(f"s3://{BUCKET}/t-{secrets.token_hex(4)}", server.endpoint)
