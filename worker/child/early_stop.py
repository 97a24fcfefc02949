"""Imported first by the training child: from then on a stop signal is remembered, not fatal.

SIGUSR1's default action ends the process, so a stop the supervisor sends while the child is
still importing its modules or reading its settings would kill it without a checkpoint or an
outcome. This catches it at once (stdlib and worker.protocol only); launch.listen_for_stop
takes over when the loop's state exists and acts on a signal that came in the meantime.
"""

from __future__ import annotations

import signal

from worker.protocol import STOP_SIGNAL

_received: list[int] = []


def _remember(signum: int, _frame: object) -> None:
    _received.append(signum)


def arrived() -> bool:
    """Whether a stop signal came before the real handler was installed."""
    return bool(_received)


signal.signal(STOP_SIGNAL, _remember)
