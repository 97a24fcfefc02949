"""This worker's seat in a multi-node job's gang (app.scheduler.gang): the address it offers,
the wait for the gang to form, each seat's lease while it trains, and how its end is told.

Rank 0's worker holds the job's lease, writes its end and releases the gang; every other node
only holds its seat and says whether its training process ended cleanly (done) or not (lost).
Rank 0 watches the other seats: one lost, or one whose lease lapsed, ends the attempt at once
(its training process is killed) as worker_lost, so the job is re-queued once as a whole gang
within max_restarts; any node's own keeper stops its process when the attempt is no longer
running, so every rank stops together.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import make_url

from app.core.config import Settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.job_files import JobFiles
from app.domain.states import ACTIVE, TERMINAL, ErrorCode, JobStatus
from app.scheduler import gang
from app.scheduler.gang import Rendezvous, TakenSeat
from app.schemas.api import StepProgress
from app.services.publish import republish
from app.services.queue import publish_train
from worker.protocol import AGREED_STOPS, GANG_SECRET_ENV, RETRYABLE, GangNode, Outcome
from worker.supervisor import gang_address, gang_port, shutdown
from worker.supervisor.claimed import Claimed
from worker.supervisor.lease import LeaseKeeper

log = logging.getLogger(__name__)
POLL_SECONDS = 0.5
# TensorFlow's server binds its port with SO_REUSEPORT, beside this worker's holder (gang_port).
TF_REUSE_PORT_ENV = "TF_GRPC_REUSE_PORT"
# How rank 0's process fails when another node's is gone (a collective breaks): these become
# the gang's worker_lost when a rank did go; spec errors (non-finite loss, bad data) do not.
COLLECTIVE_FAILURES = {ErrorCode.internal_error, *RETRYABLE}


@dataclass(frozen=True)
class Formed:
    """A gang that formed: the attempt this worker trains, and its node of it."""

    job_id: str
    attempt: int
    spec: Any
    started_at: datetime
    node: GangNode
    worker: str
    memory_bytes: int | None = None  # the job's admitted estimate: this node's limit

    @property
    def claimed(self) -> Claimed:
        """The attempt as a single node's claim gives it (worker.supervisor.wakeup)."""
        return Claimed(self.job_id, self.attempt, self.spec, self.started_at, self.memory_bytes)


def advertised(settings: Settings) -> tuple[str, str]:
    """(address, why this one): EPOCHAL_WORKER_ADDRESS, else the interface that routes to
    the database (what the other workers reach too), else loopback (SQLite: one machine)."""
    if settings.worker_address:
        return settings.worker_address, "EPOCHAL_WORKER_ADDRESS"
    url = make_url(settings.sqlalchemy_url)
    if not url.host:
        return "127.0.0.1", "loopback: the database is a local file, so the gang is one machine"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((url.host, url.port or 5432))  # UDP: no packet sent, a route chosen
            address = str(probe.getsockname()[0])
    except OSError as exc:  # no route (or no name) now: this machine's host name is the best guess
        return socket.gethostname(), f"the host's name: no route to the database ({exc})"
    return address, f"the interface that routes to the database ({url.host})"


def rendezvous(settings: Settings) -> tuple[Rendezvous, socket.socket]:
    """This worker's address and a port the kernel chose, published with a gang seat it
    takes (rank 0's hosts the gang's rendezvous store, every node's its TensorFlow server),
    and the socket that holds the port until the seat or its attempt is over (gang_port.keep;
    close it when no seat was taken)."""
    address, _ = advertised(settings)
    holder = gang_port.hold()
    reach = gang_address.local_only(address, gang_address.interface_of(address))
    return Rendezvous(
        address, gang_port.port_of(holder), gang_address.this_machine_netns(), reach
    ), holder


