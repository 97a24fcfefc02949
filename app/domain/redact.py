"""Absolute server paths out of what a client is told: an error names the file it is about,
never where the server keeps it (RELIABILITY.md §10c).

Messages built by epochal name files by their role; messages passed on from libraries (an
OSError, ONNX Runtime, numpy) may carry a full path, so every answer's text goes through
`without_server_paths`. An API path (`/v1/...`) is not a server path and is kept.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from functools import lru_cache

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.keys import Caller
from app.domain.tables import Job, Worker

# Two or more components after a leading slash that does not follow a word, a dot, a colon or
# a slash (so no URL, ratio or media type); the API's own routes are kept.
_PATH = re.compile(
    r"(?<![\w.:/~-])/(?!v1/)(?:[^\s/'\"`:,;()\[\]{}<>]+/)+([^\s/'\"`:,;()\[\]{}<>]*)"
)


def without_server_paths(text: str) -> str:
    """`text` with each absolute path cut to its last component: `…/model.onnx`."""
    return _PATH.sub(lambda m: f"…/{m.group(1)}" if m.group(1) else "…/", text)


# Where a job ran is for an admin (GET /v1/workers shows plain keys no hostname): a worker's
# name, a host's name, an address and a port are hidden from other keys. Names are found by
# their shape (`label@host`, as `%h` expands), by the words epochal's own messages put before
# them, and, where the caller knows them, as the live workers' names and hostnames.
_URL = re.compile(r"\b(tcp|grpc|gloo|nccl|env)://[^\s/'\"`,;()\[\]{}<>]+")
_WORKER_AFTER = r"claimed by |node \d+ \(|EPOCHAL_WORKER_ADDRESS on |gang node \d+ of \d+ on "
_ADDRESS_AFTER = r", address |offers |routes to the database \(|nodes at "
_NAMES = (
    rf"(?P<worker_after>{_WORKER_AFTER})(?P<worker>[^\s,;()]+)"
    rf"|(?P<address_after>{_ADDRESS_AFTER})[^\s;()]+?(?=[\s;()]|,\s|,?$)"
    r"|(?P<named>(?<![\w.@-])[\w.-]+@[\w.-]*[\w-])"
)
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?!\w|\.\d)")
_IPV6 = re.compile(
    r"\[(?P<bracketed>[0-9A-Fa-f:.]+)\](?::\d{1,5})?"
    r"|(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])"
)
HIDDEN_ADDRESS = "<address>"
HIDDEN_HOST = "<host>"


def public_worker_name(name: str) -> str:
    """The worker's name with what follows its `@` (the host, as `%h` expands) a digest."""
    label = name.partition("@")[0] if "@" in name else "worker"
    return f"{label}@{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def without_hosts(text: str, names: Iterable[str] = (), hostnames: Iterable[str] = ()) -> str:
    """`text` with worker names as GET /v1/workers shows them to a plain key, and hostnames,
    addresses and ports hidden (`names`, `hostnames`: the workers' known)."""
    text = _URL.sub(lambda m: f"{m.group(1)}://{HIDDEN_ADDRESS}", text)
    text = _names(frozenset(names), frozenset(hostnames)).sub(_name, text)  # one pass: once each
    text = _IPV4.sub(HIDDEN_ADDRESS, text)
    return _IPV6.sub(_ipv6, text)


@lru_cache(maxsize=8)
def _names(names: frozenset[str], hostnames: frozenset[str]) -> re.Pattern[str]:
    """_NAMES, and the known workers' names and hostnames as words."""
    parts = [_NAMES]
    for group, words in (("known", names), ("host", hostnames)):
        if words:
            alternatives = "|".join(map(re.escape, sorted(words, key=len, reverse=True)))
            parts.append(rf"(?<![\w.@-])(?P<{group}>{alternatives})(?![\w@-])")
    return re.compile("|".join(parts))


def _name(match: re.Match[str]) -> str:
    found = match.groupdict()
    if found["worker_after"] is not None:
        return found["worker_after"] + public_worker_name(found["worker"])
    if found["address_after"] is not None:
        return found["address_after"] + HIDDEN_ADDRESS
    if found.get("host") is not None:
        return HIDDEN_HOST
    return public_worker_name(match.group(0))


def _ipv6(match: re.Match[str]) -> str:
    """An IPv6 address hidden; a time of day (12:30:05), a C++ scope or a list printed as
    [0.5] is not one."""
    address = match.group("bracketed") or match.group(0)
    if "::" in address or address.count(":") == 7:
        return HIDDEN_ADDRESS
    return match.group(0)


def host_hider(session: Session) -> Callable[[str], str]:
    """without_hosts with the live workers' names and hostnames known (a custom worker name
    need not hold an `@`; a host's bare name is found only by knowing it)."""
    rows = session.execute(select(Worker.name, Worker.hostname)).all()
    names, hosts = [row[0] for row in rows], [row[1] for row in rows if row[1]]
    return lambda text: without_hosts(text, names, hosts)


def job_texts(session: Session, job: Job, key: Caller | None) -> Callable[[str], str]:
    """How a job's error, transition reasons and log lines are shown to `key`: where it ran
    (workers' names, hosts, addresses, ports) hidden from any key but an admin's, as GET
    /v1/workers hides them; a multi-node job's texts name more, so its workers are looked up."""
    if key is not None and key.is_admin:
        return lambda text: text
    if job.nodes > 1:
        return host_hider(session)
    return without_hosts
