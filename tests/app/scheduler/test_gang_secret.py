"""A gang gets a secret of its own each time it forms, on every seat (each seat's
worker reads it there and gives it to its training process; the rendezvous asks every rank
for it), and no route shows it, not even to an admin."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import update

from app.core.db import session_scope
from app.domain.keys import create_key
from app.domain.tables import Job
from app.scheduler import gang
from tests.app.scheduler.test_gang import add_worker, claim, new_job, stopped


def secrets_of(job_id: str) -> list[str | None]:
    with session_scope() as session:
        return [seat.secret for seat in gang.seats_of(session, job_id)]


def test_a_gang_gets_a_fresh_secret_each_time_it_forms(db_env: dict[str, str]) -> None:
    job_id = new_job()
    for name in ("w1", "w2"):
        add_worker(name)
    claim("w1")
    assert secrets_of(job_id) == [None]  # forming: nothing to join yet
    claim("w2")
    first = secrets_of(job_id)
    assert first[0] is not None and re.fullmatch(r"[0-9a-f]{64}", first[0])
    assert first == [first[0]] * 2  # one per attempt, the same on every seat

    from app.main import create_app

    with session_scope() as session:
        admin = create_key(session, "root", is_admin=True)[1]
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        headers = {"Authorization": f"Bearer {admin}"}
        for route in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/logs", "/v1/workers"):
            seen = client.get(route, headers=headers)
            assert seen.status_code == 200 and first[0] not in seen.text, route

    with session_scope() as session:  # preempted, then re-queued: it forms again
        session.execute(update(Job).where(Job.id == job_id).values(preempted_by=new_job(1)))
    stopped(job_id)
    claim("w1")
    claim("w2")
    again = secrets_of(job_id)
    assert again[0] is not None and again == [again[0]] * 2 and again[0] != first[0]
