"""Kombu's filesystem transport, with message files that appear whole.

Kombu creates a message's file under its final name and only then writes it, so a consumer
polling the folder (every 50 ms in the embedded default) can take the file while it is still
empty, fail on its JSON and stop the worker ("Unrecoverable error: JSONDecodeError", kombu
issue 1551; `epochal up` then stops everything). Here a message is written under a name the
consumer skips (a leading dot) and renamed into place: a rename within one folder is atomic, so
a consumer sees a whole message or none.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

# Celery's `broker_transport` for a filesystem:// broker (app.services.queue).
TRANSPORT = f"{__name__}:Transport"


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
    """The filesystem transport with the channel above."""

    Channel = Channel
