"""The producer side of the queue: the task *name* and how to send it; no task code here.

The API and the worker share only TRAIN_TASK, this broker configuration and the database.
The message carries the job id and nothing else; the worker re-reads the spec from the DB.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from celery import Celery

from app.core.config import Settings, get_settings
from app.services.broker_files import TRANSPORT

TRAIN_TASK = "epochal.train"
# Ingest needs no GPU and no framework: it goes to the queue every worker consumes.
INGEST_TASK = "epochal.ingest"


def queue_for_gpus(gpus: int) -> str:
    """Jobs are routed by the GPUs they need; a worker with G GPUs consumes gpus-0 … gpus-G."""
    return f"gpus-{gpus}"


def celery_config(settings: Settings) -> dict[str, Any]:
    """Broker settings shared by the producer (API) and the consumer (worker)."""
    config: dict[str, Any] = {
        "broker_url": settings.celery_broker_url,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_ignore_result": True,  # status lives in the database, not in a result backend
        "broker_connection_retry_on_startup": True,
        "task_publish_retry": True,
        "task_publish_retry_policy": {
            "max_retries": 3,
            "interval_start": 0.2,
            "interval_step": 0.5,
        },
    }
    if config["broker_url"].startswith("filesystem"):
        folder = settings.broker_folder
        for sub in ("queue", "processed", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        config["broker_transport"] = TRANSPORT  # messages appear whole (broker_files)
        config["broker_transport_options"] = {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            "store_processed": False,
            "control_folder": str(folder / "control"),
            "polling_interval": 0.05,
        }
    else:
        # Redis has no real acks: keep a long visibility timeout; crash recovery comes from the
        # database lease and reaper, not from redelivery (RELIABILITY.md P1, P2).
        visibility = {"visibility_timeout": 12 * 3600}
        config["broker_transport_options"] = visibility | {"polling_interval": 0.05}
        config["visibility_timeout"] = visibility["visibility_timeout"]
    return config


@lru_cache
def producer() -> Celery:
    """A send-only Celery app for this process."""
    app = Celery("epochal-producer")
    app.conf.update(celery_config(get_settings()))
    return app


def publish_train(job_id: str, queue: str) -> None:
    """Publish the job id to its queue (after the job is committed)."""
    producer().send_task(TRAIN_TASK, args=[job_id], queue=queue)


def publish_ingest(dataset_id: str) -> None:
    """Publish the data set's id for the ingest task (after its row is committed)."""
    producer().send_task(INGEST_TASK, args=[dataset_id], queue=queue_for_gpus(0))


def broker_reachable(timeout: float = 2.0) -> bool:
    """True when a connection to the broker can be opened."""
    try:
        with producer().connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=timeout)
        return True
    except Exception:
        return False
