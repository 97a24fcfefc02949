"""The port a worker offers a gang with its seat, held from the moment it is chosen until the
attempt ends, so nothing else can take it between the seat and its training process's bind.

The kernel chooses the port (bind to port 0), and the holder stays bound, never listening,
with SO_REUSEPORT: Linux then lets only sockets that also set SO_REUSEPORT, of the same user,
bind that port beside it. This worker's training process is one (the gang store's listener,
worker.training.torch.gang_store; TensorFlow's server, told TF_GRPC_REUSE_PORT); any other
program's bind fails with EADDRINUSE. A holder that never listens is handed no connection.
"""

from __future__ import annotations

import contextlib
import socket

_HELD: dict[str, socket.socket] = {}  # by job id: the port this worker's seat published


def hold() -> socket.socket:
    """A port the kernel chose, bound on every interface (the child's listener binds the
    advertised one; TensorFlow's server binds every one) and held."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("", 0))
    return sock


def port_of(holder: socket.socket) -> int:
    return int(holder.getsockname()[1])


def keep(job_id: str, holder: socket.socket) -> None:
    """`holder`'s port was published with this worker's seat in `job_id`'s gang."""
    let_go(job_id)
    _HELD[job_id] = holder


def let_go(job_id: str) -> None:
    """The seat or its attempt is over: the port is free again (a no-op if none is held)."""
    holder = _HELD.pop(job_id, None)
    if holder is not None:
        with contextlib.suppress(OSError):
            holder.close()


def held() -> list[str]:
    """The jobs whose seat ports this worker holds now."""
    return list(_HELD)
