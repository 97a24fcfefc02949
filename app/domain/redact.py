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


# Where a gang ran is for an admin (GET /v1/workers shows plain keys no hostname): a worker's
# name (`label@host`), a raw address and the rendezvous URL are hidden from other keys.
_WORKER_NAME = re.compile(r"(?<![\w.@-])[\w.-]+@[\w.-]*[\w-]")
_URL = re.compile(r"\b(tcp|grpc|gloo|nccl|env)://[^\s/'\"`,;()\[\]{}<>]+")
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?::\d{1,5})?(?!\w|\.\d)")
_IPV6 = re.compile(
    r"\[[0-9A-Fa-f:.]+\](?::\d{1,5})?|(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])"
)
HIDDEN_ADDRESS = "<address>"
HIDDEN_HOST = "<host>"


def public_worker_name(name: str) -> str:
    """The worker's name with what follows its `@` (the host, as `%h` expands) a digest."""
    label = name.partition("@")[0] if "@" in name else "worker"
    return f"{label}@{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def without_hosts(text: str, names: Iterable[str] = (), hostnames: Iterable[str] = ()) -> str:
    """`text` with worker names as GET /v1/workers shows them to a plain key, and hostnames
    (those known and those in a rendezvous URL), addresses and ports hidden."""
    text = _WORKER_NAME.sub(lambda m: public_worker_name(m.group(0)), text)
    text = _URL.sub(lambda m: f"{m.group(1)}://{HIDDEN_ADDRESS}", text)
    for name in sorted(set(names), key=len, reverse=True):
        if "@" not in name:  # those are done
            text = _literal(name).sub(public_worker_name(name), text)
    for host in sorted(set(hostnames), key=len, reverse=True):
        text = _literal(host).sub(HIDDEN_HOST, text)
    text = _IPV4.sub(HIDDEN_ADDRESS, text)
    return _IPV6.sub(_ipv6, text)


def _literal(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w.-]){re.escape(word)}(?![\w-])")


def _ipv6(match: re.Match[str]) -> str:
    """An IPv6 address hidden; a time of day (12:30:05) or a C++ scope is not one."""
    found = match.group(0)
    if found.startswith("[") or "::" in found or found.count(":") == 7:
        return HIDDEN_ADDRESS
    return found


def host_hider(session: Session) -> Callable[[str], str]:
    """without_hosts with the live workers' names and hostnames known (a custom worker name
    need not hold an `@`; a host's bare name is found only by knowing it)."""
    rows = session.execute(select(Worker.name, Worker.hostname)).all()
    names, hosts = [row[0] for row in rows], [row[1] for row in rows if row[1]]
    return lambda text: without_hosts(text, names, hosts)


def job_texts(session: Session, job: Job, key: Caller | None) -> Callable[[str], str]:
    """How a job's error and log lines are shown to `key`: a gang's workers' hosts, addresses
    and ports hidden from any key but an admin's (GET /v1/workers hides them too)."""
    if job.nodes <= 1 or (key is not None and key.is_admin):
        return lambda text: text
    return host_hider(session)
