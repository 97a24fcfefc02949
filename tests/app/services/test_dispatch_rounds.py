"""A maintenance round while the broker is down (RELIABILITY.md §3), on a real database and
broker: the first failed publish ends the round's sending, so a down broker costs one publish
timeout per round, not one per queued job; the next round with the broker back sends them all."""

from __future__ import annotations

import pytest

from app.services import maintenance
from tests.app.services.test_maintenance import messages, new_job, reconcile, stored
from tests.helpers import clear_caches, free_port


def test_a_round_stops_sending_at_the_first_failed_publish(
    db_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs, before = [new_job() for _ in range(3)], messages(db_env, "gpus-0")
    tried: list[str] = []
    publish = maintenance.publish_queued

    def counted(session, job):  # type: ignore[no-untyped-def]
        tried.append(job.id)
        return publish(session, job)

    monkeypatch.setattr(maintenance, "publish_queued", counted)
    monkeypatch.setenv("EPOCHAL_BROKER_URL", f"redis://127.0.0.1:{free_port()}/0")  # nobody
    clear_caches()
    reconcile()
    assert len(tried) == 1 and all(stored(job.id).dispatched_at is None for job in jobs)
    if "EPOCHAL_BROKER_URL" in db_env:  # the broker is back
        monkeypatch.setenv("EPOCHAL_BROKER_URL", db_env["EPOCHAL_BROKER_URL"])
    else:
        monkeypatch.delenv("EPOCHAL_BROKER_URL")
    clear_caches()
    reconcile()
    assert len(tried) == 4 and messages(db_env, "gpus-0") == before + 3
