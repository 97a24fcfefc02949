"""One engine per process (app.core.db.get_engine), on real PostgreSQL: concurrent first calls
share it (RELIABILITY.md §9), and a forked child never uses its parent's connections (P39)."""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, text

from app.core import db
from tests.helpers import scaled

THREADS = 16


def test_concurrent_first_calls_make_one_engine(
    pg_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db.reset_engines()
    start = threading.Barrier(THREADS)
    real = db.make_engine

    def slow_make_engine(url: str) -> Engine:
        time.sleep(0.05)  # widen the window: without the lock every thread makes its own
        return real(url)

    monkeypatch.setattr(db, "make_engine", slow_make_engine)

    def first_call(_: int) -> Engine:
        start.wait()  # every thread asks before any engine exists
        return db.get_engine()

    with ThreadPoolExecutor(THREADS) as pool:
        engines = list(pool.map(first_call, range(THREADS)))
    assert len({id(engine) for engine in engines}) == 1


def test_a_forked_child_gets_an_engine_of_its_own(pg_env: dict[str, str]) -> None:
    parent = db.get_engine()
    with parent.connect() as conn:  # a pooled connection the child could inherit
        parent_backend = conn.execute(text("SELECT pg_backend_pid()")).scalar()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its backend pid, or -1 if it reused the parent's engine
        try:
            engine = db.get_engine()
            with engine.connect() as conn:
                backend = conn.execute(text("SELECT pg_backend_pid()")).scalar()
            os.write(write, str(-1 if engine is parent else backend).encode())
        finally:
            os._exit(0)
    os.close(write)
    if not select.select([read], [], [], scaled(30))[0]:  # a lock held at the fork: no hang
        os.kill(pid, signal.SIGKILL)
    child_backend = int(os.read(read, 64) or 0)
    os.waitpid(pid, 0)
    assert child_backend not in (-1, parent_backend)
    with parent.connect() as conn:  # the parent's pooled connection still works
        assert conn.execute(text("SELECT pg_backend_pid()")).scalar() == parent_backend
