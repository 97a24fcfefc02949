"""Kombu's filesystem transport, with message files that appear whole.

Kombu creates a message's file under its final name and only then writes it, so a consumer
polling the folder (every 50 ms in the embedded default) can take the file while it is still
empty, fail on its JSON and stop the worker ("Unrecoverable error: JSONDecodeError", as
reported to kombu upstream; `epochal up` then stops everything). Here a message is written
under a name the consumer skips (a leading dot) and renamed into place: a rename within one
folder is atomic, so a consumer sees a whole message or none.

A worker whose slot is free polls every IDLE_POLL_SECONDS, not every 50 ms: a job submitted to
an idle worker waited 25 ms on average for the next look, a part of its wall time. While the
slot is taken a look finds nothing it may take, and a job's training keeps the CPU.
"""

from __future__ import annotations

import os
import uuid
from queue import Empty
from time import monotonic, sleep
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

# Celery's `broker_transport` for a filesystem:// broker (app.services.queue).
TRANSPORT = f"{__name__}:Transport"
IDLE_POLL_SECONDS = 0.01


class Channel(filesystem.Channel):
    """Puts a message with one rename; gets it as Kombu does."""

    # Kombu's filesystem channel already overrides its base's _put with another signature.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        name = f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg"  # Kombu's order
        final = os.path.join(self.data_folder_out, name)
        partial = os.path.join(self.data_folder_out, f".{name}.part")  # not a `.msg` to _get
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    """The filesystem transport with the channel above, polling often while a consumer with a
    prefetch limit (the worker's tasks) may take a message."""

    Channel = Channel

    def drain_events(self, connection: Any, timeout: Any = None, **_: Any) -> Any:
        """Kombu's loop, its pause between looks chosen at each look."""
        cycle: Any = self.cycle  # typed None in Kombu's stubs: set by the base's __init__
        started = monotonic()
        while True:
            try:
                cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                waited = monotonic() - started
                if timeout is not None and waited >= timeout:
                    raise TimeoutError() from None  # socket.timeout, as Celery expects
                pause = IDLE_POLL_SECONDS if self._slot_free() else (self.polling_interval or 0.0)
                sleep(min(pause, timeout - waited) if timeout is not None else pause)

    def _slot_free(self) -> bool:
        channels: list[Any] = self.channels or []  # typed None in Kombu's stubs, as cycle
        return any(c.qos.prefetch_count and c.qos.can_consume() for c in channels)
