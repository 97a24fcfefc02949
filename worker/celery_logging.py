"""The worker's logs: our handler instead of Celery's, and the job id on every task's lines."""

from __future__ import annotations

from contextvars import Token
from typing import Any

from celery import signals

from app.core.log_setup import configure_logging, current_job

_tokens: dict[str, Token[str | None]] = {}


def _setup(**_: Any) -> None:
    # Connecting to setup_logging makes Celery leave logging to us (text or JSON lines).
    configure_logging("worker")


def _task_started(task_id: str | None = None, args: Any = None, **_: Any) -> None:
    # Set in the pool process that runs the task: the runner's lines and Celery's own
    # "succeeded in" line (logged before task_postrun) carry the job id.
    if task_id and args:
        _tokens[task_id] = current_job.set(str(args[0]))


def _task_ended(task_id: str | None = None, **_: Any) -> None:
    token = _tokens.pop(task_id or "", None)
    if token is not None:
        current_job.reset(token)


def connect() -> None:
    signals.setup_logging.connect(_setup, weak=False)
    signals.task_prerun.connect(_task_started, weak=False)
    signals.task_postrun.connect(_task_ended, weak=False)
