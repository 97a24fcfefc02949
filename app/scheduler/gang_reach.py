"""Whether a gang's members can reach each other at the addresses they offer: an address only
its own host reaches (loopback, Docker's default bridge) is fine only while every member is
on that host, so such a gang is refused when it would form, with the reason, not left to
time out in its rendezvous.

A worker says which host it is on as MACHINE/NETNS (the kernel's boot id, the same in every
container of one machine, and its network namespace): loopback is shared within one network
namespace, the default bridge by every container of one machine.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.tables import GangSeat

LOOPBACK = "loopback"  # a seat's local_only: what reaches its address
DOCKER_BRIDGE = "Docker bridge"
_SCOPE = {LOOPBACK: "a loopback address", DOCKER_BRIDGE: "an address on Docker's default bridge"}


def host_key(machine: str, netns: str) -> str:
    """A seat's host: the machine and the network namespace its worker runs in."""
    return f"{machine}/{netns}"


def unreachable(seats: Sequence[GangSeat]) -> str | None:
    """Why a member could not be reached by another, or None when every one can."""
    for seat in seats:
        if seat.local_only is None or not seat.host:
            continue
        for other in seats:
            if other.host and not _shares(seat.local_only, seat.host, other.host):
                return (
                    f"node {seat.rank} ({seat.worker}) offers {seat.address}, "
                    f"{_SCOPE.get(seat.local_only, seat.local_only)}, which node {other.rank} "
                    f"({other.worker}) on another host cannot reach; set EPOCHAL_WORKER_ADDRESS "
                    f"on {seat.worker} to an address the other workers reach (DEPLOY.md §3)"
                )
    return None


def _shares(local_only: str, host: str, other: str) -> bool:
    """Whether `other` reaches what `host` offers on `local_only`."""
    if local_only == LOOPBACK:
        return host == other
    return host.split("/", 1)[0] == other.split("/", 1)[0]  # the same machine
