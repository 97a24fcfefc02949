"""The embedded broker's message files appear whole: a consumer polling the folder while a
message is being written finds nothing, never an empty file (kombu's own filesystem transport
hands it the empty file, and the worker stops on its JSON)."""

from __future__ import annotations

from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection

from app.services import broker_files
from app.services.broker_files import Transport


def channel(folder: Path) -> Any:
    options = {"data_folder_in": str(folder), "data_folder_out": str(folder)}
    return Connection("filesystem://", transport=Transport, transport_options=options).channel()


def test_a_message_being_written_is_not_taken_and_then_arrives_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer, consumer = channel(tmp_path), channel(tmp_path)
    seen_while_writing: list[str] = []
    real_dumps = broker_files.dumps

    def dumps_while_polled(payload: Any) -> str:  # the consumer polls mid-write
        try:
            consumer._get("jobs")
            seen_while_writing.append("a message")
        except Empty:
            seen_while_writing.append("nothing")
        return str(real_dumps(payload))

    monkeypatch.setattr(broker_files, "dumps", dumps_while_polled)
    producer._put("jobs", {"body": "wake up"})
    assert seen_while_writing == ["nothing"]
    assert consumer._get("jobs") == {"body": "wake up"}
    assert list(tmp_path.iterdir()) == []  # taken; no partial file left behind


def test_the_embedded_broker_uses_it(tmp_path: Path) -> None:
    from app.core.config import Settings
    from app.services.queue import celery_config

    config = celery_config(Settings(home=tmp_path))
    assert config["broker_url"].startswith("filesystem")
    assert config["broker_transport"] == broker_files.TRANSPORT


def test_a_worker_looks_often_while_its_slot_is_free_and_seldom_while_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kombu import Exchange, Queue

    (tmp_path / "control").mkdir()
    options = {
        "data_folder_in": str(tmp_path),
        "data_folder_out": str(tmp_path),
        "control_folder": str(tmp_path / "control"),  # the exchange's bindings
        "polling_interval": 0.05,
    }
    conn = Connection("filesystem://", transport=Transport, transport_options=options)
    pauses: list[float] = []
    real_sleep = broker_files.sleep
    monkeypatch.setattr(broker_files, "sleep", lambda s: (pauses.append(s), real_sleep(s)))
    jobs = Queue("jobs", Exchange("jobs", type="direct"), routing_key="jobs")
    taken: list[Any] = []
    with conn.Consumer(jobs, callbacks=[lambda _body, msg: taken.append(msg)], prefetch_count=1):
        with pytest.raises(TimeoutError):  # nothing sent: the slot is free
            conn.drain_events(timeout=0.2)
        assert pauses and set(pauses[:-1]) == {broker_files.IDLE_POLL_SECONDS}
        conn.Producer().publish({"n": 1}, exchange=jobs.exchange, routing_key="jobs")
        conn.drain_events(timeout=5)
        assert len(taken) == 1  # not acked yet: the slot is taken, as while a job runs
        pauses.clear()
        with pytest.raises(TimeoutError):
            conn.drain_events(timeout=0.3)
        assert pauses and set(pauses[:-1]) == {0.05}
        taken[0].ack()
        pauses.clear()
        with pytest.raises(TimeoutError):
            conn.drain_events(timeout=0.1)
        assert set(pauses[:-1]) == {broker_files.IDLE_POLL_SECONDS}
