"""The address a worker offers a multi-node job's other workers, and the port it would host
the rendezvous on."""

from __future__ import annotations

import socket
from pathlib import Path

from app.core.config import Settings
from worker.supervisor.gang import advertised, rendezvous


def test_the_configured_address_wins(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, worker_address="10.1.2.3")
    assert advertised(settings) == ("10.1.2.3", "EPOCHAL_WORKER_ADDRESS")


def test_else_the_interface_that_routes_to_the_database(tmp_path: Path) -> None:
    url = "postgresql+psycopg://u@127.0.0.1:5432/db"
    address, why = advertised(Settings(home=tmp_path, database_url=url))
    assert address == "127.0.0.1" and "routes to the database (127.0.0.1)" in why


def test_sqlite_means_one_host(tmp_path: Path) -> None:
    address, why = advertised(Settings(home=tmp_path))
    assert address == "127.0.0.1" and "one host" in why


def test_the_rendezvous_port_is_free_on_every_interface(tmp_path: Path) -> None:
    where = rendezvous(Settings(home=tmp_path))
    with socket.socket() as sock:
        sock.bind(("", where.port))  # nobody holds it: rank 0's store can listen there
    assert where.address == "127.0.0.1"
