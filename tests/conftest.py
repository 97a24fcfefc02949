"""Shared fixtures: isolated settings, real PostgreSQL and Redis, and a live service.

The real-service fixtures fail (never skip) when PostgreSQL or Redis cannot be reached: CI must
not go green without having talked to them.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import (
    PARALLEL_TESTS,
    PG_ADMIN,
    REDIS,
    TIME_SCALE,
    clear_caches,
    configure,
    create_pg_database,
    drop_pg_database,
    migrate,
    migrate_in_subprocess,
    migrate_sqlite,
    pick_redis_db,
)
from tests.storage_server import CREDENTIALS, SeaweedServer, start_seaweed
from worker.calibration import measured_threads, record

LONG_MODULES = ("tests/e2e/", "tests/packaging/", "tests/worker/training/")
# The long checks: whole scenarios over several real processes (gangs, stops and restarts,
# sweeps, recovery, scheduling), the installed wheels and images, and training runs long
# enough to judge accuracy or memory. Marked `slow`: `make test` leaves them out so the suite
# stays quick, `make test-slow` runs them, and CI runs both.
SLOW_MODULES = (
    "tests/packaging/",
    "tests/e2e/test_gang.py",
    "tests/e2e/test_gang_streamed.py",
    "tests/e2e/test_up.py",
    "tests/e2e/test_up_stop.py",
    "tests/e2e/test_sweeps.py",
    "tests/e2e/test_recovery.py",
    "tests/e2e/test_multi_device.py",
    "tests/e2e/test_scheduling.py",
    "tests/e2e/test_store_workers.py",
    "tests/e2e/test_store_outage.py",
    "tests/e2e/test_worker_killed_mid_upload.py",
    "tests/worker/training/test_warm_start.py",
    "tests/worker/training/test_memory_estimate.py",
    "tests/worker/training/test_sequences.py",
    "tests/worker/training/test_batch_norm_short.py",
    "tests/worker/training/test_parity.py",
    "tests/worker/training/test_replicas.py",
    "tests/worker/training/test_streamed_ranks.py",
    "tests/worker/test_threads.py",
    "tests/e2e/test_docs_run.py",
    "tests/e2e/test_hostile_load.py",
    "tests/e2e/test_db_faults.py",
    "tests/e2e/test_broker_restart.py",
    "tests/e2e/test_bigger_than_memory.py",
    "tests/e2e/test_image_example.py",
    "tests/e2e/test_upload_directory.py",
    "tests/test_benchmark_warm_start.py",
    "tests/test_benchmark_image_loader.py",
    "tests/test_benchmark_image_accuracy.py",
    "tests/test_benchmark_upload.py",
    "tests/test_benchmark_tf_precision.py",
)
# Every worker the tests start finds its box measured, with the answer of a box never measured
# (a small TensorFlow step on one thread), so no worker spends half a minute measuring and
# the suite behaves alike on every machine; tests/worker/test_calibration.py measures for real.
MEASURED_CACHE = Path(tempfile.gettempdir()) / f"epochal-tests-cache-{os.getuid()}"
os.environ.setdefault("EPOCHAL_CACHE_DIR", str(MEASURED_CACHE))
if os.environ["EPOCHAL_CACHE_DIR"] == str(MEASURED_CACHE):
    for cpus in range(2, max(os.cpu_count() or 1, 8) + 1):
        if measured_threads(MEASURED_CACHE, cpus) is None:
            record(MEASURED_CACHE, cpus, 1, {})


@pytest.hookimpl(tryfirst=True)  # marked before `-m` deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The slow modules marked; long modules first when tests run side by side;
    pytest-timeout's limits times TIME_SCALE."""
    for item in items:
        if item.nodeid.startswith(SLOW_MODULES):
            item.add_marker(pytest.mark.slow)
    if PARALLEL_TESTS > 1:
        # xdist hands out whole modules (--dist loadfile) in this order: the long ones (real
        # services, packaging, in-process training) first, so the many short ones fill in
        # around them at the end.
        items.sort(key=lambda item: not item.nodeid.startswith(LONG_MODULES))
    if TIME_SCALE == 1:
        return
    default = float(config.getoption("timeout", None) or config.getini("timeout") or 0)
    for item in items:
        marker = item.get_closest_marker("timeout")
        seconds = float(marker.args[0]) if marker is not None and marker.args else default
        if seconds:  # put first, so it is the closest
            item.add_marker(pytest.mark.timeout(seconds * TIME_SCALE), append=False)


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    """Settings, engines and the producer are per process; tests switch them, so reset after."""
    yield
    clear_caches()


