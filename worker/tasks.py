"""The Celery tasks: thin on purpose; the runner and the ingest do the work (Celery testing
guide)."""

from __future__ import annotations

from typing import Any

from app.services.dataset_ingest import run_ingest
from app.services.queue import INGEST_TASK, TRAIN_TASK
from worker.celery_app import celery_app
from worker.supervisor.runner import run_job


@celery_app.task(name=TRAIN_TASK, bind=True)
def train(self: Any, job_id: str) -> None:
    """Run one attempt of the job; a duplicate delivery finds it claimed and returns."""
    run_job(str(job_id), worker_name=self.request.hostname)


@celery_app.task(name=INGEST_TASK)
def ingest(dataset_id: str) -> str:
    """Turn the data set's source into shards; CPU only, no framework imported."""
    return run_ingest(str(dataset_id))