def publish_others(job_id: str, nodes: int) -> None:
    """A gang just opened: a wake-up for each other seat, so free workers come to take it."""
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        queue = job.queue if job is not None else None
    for _ in range(nodes - 1):
        if queue is not None:
            publish_train(job_id, queue)


def wait_formed(settings: Settings, seat: TakenSeat, worker: str) -> Formed | None:
    """Hold the seat until every seat is taken (the job runs) or the gang is dissolved."""
    job_id, rank, nodes = seat.job_id, seat.rank, seat.nodes
    log.info("job %s: seat %d of %d taken; waiting for the gang", job_id, rank, nodes)
    while True:
        formed, woken, seated = _look(settings, seat, worker)
        for job_id in woken:
            republish(job_id)
        if formed is not None or not seated:
            return formed
        if shutdown.requested():
            leave_forming(seat.job_id)
            return None
        time.sleep(POLL_SECONDS)


def _look(
    settings: Settings, seat: TakenSeat, worker: str
) -> tuple[Formed | None, list[str], bool]:
    """(the formed gang, jobs to wake, whether the seat is still held), in one transaction."""
    with session_scope() as session:
        if not gang.renew_seat(session, seat.job_id, worker, settings):
            return None, [], False
        woken = gang.dissolve_stale(session, settings)
        job = crud.get_job(session, seat.job_id)
        seats = gang.seats_of(session, seat.job_id)
        mine = next((s for s in seats if s.worker == worker), None)
        if job is None or mine is None:
            return None, woken, False
        if job.status != JobStatus.running or mine.attempt != job.attempt:
            return None, woken, True
        assert job.started_at is not None  # the claim set it
        peers = tuple(f"{s.address}:{s.port}" for s in seats)  # each seat published its own
        node = GangNode(mine.rank, job.nodes, f"tcp://{peers[0]}", peers, mine.secret or "")
        formed = Formed(
            job.id, job.attempt, job.spec, job.started_at, node, worker, job.memory_bytes
        )
        return formed, woken, True


def leave_forming(job_id: str) -> None:
    """This worker cannot wait any more: the forming gang is dissolved and its job woken."""
    with session_scope() as session:
        seats = gang.seats_of(session, job_id)
        gang.release(session, job_id, [s.worker for s in seats])
    republish(job_id)


def describe(settings: Settings, formed: Formed) -> str:
    """The job log's line about this node: its rank and where the gang meets."""
    address, why = advertised(settings)
    interface = gang_address.interface_of(address) or "not found"
    node = formed.node
    return (
        f"gang node {node.rank} of {node.nodes} on {formed.worker}, address {address} ({why}; "
        f"interface {interface}); rendezvous at {node.init_url}; nodes at {','.join(node.peers)}"
    )


class SeatKeeper(LeaseKeeper):
    """A seat's lease, renewed like a job's: rank 0 renews the job's lease too and watches
    the other seats; another node renews only its seat, and stops once the attempt is over."""

    def __init__(
        self, settings: Settings, formed: Formed, renewed_at: float, files: JobFiles
    ) -> None:
        # Rank 0's renewals carry the epoch's steps (its child writes them); the others' none.
        progress_from = files if formed.node.rank == 0 else None
        super().__init__(settings, formed.job_id, formed.attempt, renewed_at, progress_from)
        self.formed = formed

    def _renew(self, progress: StepProgress | None) -> JobStatus | None:
        formed = self.formed
        if formed.node.rank == 0:
            status = super()._renew(progress)
            if status is not None:
                with session_scope() as session:
                    gang.renew_seat(session, formed.job_id, formed.worker, self.settings)
                    self.broken = gang.broken(session, formed.job_id, formed.attempt, formed.worker)
            return status
        with session_scope() as session:
            job = crud.get_job(session, formed.job_id)
            if job is None or job.attempt != formed.attempt:
                return None
            # Rank 0 recorded the gang's end (and let the seats go): this node's process is
            # leaving too. Not a lost lease: the supervisor gives it a grace to exit.
            if job.status in TERMINAL:
                return JobStatus(job.status)
            renewed = gang.renew_seat(session, formed.job_id, formed.worker, self.settings)
            return JobStatus(job.status) if renewed and job.status in ACTIVE else None