@pytest.fixture
def sqlite_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A migrated SQLite database and filesystem broker under tmp_path (the embedded default)."""
    env = {"EPOCHAL_HOME": str(tmp_path / "home")}
    configure(monkeypatch, env)
    migrate_sqlite()
    yield env


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, dropped at the end."""
    name = f"epochal_test_{secrets.token_hex(4)}"
    url = create_pg_database(PG_ADMIN, name)
    yield url
    drop_pg_database(PG_ADMIN, name)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """An empty Redis DB number of its own for this run, flushed at the end."""
    url, client = pick_redis_db(REDIS)
    yield url
    client.flushdb()


@pytest.fixture
def pg_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_database: str, redis_url: str
) -> Iterator[dict[str, str]]:
    """Production-like settings: PostgreSQL + Redis, schema migrated, tables emptied after."""
    env = {
        "EPOCHAL_HOME": str(tmp_path / "home"),
        "EPOCHAL_DATABASE_URL": pg_database,
        "EPOCHAL_BROKER_URL": redis_url,
    }
    configure(monkeypatch, env)
    migrate()
    yield env
    from tests.helpers import truncate_all

    truncate_all()


@pytest.fixture(params=["sqlite", "postgres"])
def db_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """Each test that takes it runs on the embedded default and on PostgreSQL + Redis."""
    return request.getfixturevalue("sqlite_env" if request.param == "sqlite" else "pg_env")


@contextmanager
def make_service_env(kind: str, home: Path) -> Iterator[dict[str, str]]:
    """Migrated settings for a live service: embedded, or PostgreSQL + Redis of its own."""
    env = {"EPOCHAL_HOME": str(home)}
    cleanup = []
    if kind == "postgres":
        name = f"epochal_e2e_{secrets.token_hex(4)}"
        url, client = pick_redis_db(REDIS)
        env |= {
            "EPOCHAL_DATABASE_URL": create_pg_database(PG_ADMIN, name),
            "EPOCHAL_BROKER_URL": url,
        }
        cleanup += [client.flushdb, lambda: drop_pg_database(PG_ADMIN, name)]
    migrate_in_subprocess(env)
    try:
        yield env
    finally:
        for step in cleanup:
            step()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def service_env(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """Settings for a live service, embedded or PostgreSQL + Redis, each with its own storage."""
    home = tmp_path_factory.mktemp(f"svc-{request.param}") / "home"
    with make_service_env(request.param, home) as env:
        yield env


@pytest.fixture(scope="module")
def pg_service_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Settings for a live production-like service only (PostgreSQL + Redis)."""
    with make_service_env("postgres", tmp_path_factory.mktemp("svc-pg") / "home") as env:
        yield env


def make_key(name: str, admin: bool = False) -> str:
    from app.core.db import session_scope
    from app.domain.keys import create_key

    with session_scope() as session:
        return create_key(session, name, is_admin=admin)[1]


@pytest.fixture
def api_key(db_env: dict[str, str]) -> str:
    """A plain (non-admin) key in the test database."""
    return make_key("tester")


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """One SeaweedFS (an S3 server) for the session, stopped and its folder removed at the end."""
    server = start_seaweed(tmp_path_factory.mktemp("seaweed") / "data")
    yield server
    server.stop()


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The standard AWS variables, as a deployment sets them (no file of the user's read)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
