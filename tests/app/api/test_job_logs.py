"""GET /v1/jobs/{id}/logs (RELIABILITY.md §7): the last 200 lines by default, at most 5000
lines and 1 MiB, only to the job's key or an admin; a gang member's (`member`) from the lines
its worker shipped; on SQLite and on real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud, rank_log
from app.domain.job_files import JobFiles
from app.domain.job_log import MAX_LINE_CHARS, MAX_TAIL_BYTES, MAX_TAIL_LINES
from app.domain.states import ErrorCode
from app.domain.tables import RankLogLine
from tests.app.api.test_auth import BODY, auth
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


def gang_job(client: TestClient, key: str) -> str:
    body = {**BODY, "resources": {"nodes": 2}}
    response = client.post("/v1/jobs", json=body, headers=auth(key))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_a_gang_ranks_log_is_the_lines_its_worker_shipped(api: TestClient) -> None:
    alice = make_key("alice")
    job_id = gang_job(api, alice)
    with session_scope() as session:
        rank_log.append(session, job_id, 1, ["gang node 1 of 2", "/srv/epochal/x.npz read"])
    url = f"/v1/jobs/{job_id}/logs"
    body = api.get(url, params={"rank": 1}, headers=auth(alice)).json()
    assert body == {
        "job_id": job_id,
        "rank": 1,
        "member": 1,  # the deprecated name, kept for clients that read it
        "lines": ["gang node 1 of 2", "…/x.npz read"],  # server paths cut, as rank 0's
        "truncated": False,
    }
    assert api.get(url, params={"rank": 1, "tail": 1}, headers=auth(alice)).json()["truncated"]
    assert api.get(url, headers=auth(alice)).json()["lines"] == []  # rank 0: its file, none yet


def test_member_is_the_old_name_of_rank_and_the_two_must_agree(api: TestClient) -> None:
    alice = make_key("alice")
    job_id = gang_job(api, alice)
    with session_scope() as session:
        rank_log.append(session, job_id, 1, ["gang node 1 of 2"])
    url = f"/v1/jobs/{job_id}/logs"
    for params in ({"member": 1}, {"member": 1, "rank": 1}):
        body = api.get(url, params=params, headers=auth(alice)).json()
        assert (body["rank"], body["member"], body["lines"]) == (1, 1, ["gang node 1 of 2"])
    both = api.get(url, params={"member": 0, "rank": 1}, headers=auth(alice))
    assert both.status_code == 422
    assert "rank=1" in both.json()["detail"] and "member=0" in both.json()["detail"]


def test_a_rank_that_does_not_exist_is_a_404_and_a_negative_one_a_422(api: TestClient) -> None:
    alice = make_key("alice")
    gang, single = gang_job(api, alice), job_with_log(api, alice, ["one node"])
    missing = api.get(f"/v1/jobs/{gang}/logs", params={"rank": 2}, headers=auth(alice))
    assert missing.status_code == 404
    assert "ranks 0..1" in missing.json()["detail"]
    lone = api.get(f"/v1/jobs/{single}/logs", params={"rank": 1}, headers=auth(alice))
    assert lone.status_code == 404
    assert api.get(f"/v1/jobs/{single}/logs", params={"rank": 0}, headers=auth(alice)).json()[
        "lines"
    ] == ["one node"]
    for name in ("rank", "member"):
        negative = api.get(f"/v1/jobs/{gang}/logs", params={name: -1}, headers=auth(alice))
        assert negative.status_code == 422


def test_a_rank_keeps_its_newest_lines_as_many_as_a_tail_shows(api: TestClient) -> None:
    alice = make_key("alice")
    job_id = gang_job(api, alice)
    with session_scope() as session:
        rank_log.append(session, job_id, 1, [f"line {i}" for i in range(MAX_TAIL_LINES)])
    with session_scope() as session:
        rank_log.append(session, job_id, 1, ["line last", "x" * (MAX_LINE_CHARS + 10)])
        rank_log.append(session, job_id, 2, ["another rank's"])
    with session_scope() as session:
        lines, truncated = rank_log.tail(session, job_id, 1, MAX_TAIL_LINES + 1)
    assert len(lines) == MAX_TAIL_LINES and not truncated
    assert lines[0] == "line 2" and lines[-2] == "line last"
    assert len(lines[-1]) == MAX_LINE_CHARS


def test_deleting_a_job_deletes_its_ranks_lines(api: TestClient) -> None:
    alice = make_key("alice")
    job_id = gang_job(api, alice)
    with session_scope() as session:
        rank_log.append(session, job_id, 1, ["gang node 1 of 2"])
        job = crud.get_job(session, job_id)
        assert job is not None
        crud.force_fail_queued(session, job, ErrorCode.queue_timeout, "ended for the test")
    assert api.delete(f"/v1/jobs/{job_id}", headers=auth(alice)).status_code == 204
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(RankLogLine)) == 0
