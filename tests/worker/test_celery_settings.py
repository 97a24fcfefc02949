"""The Celery settings RELIABILITY.md relies on (§2, P1, P3, P5, P6, P16), read from the
worker's own app, the producer's config and the command line `epochal worker` executes."""

from __future__ import annotations

from app.cli import worker_argv
from app.core.config import Settings
from app.services.queue import celery_config


def test_the_worker_acks_late_reserves_one_job_and_never_redelivers_a_lost_one(
    sqlite_env: dict[str, str],
) -> None:
    from worker.celery_app import celery_app

    conf = celery_app.conf
    assert conf.task_acks_late is True and conf.task_reject_on_worker_lost is False  # P3
    assert conf.worker_prefetch_multiplier == 1 and conf.worker_concurrency == 1  # P5
    assert conf.worker_cancel_long_running_tasks_on_connection_loss is False  # P6


def test_redis_hands_an_unacked_message_on_only_after_12_hours() -> None:
    config = celery_config(Settings(broker_url="redis://127.0.0.1:6379/0"))  # P1
    assert config["broker_transport_options"]["visibility_timeout"] == 12 * 3600
    assert config["visibility_timeout"] == 12 * 3600


def test_a_worker_is_one_prefork_process_consuming_the_queues_it_fits() -> None:
    argv = worker_argv(2, "gpus-0-1@box")  # P16
    option = {flag: argv[argv.index(flag) + 1] for flag in ("-Q", "-c", "--pool", "-n")}
    assert option == {"-Q": "gpus-0,gpus-1,gpus-2", "-c": "1", "--pool": "prefork",
                      "-n": "gpus-0-1@box"}  # fmt: skip
    assert "--without-mingle" in argv and "--without-gossip" in argv
