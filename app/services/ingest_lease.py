"""An ingest's hold on its data set, so a lost one is sent again and never runs twice.

The ingest claims the data set with one conditional update (no live lease held) and renews the
lease every EPOCHAL_HEARTBEAT_SECONDS while it works. The maintenance loop re-sends the ingest
of a data set still ingesting whose message went out EPOCHAL_DISPATCH_RETRY_SECONDS ago and
whose lease is absent or older than EPOCHAL_LEASE_SECONDS, while a live worker is idle: its
worker died, or its message was lost (a broker restarted empty). A duplicate message finds
the lease held and does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from sqlalchemy import ColumnElement, or_, select, update
from sqlalchemy.orm import Session

from app.core.config import Settings, get_settings
from app.core.db import rows_changed, session_scope
from app.domain import worker_reads
from app.domain.tables import Dataset, utcnow


def _stale(lease_seconds: float) -> ColumnElement[bool]:
    horizon = utcnow() - timedelta(seconds=lease_seconds)
    return or_(Dataset.ingest_lease_at.is_(None), Dataset.ingest_lease_at < horizon)


def claim(dataset_id: str) -> bool:
    """Take the data set's ingest, if it is ingesting and no live ingest holds it."""
    query = (
        update(Dataset)
        .where(Dataset.id == dataset_id, Dataset.status == "ingesting")
        .where(_stale(get_settings().lease_seconds))
        .values(ingest_lease_at=utcnow())
    )
    with session_scope() as session:
        return rows_changed(session, query) == 1


@contextmanager
def held(dataset_id: str) -> Iterator[None]:
    """Renew the lease from a thread while the body runs."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(get_settings().heartbeat_seconds):
            query = (
                update(Dataset)
                .where(Dataset.id == dataset_id, Dataset.status == "ingesting")
                .values(ingest_lease_at=utcnow())
            )
            try:
                with session_scope() as session:
                    rows_changed(session, query)
            except Exception:  # a database blip: the next beat tries again
                continue

    thread = threading.Thread(target=renew, name=f"ingest-lease-{dataset_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def lost(session: Session, settings: Settings) -> list[str]:
    """Ids of the data sets whose ingest to send again; each marked sent now."""
    live = worker_reads.live_workers(session, 3 * settings.heartbeat_seconds)
    if all(worker.current_job_id is not None for worker in live):
        return []
    sent_before = utcnow() - timedelta(seconds=settings.dispatch_retry_seconds)
    query = (
        select(Dataset.id)
        .where(Dataset.status == "ingesting", Dataset.ingest_sent_at < sent_before)
        .where(_stale(settings.lease_seconds))
        .limit(100)
    )
    again = []
    for dataset_id in session.scalars(query).all():
        mark = (
            update(Dataset)
            .where(Dataset.id == dataset_id, Dataset.ingest_sent_at < sent_before)
            .values(ingest_sent_at=utcnow())
        )
        if rows_changed(session, mark) == 1:  # another process's round did not take it
            again.append(dataset_id)
    session.commit()
    return again
