"""A warm child's database warm-up: its connection open and a job's first statements run,
for a job id none has, changing nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from app.core.db import get_engine, reset_engines, session_scope
from app.domain import crud, epoch_rows
from app.domain.tables import EpochMetric, EpochStat, Job
from app.schemas.job_spec import JobSpec
from tests.helpers import clear_caches, configure
from worker.child.sinks import warm_connection


def everything() -> list[Any]:
    with session_scope() as session:
        return [
            [tuple(row) for row in session.execute(sa.select(*table.__table__.columns))]
            for table in (Job, EpochMetric, EpochStat)
        ]


def test_the_warm_connection_changes_nothing_and_keeps_itself(db_env: dict[str, str]) -> None:
    spec = JobSpec.model_validate({"framework": "pytorch", "dataset": {"name": "digits"}})
    with session_scope() as session:
        job_id = crud.create_job(session, spec, "gpus-0").id
    with session_scope() as session:
        claimed = crud.claim_job(session, job_id, "w", 30.0)
        assert claimed is not None
        attempt = claimed.attempt
    with session_scope() as session:
        assert epoch_rows.record_epoch(session, job_id, attempt, 1, {"train_loss": 0.5}, (1, 0.5))
    before = everything()
    reset_engines()  # as in a new warm child
    warm_connection()
    assert get_engine().pool.checkedin() == 1
    assert everything() == before


def test_the_warm_connection_with_the_database_away_leaves_it_to_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    away = "postgresql+psycopg://postgres@127.0.0.1:9/epochal"  # the discard port: refused
    configure(monkeypatch, {"EPOCHAL_HOME": str(tmp_path), "EPOCHAL_DATABASE_URL": away})
    try:
        warm_connection()  # no exception: the job meets the database again, and retries
        assert get_engine().pool.checkedin() == 0
    finally:
        monkeypatch.undo()
        clear_caches()  # the next test's settings are not these
