"""What another node of a gang (not rank 0) learns at each renewal of its seat
(worker.supervisor.gang_seat.SeatKeeper): the job's status while its seat holds; the gang's
end once rank 0 has recorded it (the node's process then gets a grace to exit:
worker.supervisor.runner); and None (not this attempt's job: kill at once) when the job was
re-queued, moved to another attempt, or its seat went while it still runs."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.states import JobStatus
from app.domain.tables import GangSeat, Job, utcnow
from app.schemas.job_spec import JobSpec
from worker.protocol import GangNode
from worker.supervisor.gang_seat import Formed, SeatKeeper


def keeper_of_node_1(job: dict[str, Any], seated: bool) -> SeatKeeper:
    """Node 1's seat keeper for attempt 1 of a 2-node job whose row is set to `job`."""
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"name": "digits"}, "resources": {"nodes": 2}}
    )
    with session_scope() as session:
        job_id = crud.create_job(session, spec, "gpus-0").id
        session.execute(update(Job).where(Job.id == job_id).values(**job))
        if seated:
            later = utcnow() + timedelta(seconds=60)
            session.add(GangSeat(job_id=job_id, worker="w1", rank=1, lease_expires_at=later))
    node = GangNode(1, 2, "tcp://127.0.0.1:29500")
    formed = Formed(job_id, 1, spec.model_dump(), utcnow(), node, "w1")
    files = JobFiles.of(get_settings().resolved_artifacts_dir, job_id, 1)  # not read: rank 1
    return SeatKeeper(get_settings(), formed, time.monotonic(), files)


@pytest.mark.parametrize(
    ("job", "seated", "told"),
    [
        ({"status": JobStatus.running, "attempt": 1}, True, JobStatus.running),
        ({"status": JobStatus.cancelling, "attempt": 1}, True, JobStatus.cancelling),
        # rank 0 recorded the end and released the seats: the end, not a lost lease
        ({"status": JobStatus.succeeded, "attempt": 1}, False, JobStatus.succeeded),
        ({"status": JobStatus.failed, "attempt": 1}, False, JobStatus.failed),
        ({"status": JobStatus.running, "attempt": 1}, False, None),  # the gang dissolved
        ({"status": JobStatus.queued, "attempt": 1}, False, None),  # re-queued, not claimed yet
        ({"status": JobStatus.running, "attempt": 2}, True, None),  # another attempt's
    ],
)
def test_another_nodes_renewal_tells_the_gangs_end_apart_from_a_lost_seat(
    db_env: dict[str, str], job: dict[str, Any], seated: bool, told: JobStatus | None
) -> None:
    assert keeper_of_node_1(job, seated)._renew(None) == told
