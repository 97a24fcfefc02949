"""Where a job ran is an admin's to see: a plain key reads a job's error, transitions and
member logs, and the event stream, without worker hostnames, addresses or ports, as GET
/v1/workers shows it none (worker names as that route shows them); an admin key reads them as
written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.core.db import session_scope
from app.domain import crud, rank_log
from app.domain.keys import create_key
from app.domain.redact import public_worker_name
from app.domain.states import ErrorCode, StopReason
from app.domain.tables import GangSeat, Worker, utcnow
from app.scheduler import gang_reach
from app.schemas.job_spec import JobSpec

GANG = {"framework": "pytorch", "dataset": {"name": "digits"}, "resources": {"nodes": 2}}
SECRETS = ("gpu-box-7", "trainer-b", "10.0.3.7", "29500", "fe80::7")


@pytest.fixture
def app_client(db_env: dict[str, str]) -> Iterator[TestClient]:
    from app.main import create_app

    with TestClient(create_app(), raise_server_exceptions=False) as test_client:
        yield test_client


def failed_gang() -> tuple[str, str, str]:
    """A 2-node job failed as the scheduler fails a gang whose member is unreachable, with
    member 1's log naming the rendezvous; the owner's key and an admin's."""
    with session_scope() as session:
        owner, plain = create_key(session, "owner")
        admin = create_key(session, "root", is_admin=True)[1]
        job = crud.create_job(session, JobSpec.model_validate(GANG), "gpus-0", owner_id=owner.id)
        session.add(Worker(name="trainer-b", hostname="gpu-box-7", pid=1, devices=[], queues=[]))
        seats = [
            seat(job.id, "epochal@gpu-box-7-41", 0, "10.0.3.7", None),
            seat(job.id, "trainer-b", 1, "fe80::7", gang_reach.LOOPBACK),
        ]
        why = gang_reach.unreachable(seats)
        assert why is not None and "fe80::7" in why and "trainer-b" in why
        message = f"{why}; rendezvous tcp://gpu-box-7:29500 at 10.0.3.7:29500 ([fe80::7]:29501)"
        crud.force_fail_queued(session, job, ErrorCode.invalid_config, message, StopReason.error)
        rank_log.append(session, job.id, 1, ["joined tcp://10.0.3.7:29500 from gpu-box-7"])
        return job.id, plain, admin


def seat(job_id: str, worker: str, rank: int, address: str, local_only: str | None) -> GangSeat:
    return GangSeat(
        job_id=job_id,
        worker=worker,
        rank=rank,
        address=address,
        port=29500 + rank,
        machine_netns=f"machine-{rank}/net",
        local_only=local_only,
        lease_expires_at=utcnow(),
    )


def test_a_plain_key_reads_its_gangs_failure_without_hosts_addresses_or_ports(
    app_client: TestClient,
) -> None:
    job_id, plain, admin = failed_gang()
    as_plain = {"Authorization": f"Bearer {plain}"}
    seen = app_client.get(f"/v1/jobs/{job_id}", headers=as_plain)
    log = app_client.get(f"/v1/jobs/{job_id}/logs?rank=1", headers=as_plain)
    assert seen.status_code == log.status_code == 200
    for text in (seen.text, log.text):
        assert not [secret for secret in SECRETS if secret in text], text
    assert "node 1 (worker@" in seen.json()["error"] and "<address>" in seen.json()["error"]
    assert log.json()["lines"] == ["joined tcp://<address> from <host>"]

    as_admin = {"Authorization": f"Bearer {admin}"}
    full = app_client.get(f"/v1/jobs/{job_id}", headers=as_admin).text
    full_log = app_client.get(f"/v1/jobs/{job_id}/logs?rank=1", headers=as_admin).text
    assert all(secret in full for secret in SECRETS) and "gpu-box-7" in full_log


def test_what_is_not_an_address_is_kept() -> None:
    """Times of day, C++ scopes, versions, ratios and URLs of the web stay as they were."""
    from app.domain.redact import without_hosts

    kept = [
        "2026-12-05 06:47:15 supervisor: epoch 3 of 10, loss 0.25",
        "c10::Error in std::vector; torch 2.4.1, ratio 1:2:3, lr 1e-3",
        "see https://pytorch.org/docs/stable/distributed.html (NCCL 2.21.5)",
        "val [0.5] [1.] [3] [a:b] at 12:30:05.123 (eth0, aa:bb:cc:dd:ee:ff)",
    ]
    assert [without_hosts(line) for line in kept] == kept
    assert without_hosts("peer 192.168.1.20:29400 and ::1 gone.") == (
        "peer <address> and <address> gone."
    )


def test_the_event_stream_names_no_gang_host(db_env: dict[str, str]) -> None:
    """A stream's message is written once for all its subscribers: hidden for every key."""
    from app.services.live_events import Cursor, read_new_events

    job_id = failed_gang()[0]
    events = read_new_events({job_id: Cursor()})[job_id]
    reasons = " ".join(str(event.data["reason"]) for event in events if event.kind == "transition")
    assert "offers <address>" in reasons
    assert not [secret for secret in SECRETS if secret in reasons], reasons


def test_a_plain_key_reads_which_worker_claimed_its_job_as_workers_shows_it(
    app_client: TestClient,
) -> None:
    """A one-node job's transitions name its worker too (the fast path answers these)."""
    with session_scope() as session:
        owner, plain = create_key(session, "owner")
        admin = create_key(session, "root", is_admin=True)[1]
        spec = JobSpec.model_validate({**GANG, "resources": {"nodes": 1}})
        job_id = crud.create_job(session, spec, "gpus-0", owner_id=owner.id).id
        assert crud.claim_job(session, job_id, "epochal@gpu-box-9-77", 60) is not None
    seen = app_client.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {plain}"})
    reasons = [t["reason"] for t in seen.json()["transitions"]]
    assert reasons[-1] == f"claimed by {public_worker_name('epochal@gpu-box-9-77')}"
    assert "gpu-box-9" not in seen.text
    full = app_client.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {admin}"})
    assert "claimed by epochal@gpu-box-9-77" in full.text
