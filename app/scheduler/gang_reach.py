"""Whether a gang's seats can reach each other at the addresses they offer: an address only
its own machine reaches (loopback, Docker's default bridge) is fine only while every seat's
worker is on that machine (and network namespace), so such a gang is refused when it would
form, with the reason, not left to time out in its rendezvous.

A worker says where it is as MACHINE/NETNS (the kernel's boot id, the same in every
container of one machine, and its network namespace): loopback is shared within one network
namespace, the default bridge by every container of one machine.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.domain.tables import GangSeat

LOOPBACK = "loopback"  # a seat's local_only: what reaches its address
DOCKER_BRIDGE = "Docker bridge"
_SCOPE = {LOOPBACK: "a loopback address", DOCKER_BRIDGE: "an address on Docker's default bridge"}


def machine_netns(machine: str, netns: str) -> str:
    """Where a seat's worker runs: the machine and the network namespace."""
    return f"{machine}/{netns}"


def unreachable(seats: Sequence[GangSeat]) -> str | None:
    """Why a seat could not be reached by another, or None when every one can."""
    for seat in seats:
        if seat.local_only is None or not seat.machine_netns:
            continue
        for other in seats:
            if other.machine_netns and not _shares(
                seat.local_only, seat.machine_netns, other.machine_netns
            ):
                return (
                    f"node {seat.rank} ({seat.worker}) offers {seat.address}, "
                    f"{_SCOPE.get(seat.local_only, seat.local_only)}, which node {other.rank} "
                    f"({other.worker}) on another machine cannot reach; set EPOCHAL_WORKER_ADDRESS "
                    f"on {seat.worker} to an address the other workers reach (DEPLOY.md §3)"
                )
    return None


def _shares(local_only: str, offered: str, other: str) -> bool:
    """Whether `other` reaches what `offered` (a machine_netns) offers on `local_only`."""
    if local_only == LOOPBACK:
        return offered == other
    return offered.split("/", 1)[0] == other.split("/", 1)[0]  # the same machine
