"""The Celery task: thin on purpose; the runner does the work (Celery testing guide)."""

from __future__ import annotations

from typing import Any

from app.services.queue import TRAIN_TASK
from worker.celery_app import celery_app
from worker.supervisor.runner import run_job


@celery_app.task(name=TRAIN_TASK, bind=True)
def train(self: Any, job_id: str) -> None:
    """Run one attempt of the job; a duplicate delivery finds it claimed and returns."""
    run_job(str(job_id), worker_name=self.request.hostname)
