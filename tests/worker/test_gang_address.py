"""The address a worker offers a multi-node job's other workers, the port it would host the
rendezvous on, the interface and host it is on, and the rule that a gang over several hosts
never forms on an address only one host reaches (loopback, Docker's default bridge)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.config import Settings, get_settings
from app.core.db import session_scope
from app.domain import crud
from app.domain.tables import GangSeat, Job, Worker
from app.scheduler import gang
from app.scheduler.claim import claim_next
from app.scheduler.gang import Rendezvous, TakenSeat
from app.scheduler.gang_reach import DOCKER_BRIDGE, LOOPBACK, unreachable
from app.schemas.job_spec import JobSpec
from tests.helpers import ROOT
from worker.supervisor.gang_address import interface_of, local_only, this_machine_netns
from worker.supervisor.gang_seat import advertised, rendezvous


def test_the_configured_address_wins(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, worker_address="10.1.2.3")
    assert advertised(settings) == ("10.1.2.3", "EPOCHAL_WORKER_ADDRESS")


def test_else_the_interface_that_routes_to_the_database(tmp_path: Path) -> None:
    url = "postgresql+psycopg://u@127.0.0.1:5432/db"
    address, why = advertised(Settings(home=tmp_path, database_url=url))
    assert address == "127.0.0.1" and "routes to the database (127.0.0.1)" in why


def test_sqlite_means_one_host(tmp_path: Path) -> None:
    address, why = advertised(Settings(home=tmp_path))
    assert address == "127.0.0.1" and "one machine" in why


def test_the_rendezvous_port_is_held_until_let_go(tmp_path: Path) -> None:
    where, holder = rendezvous(Settings(home=tmp_path))
    with socket.socket() as sock, pytest.raises(OSError):  # another program: EADDRINUSE
        sock.bind(("", where.port))
    holder.close()
    with socket.socket() as sock:
        sock.bind(("", where.port))  # let go: free again
    assert where.address == "127.0.0.1"


def test_the_interface_that_holds_an_address_is_found() -> None:
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("localhost") == "lo"
    assert interface_of("192.0.2.1") is None  # TEST-NET-1: on no interface here
    assert interface_of("no-such-host.invalid") is None


@pytest.mark.parametrize(
    ("address", "interface", "kind"),
    [
        ("127.0.0.1", "lo", LOOPBACK),
        ("127.0.1.1", None, LOOPBACK),  # Debian's /etc/hosts entry for the host's own name
        ("localhost", None, LOOPBACK),
        ("172.17.0.5", None, DOCKER_BRIDGE),
        ("10.0.0.5", "docker0", DOCKER_BRIDGE),
        ("172.18.0.5", "eth0", None),  # a network of its own, not the default bridge
        ("10.0.0.5", "eth0", None),
        ("no-such-host.invalid", None, None),  # unknown: not refused here, the store times out
    ],
)
def test_loopback_and_the_default_bridge_reach_only_their_host(
    address: str, interface: str | None, kind: str | None
) -> None:
    assert local_only(address, interface) == kind


def test_this_machine_netns_is_the_machine_and_the_network_namespace() -> None:
    machine, netns = this_machine_netns().split("/", 1)
    assert machine == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert netns.startswith("net:[")
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from worker.supervisor.gang_address import this_machine_netns as h; print(h())",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert (
        child.stdout.strip() == this_machine_netns()
    )  # another process of the same machine says the same


def test_the_offer_says_its_host_and_that_loopback_reaches_only_it(tmp_path: Path) -> None:
    offer, held = rendezvous(Settings(home=tmp_path))
    assert (offer.machine_netns, offer.local_only) == (this_machine_netns(), LOOPBACK)
    routed, held_too = rendezvous(Settings(home=tmp_path, worker_address="192.0.2.1"))
    assert routed.local_only is None
    held.close()
    held_too.close()


def seat(rank: int, address: str, where: str, kind: str | None = None) -> GangSeat:
    return GangSeat(
        worker=f"w{rank}", rank=rank, address=address, machine_netns=where, local_only=kind
    )


def test_a_local_only_address_is_refused_only_across_hosts() -> None:
    here, there, other_ns = "m1/net:[1]", "m2/net:[1]", "m1/net:[2]"
    assert (
        unreachable([seat(0, "127.0.0.1", here, LOOPBACK), seat(1, "127.0.0.1", here, LOOPBACK)])
        is None
    )
    assert unreachable([seat(0, "10.0.0.1", here), seat(1, "10.0.0.2", there)]) is None
    why = unreachable([seat(0, "10.0.0.1", here), seat(1, "127.0.0.1", there, LOOPBACK)])
    assert why is not None and why.startswith("node 1 (w1) offers 127.0.0.1, a loopback address")
    assert "node 0 (w0) on another machine" in why and "EPOCHAL_WORKER_ADDRESS on w1" in why
    # Loopback is one network namespace's; the default bridge is every container's of a machine.
    assert unreachable(
        [seat(0, "127.0.0.1", here, LOOPBACK), seat(1, "127.0.0.1", other_ns, LOOPBACK)]
    )
    bridged = [
        seat(0, "172.17.0.2", here, DOCKER_BRIDGE),
        seat(1, "172.17.0.3", other_ns, DOCKER_BRIDGE),
    ]
    assert unreachable(bridged) is None
    across = unreachable(
        [seat(0, "172.17.0.2", here, DOCKER_BRIDGE), seat(1, "172.17.0.2", there, DOCKER_BRIDGE)]
    )
    assert across is not None and "Docker's default bridge" in across
    assert (
        unreachable([seat(0, "127.0.0.1", "", LOOPBACK), seat(1, "10.0.0.2", there)]) is None
    )  # unknown host


def add_worker(name: str) -> None:
    with session_scope() as session:
        session.add(Worker(name=name, hostname="h", pid=1, gpus=0, devices=[], queues=[]))


def claim(worker: str, where: Rendezvous) -> Job | TakenSeat | None:
    with session_scope() as session:
        return claim_next(session, worker, 0, get_settings(), where)


def two_node_job() -> str:
    spec = {"framework": "pytorch", "dataset": {"name": "digits"}, "resources": {"nodes": 2}}
    with session_scope() as session:
        return crud.create_job(session, JobSpec.model_validate(spec), "gpus-0").id


def test_a_gang_over_two_hosts_with_a_loopback_member_fails_saying_why(
    db_env: dict[str, str],
) -> None:
    job_id = two_node_job()
    add_worker("w0")
    add_worker("w1")
    assert claim("w0", Rendezvous("10.0.0.1", 29500, "m1/net:[1]")) == TakenSeat(job_id, 0, 2)
    assert claim("w1", Rendezvous("127.0.0.1", 29501, "m2/net:[1]", LOOPBACK)) is None
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None
        assert (job.status, job.error_code, job.stop_reason) == (
            "failed",
            "invalid_config",
            "error",
        )
        assert (
            job.error is not None
            and "the gang cannot form: node 1 (w1) offers 127.0.0.1" in job.error
        )
        assert "cannot form" in crud.transitions(session, job_id)[-1].reason
        assert not gang.seats_of(session, job_id)  # both workers free again
        busy = session.scalars(select(Worker.current_job_id)).all()
        assert busy == [None, None]


def test_a_gang_on_one_host_forms_on_loopback(db_env: dict[str, str]) -> None:
    job_id = two_node_job()
    add_worker("w0")
    add_worker("w1")
    claim("w0", Rendezvous("127.0.0.1", 29500, "m1/net:[1]", LOOPBACK))
    assert claim("w1", Rendezvous("127.0.0.1", 29501, "m1/net:[1]", LOOPBACK)) == TakenSeat(
        job_id, 1, 2
    )
    with session_scope() as session:
        job = crud.get_job(session, job_id)
        assert job is not None and job.status == "running"
        offered = [
            (s.address, s.machine_netns, s.local_only) for s in gang.seats_of(session, job_id)
        ]
    assert offered == [("127.0.0.1", "m1/net:[1]", LOOPBACK)] * 2
