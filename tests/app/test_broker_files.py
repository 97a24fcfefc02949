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
