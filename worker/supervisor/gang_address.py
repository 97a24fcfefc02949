"""What this worker's offered address reaches: the interface that holds it, the machine the
worker runs on, and whether only that machine reaches it (app.scheduler.gang_reach decides)."""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from pathlib import Path

from app.scheduler.gang_reach import DOCKER_BRIDGE, LOOPBACK, machine_netns

BRIDGE_INTERFACE = "docker0"
BRIDGE_NETWORK = ipaddress.ip_network("172.17.0.0/16")  # Docker's default bridge
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")  # one per machine and boot, in containers too
NETNS = "/proc/self/ns/net"
SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address


def interface_of(address: str) -> str | None:
    """The name of the interface that holds `address` (IPv4, Linux), or None."""
    try:
        wanted = socket.gethostbyname(address)
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name in names:
            request = struct.pack("256s", name.encode()[:15])
            try:
                answer = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, request)
            except OSError:  # no IPv4 address on it
                continue
            if socket.inet_ntoa(answer[20:24]) == wanted:
                return name
    return None


def local_only(address: str, interface: str | None) -> str | None:
    """gang_reach.LOOPBACK or DOCKER_BRIDGE when no other machine reaches `address`, else None."""
    try:
        ip = ipaddress.ip_address(socket.gethostbyname(address))  # a host name: what it is
    except (OSError, ValueError):
        return None
    if ip.is_loopback:
        return LOOPBACK
    if interface == BRIDGE_INTERFACE or ip in BRIDGE_NETWORK:
        return DOCKER_BRIDGE
    return None


def this_machine_netns() -> str:
    """Where this worker runs, as gang_reach compares them: machine (boot id) and network
    namespace."""
    try:
        machine = BOOT_ID.read_text().strip()
    except OSError:
        machine = socket.gethostname()
    try:
        netns = os.readlink(NETNS)
    except OSError:
        netns = "?"
    return machine_netns(machine, netns)
