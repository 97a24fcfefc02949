"""The event hub on the real databases: order, resume ids, fan-out with one read per round."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from app.core.db import session_scope
from app.domain import crud, epoch_rows
from app.domain.states import JobStatus, RequeueCause
from app.schemas.job_spec import JobSpec
from app.services.live_events import Cursor, Event, EventHub, read_new_events
from tests.helpers import run_async


def new_job() -> str:
    spec = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "digits"}})
    with session_scope() as session:
        return crud.create_job(session, spec, "gpus-0").id


def claim(job_id: str) -> int:
    with session_scope() as session:
        job = crud.claim_job(session, job_id, "test-worker", 60)
        assert job is not None
        return job.attempt


def epoch(job_id: str, attempt: int, number: int, loss: float) -> None:
    with session_scope() as session:
        assert epoch_rows.record_epoch(session, job_id, attempt, number, {"train_loss": loss})


def finish(job_id: str, attempt: int) -> None:
    with session_scope() as session:
        crud.finish_job(
            session, job_id, attempt, JobStatus.succeeded, stop_reason="completed", reason="done"
        )


def requeue(job_id: str, keep_epochs: int) -> int:
    """A lost worker: back to queued, claimed again, rows after the checkpoint dropped."""
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None and crud.requeue(session, job, RequeueCause.lost)
    attempt = claim(job_id)
    with session_scope() as session:
        assert epoch_rows.drop_metrics_after(session, job_id, attempt, keep_epochs) is not None
    return attempt


def label(event: Event) -> tuple[str, Any]:
    return (event.kind, event.data["to_status"] if event.kind == "transition" else event.key)


async def collect(hub: EventHub, job_id: str, after: Cursor = Cursor()) -> list[Event]:
    return [event async for event in hub.stream(job_id, after)]


class CountingReader:
    def __init__(self) -> None:
        self.calls: list[set[str]] = []

    def __call__(self, cursors: Mapping[str, Cursor]) -> dict[str, list[Event]]:
        self.calls.append(set(cursors))
        return read_new_events(cursors)


def run_live(steps: Any, *streams: tuple[str, Cursor]) -> tuple[list[list[Event]], CountingReader]:
    """Subscribe the streams, then run `steps` (DB writes) while they are open."""
    reader = CountingReader()

    async def scenario() -> list[list[Event]]:
        hub = EventHub(0.05, reader)
        tasks = [asyncio.create_task(collect(hub, job, after)) for job, after in streams]
        await asyncio.sleep(0.2)  # all subscribed, the backlog read
        await asyncio.to_thread(steps)
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert hub.feeds == {}, "feeds are dropped when their last subscriber leaves"
        return results

    return asyncio.run(scenario()), reader


def test_live_events_in_order_fanned_out_with_one_read_per_round(db_env: dict[str, str]) -> None:
    job, other = new_job(), new_job()

    def steps() -> None:
        attempt = claim(job)
        for n in (1, 2, 3):
            epoch(job, attempt, n, 1.0 / n)
        finish(job, attempt)
        finish(other, claim(other))

    streams = [(job, Cursor())] * 5 + [(other, Cursor())]
    results, reader = run_live(steps, *streams)
    expected = [
        ("transition", "queued"),
        ("transition", "running"),
        ("epoch", (1, 1)),
        ("epoch", (1, 2)),
        ("epoch", (1, 3)),
        ("transition", "succeeded"),
    ]
    assert all([label(e) for e in r] == expected for r in results[:5])
    assert [label(e) for e in results[5]][-1] == ("transition", "succeeded")
    assert results[0][2].data["train_loss"] == 1.0 and results[0][2].data["epoch"] == 1
    # Six subscribers, two jobs: every read covered both jobs at once, never one per stream.
    assert reader.calls and all(len(jobs) <= 2 for jobs in reader.calls)
    assert any(jobs == {job, other} for jobs in reader.calls)
    ids = [Cursor.parse(e.id) for e in results[0]]
    assert len(set(ids)) == len(ids)


def test_resume_from_any_event_id_gets_exactly_the_rest(db_env: dict[str, str]) -> None:
    job = new_job()
    attempt = claim(job)
    for n in (1, 2, 3):
        epoch(job, attempt, n, 1.0)
    finish(job, attempt)
    full, _ = run_live(lambda: None, (job, Cursor()))
    events = full[0]
    for index, event in enumerate(events):
        rest, _ = run_live(lambda: None, (job, Cursor.parse(event.id)))
        assert [label(e) for e in rest[0]] == [label(e) for e in events[index + 1 :]]


def test_epochs_rewritten_by_a_resumed_attempt_reach_a_resuming_client(
    db_env: dict[str, str],
) -> None:
    job = new_job()
    first = claim(job)
    for n in (1, 2, 3):
        epoch(job, first, n, 1.0)
    seen = read_new_events({job: Cursor()})[job]  # a client that saw epoch 3 of attempt 1
    assert label(seen[-1]) == ("epoch", (first, 3))

    second = requeue(job, keep_epochs=2)  # resumed from the epoch-2 checkpoint
    epoch(job, second, 3, 0.5)
    epoch(job, second, 4, 0.4)
    finish(job, second)
    rest, _ = run_live(lambda: None, (job, Cursor.parse(seen[-1].id)))
    assert [label(e) for e in rest[0]] == [
        ("transition", "queued"),
        ("transition", "running"),
        ("epoch", (second, 3)),
        ("epoch", (second, 4)),
        ("transition", "succeeded"),
    ]
    assert rest[0][2].data["train_loss"] == 0.5


@pytest.mark.parametrize("raw", ["x", "1.2", "1.2.3.4", "-1.0.0", "1.0.99999999999"])
def test_malformed_cursor_is_rejected(raw: str) -> None:
    with pytest.raises(ValueError):
        Cursor.parse(raw)


def test_cursor_round_trips_and_orders() -> None:
    cursor = Cursor.parse("12.2.7")
    assert str(cursor) == "12.2.7" and Cursor.parse(None) == Cursor()
    row = Event("epoch", (2, 7), None, {})  # type: ignore[arg-type]
    assert cursor.seen(row) and not cursor.seen(Event("epoch", (3, 1), None, {}))  # type: ignore[arg-type]


def test_the_hubs_reader_on_the_loop_reads_what_the_blocking_one_reads(
    db_env: dict[str, str],
) -> None:
    """On PostgreSQL the hub reads with one array-parameterised statement on the event loop;
    it must return exactly the events (ids and SSE bytes included) of the per-job query."""
    from app.services.event_reads import read_new_events_async

    jobs = [new_job() for _ in range(3)]
    attempts = [claim(job) for job in jobs]
    for job, attempt in zip(jobs, attempts, strict=True):
        for n in (1, 2, 3):
            epoch(job, attempt, n, 1.0 / n)
    finish(jobs[0], attempts[0])
    second = requeue(jobs[1], keep_epochs=1)
    epoch(jobs[1], second, 2, 0.25)
    seen = read_new_events({jobs[2]: Cursor()})[jobs[2]]
    cursors = {jobs[0]: Cursor(), jobs[1]: Cursor(0, 1, 2), jobs[2]: Cursor.parse(seen[1].id)}

    expected = read_new_events(cursors)
    assert sum(len(events) for events in expected.values()) >= 10
    assert run_async(read_new_events_async(cursors)) == expected