def rank_of(formed: Formed | None) -> int:
    """This worker's node of the job: its rank in a gang, 0 for a one-node job."""
    return 0 if formed is None else formed.node.rank


# What only node 0's training process uses (its main rank writes the job's rows); another
# node's process never connects to either, so they stay out of its environment.
NODE_0_ONLY = ("EPOCHAL_DATABASE_URL", "EPOCHAL_BROKER_URL")


def node_env(settings: Settings, formed: Formed | None, env: dict[str, str]) -> dict[str, str]:
    """A training process's environment `env`, for a gang's node: its node (rank, where the
    gang meets, the attempt's secret for PyTorch, which alone uses it), the listeners' port
    sharing and interface, and for a node but 0 no database or broker URL."""
    if formed is None:
        return env
    node = formed.node.env()
    spec = formed.spec
    framework = spec.get("framework") if isinstance(spec, dict) else getattr(spec, "framework", "")
    if framework == "tensorflow":  # its servers cannot ask for it (DEPLOY.md, trust model)
        node.pop(GANG_SECRET_ENV, None)
    interface = gang_address.interface_of(advertised(settings)[0])
    # gloo and NCCL listen on the advertised interface (unless the operator named one)
    hints = {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface} if interface else {}
    kept = {k: v for k, v in env.items() if formed.node.rank == 0 or k not in NODE_0_ONLY}
    return {**hints, **kept, TF_REUSE_PORT_ENV: "1", **node}


def settle(settings: Settings, formed: Formed, outcome: Outcome, broken: str | None) -> Outcome:
    """Rank 0's outcome: a failure while a rank was lost is the gang's loss (worker_lost,
    retried), unless the nodes had agreed to stop (a preemption, a shutdown: re-queued as
    that). Another rank's own end may come moments after ours (the broken collective reached us
    first), so such an end waits, renewing the job's lease, until every rank has told how
    it ended or one's seat lapsed (a lease at most)."""
    if outcome.status != JobStatus.failed or outcome.error_code not in COLLECTIVE_FAILURES:
        return outcome
    # A seat renewed just before its worker died lapses a lease after that renewal: a lease
    # from now, give or take a renewal's round trip, so wait a heartbeat more than that.
    deadline = time.monotonic() + settings.lease_seconds + settings.heartbeat_seconds
    while broken is None and time.monotonic() < deadline:
        with session_scope() as session:
            crud.renew_lease(session, formed.job_id, formed.attempt, settings.lease_seconds)
            broken = gang.broken(session, formed.job_id, formed.attempt, formed.worker)
            seats = gang.seats_of(session, formed.job_id)
            if all(s.state != gang.SEATED for s in seats if s.worker != formed.worker):
                break
        time.sleep(POLL_SECONDS)
    if broken is None or outcome.error_code in AGREED_STOPS:  # every node agreed to stop
        return outcome  # there, after rank 0's checkpoint: another rank's end cannot undo that
    return Outcome.failure(
        ErrorCode.worker_lost, f"the gang lost a rank: {broken} ({outcome.error})"
    )


def end_seat(formed: Formed, clean: bool) -> None:
    """Another node's process ended: tell rank 0 whether cleanly."""
    with session_scope() as session:
        gang.end_seat(session, formed.job_id, formed.worker, gang.DONE if clean else gang.LOST)


def release(formed: Formed) -> None:
    """Rank 0, after writing the attempt's end: the gang's seats go, its workers are free."""
    with session_scope() as session:
        seats = [s for s in gang.seats_of(session, formed.job_id) if s.attempt == formed.attempt]
        if seats:
            gang.release(session, formed.job_id, [s.worker for s in seats])
