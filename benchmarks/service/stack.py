"""Start and stop everything a service benchmark needs: its own PostgreSQL database and Redis DB
number (or a temporary embedded home), the API as in production, and a worker. Loopback only."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from app.core.db import make_engine
from tests.helpers import (
    PG_ADMIN,
    REDIS,
    Service,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate_in_subprocess,
    pick_redis_db,
)

# A load generator submits more jobs than one key may have active.
UNLIMITED = {"EPOCHAL_MAX_ACTIVE_JOBS_PER_KEY": "0"}
# Heartbeats and maintenance passes sooner than the defaults, so a benchmark that waits on them
# (a worker seen, a lease reaped) is done sooner; not for one that times a job against the
# loop run by hand, which these extra wake-ups slow down (BENCHMARKS.md, "The overhead job").
FAST = {"EPOCHAL_HEARTBEAT_SECONDS": "1", "EPOCHAL_MAINTENANCE_SECONDS": "2"}


@contextmanager
def bench_env(kind: str, fast: bool = True) -> Iterator[dict[str, str]]:
    """Settings for `postgres` (PostgreSQL + Redis) or `sqlite` (the embedded default), migrated;
    `fast=False` keeps the defaults' heartbeat and maintenance intervals."""
    home = Path(tempfile.mkdtemp(prefix=f"epochal-bench-{kind}-"))
    env = {"EPOCHAL_HOME": str(home / "home"), **UNLIMITED, **(FAST if fast else {})}
    name, redis_client = None, None
    try:
        if kind == "postgres":
            name = f"epochal_bench_{secrets.token_hex(4)}"
            url, redis_client = pick_redis_db(REDIS)
            env |= {
                "EPOCHAL_DATABASE_URL": create_pg_database(PG_ADMIN, name),
                "EPOCHAL_BROKER_URL": url,
            }
        migrate_in_subprocess(env)
        yield env
    finally:
        if redis_client is not None:
            redis_client.flushdb()
        if name is not None:
            drop_pg_database(PG_ADMIN, name)
        shutil.rmtree(home, ignore_errors=True)


def engine_for(env: dict[str, str]) -> Engine:
    url = env.get("EPOCHAL_DATABASE_URL") or f"sqlite:///{env['EPOCHAL_HOME']}/epochal.db"
    return make_engine(url) if url.startswith("sqlite") else create_engine(url)


@contextmanager
def running(env: dict[str, str], api_workers: int = 1, worker: bool = False) -> Iterator[Service]:
    """The API (uvicorn with api_workers processes) and optionally one Celery worker."""
    service = Service(env, f"http://127.0.0.1:{free_port()}")
    service.api_key = service.create_key("bench-admin", admin=True)
    try:
        service.start_api(workers=api_workers)
        if worker:
            service.start_worker()
        yield service
    finally:
        service.stop_all()
