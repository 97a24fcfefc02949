"""A message is a wake-up: the worker claims the scheduler's pick and, when that is another
job, sends the message's own job a wake-up again (it may still need a worker that fits it)."""

from __future__ import annotations

import pytest

from app.core.config import get_settings
from app.core.db import session_scope
from app.domain import crud
from app.schemas.job_spec import JobSpec
from app.services import publish
from worker.supervisor import wakeup
from worker.supervisor.claimed import Claimed


def new_job(priority: int) -> str:
    spec = JobSpec.model_validate(
        {"framework": "pytorch", "dataset": {"name": "digits"}, "priority": priority}
    )
    with session_scope() as session:
        return crud.create_job(session, spec, "gpus-0").id


def test_a_message_spent_on_another_job_is_sent_again_for_its_own(
    db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    # the send itself (app.services.publish.republish looks it up when called)
    monkeypatch.setattr(publish, "publish_queued", lambda session, job: sent.append(job.id))
    low, high = new_job(10), new_job(90)
    claimed = wakeup.claim(get_settings(), "w1")
    assert isinstance(claimed, Claimed) and (claimed.job_id, claimed.attempt) == (high, 1)
    wakeup.try_republish(low)  # the message was low's: it still waits
    wakeup.try_republish(high)  # running now: nothing to send
    assert sent == [low]
