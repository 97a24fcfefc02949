"""The stores under test: each test that takes `store` runs on a directory and on SeaweedFS
(the `seaweed` and `s3_env` fixtures are the whole suite's, in tests/conftest.py)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from app.storage.base import Store
from app.storage.registry import open_store
from tests.storage_server import BUCKET, SeaweedServer


@pytest.fixture(params=["directory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh, empty store: a folder, or a prefix of its own in SeaweedFS's test bucket."""
    if request.param == "directory":
        return open_store((tmp_path / "store").as_uri())
    server: SeaweedServer = request.getfixturevalue("seaweed")
    request.getfixturevalue("s3_env")
    return open_store(f"s3://{BUCKET}/t-{secrets.token_hex(4)}", server.endpoint)
