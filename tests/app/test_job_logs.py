"""GET /v1/jobs/{id}/logs (RELIABILITY.md §7): the last 200 lines by default, at most 5000
lines and 1 MiB, only to the job's key or an admin; on SQLite and on real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.core.config import get_settings
from app.domain.job_files import JobFiles
from app.domain.job_log import MAX_TAIL_BYTES
from tests.app.test_auth import BODY, auth
from tests.conftest import make_key


@pytest.fixture
def api(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield client


def job_with_log(client: TestClient, key: str, lines: list[str]) -> str:
    job_id = str(client.post("/v1/jobs", json=BODY, headers=auth(key)).json()["id"])
    log = JobFiles.of(get_settings().resolved_artifacts_dir, job_id).log
    log.parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text("".join(f"{line}\n" for line in lines))
    return job_id


def test_the_tail_is_200_lines_by_default_and_5000_at_most(api: TestClient) -> None:
    alice = make_key("alice")
    job_id = job_with_log(api, alice, [f"line {i}" for i in range(6000)])
    url = f"/v1/jobs/{job_id}/logs"
    default = api.get(url, headers=auth(alice)).json()
    assert default["lines"] == [f"line {i}" for i in range(5800, 6000)] and default["truncated"]
    most = api.get(url, params={"tail": 5000}, headers=auth(alice)).json()
    assert len(most["lines"]) == 5000 and most["lines"][-1] == "line 5999"
    assert api.get(url, params={"tail": 5001}, headers=auth(alice)).status_code == 422


def test_a_tail_reads_at_most_one_mib(api: TestClient) -> None:
    alice = make_key("alice")
    job_id = job_with_log(api, alice, [f"{i:04d} " + "x" * 2000 for i in range(2000)])
    body = api.get(f"/v1/jobs/{job_id}/logs", params={"tail": 5000}, headers=auth(alice)).json()
    assert body["truncated"] and body["lines"][-1].startswith("1999 ")
    assert 0 < sum(len(line) + 1 for line in body["lines"]) <= MAX_TAIL_BYTES  # 4 MB on disk


def test_only_the_jobs_key_or_an_admin_reads_its_log(api: TestClient) -> None:
    alice, bob, admin = make_key("alice"), make_key("bob"), make_key("ops", admin=True)
    job_id = job_with_log(api, alice, ["a secret path"])
    url = f"/v1/jobs/{job_id}/logs"
    assert api.get(url, headers=auth(bob)).status_code == 404
    assert api.get(url, headers=auth(admin)).json()["lines"] == ["a secret path"]
