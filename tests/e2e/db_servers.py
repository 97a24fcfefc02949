"""Database faults a test can cause without touching the shared PostgreSQL: a private server it
may restart, and a TCP proxy in front of a server that can stop forwarding (a hung network)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.helpers import free_port, scaled


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise AssertionError("PostgreSQL's initdb is needed for a private server (apt: postgresql)")
    return Path(initdb).parent


class PrivatePostgres:
    """initdb + pg_ctl on a free port in a temporary folder (never the shared 5432 server).

    PostgreSQL refuses to run as root, so as root its files belong to, and its commands run
    as, the `postgres` user. No fsync: nothing here must survive a power cut."""

    def __init__(self) -> None:
        self.bin, self.port = _bin_dir(), free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="epochal-pg-"))
        self.data, self.log = self.folder / "data", self.folder / "server.log"
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-N")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [str(self.bin / tool), *args],
            user=self.user,
            cwd=self.folder,
            check=True,
            capture_output=True,
            timeout=scaled(60),
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start")

    def stop(self) -> None:
        """A fast shutdown, as a restart does: every session is terminated."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def create_database(self, name: str) -> str:
        engine = sa.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        engine.dispose()
        return self.url(name)

    def remove(self) -> None:
        subprocess.run(
            [str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
            user=self.user,
            capture_output=True,
        )
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.start()
        yield server
    finally:
        server.remove()


class StallingProxy:
    """Forwards TCP connections to `target` until `stall()`: then no byte moves either way and
    new connections wait, as behind a hung router; the sockets stay open. `resume()` forwards
    again, what was held back included."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target, self.port = target, free_port()
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def url_for(self, url: str) -> str:
        return str(sa.make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(False))

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        for sock in [self._listener, *self._sockets]:
            try:
                sock.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._flowing.wait()
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            self._flowing.wait()
            try:
                data = source.recv(65536)
                self._flowing.wait()  # read before the stall: held back, not sent
                if not data or self._closed:
                    break
                sink.sendall(data)
            except OSError:
                break
        for sock in (source, sink):
            _shut(sock)


def _shut(sock: socket.socket) -> Any:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
