"""Test plumbing: settings switching, databases, and starting the real service processes."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Coroutine, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import sqlalchemy as sa

from app.core.async_db import close_pool
from app.core.config import get_settings
from app.core.db import reset_engines
from app.domain.keys import KEYS
from app.services.queue import producer
from app.storage.health import store_watch
from app.storage.registry import get_store

ROOT = Path(__file__).resolve().parent.parent
# The real services the tests and benchmarks use, each run in a database / DB number of its own.
PG_ADMIN = os.environ.get(
    "EPOCHAL_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS = os.environ.get("EPOCHAL_TEST_REDIS", "redis://127.0.0.1:6379")
# The checkout's `epochal`, server verbs included; tests/packaging runs an installed one instead.
CHECKOUT_CLI = (sys.executable, "-m", "app.cli")
# A percent-encoded query parameter no route reads: the polled routes' fast path never answers
# such a query (app.api.polled), so a request with it appended gets the FastAPI route's answer.
VIA_ROUTE = "_=%30"
# The one factor for every wall-clock budget the tests keep (each sized on a 2-core machine
# running one test at a time): .ci/run measures the machine's speed and sets it (1 by default,
# at most 6); tests run side by side (`make test` uses pytest-xdist) share the cores, so the
# budgets stretch by how many more tests than core pairs run at once.
MACHINE_SCALE = min(max(float(os.environ.get("EPOCHAL_TEST_TIME_SCALE") or 1), 1.0), 6.0)
PARALLEL_TESTS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
TIME_SCALE = MACHINE_SCALE * max(1.0, PARALLEL_TESTS * 2 / (os.cpu_count() or 2))
# Each test's share of the cores for the training it runs, in process or in the services it
# starts (they inherit the environment). PyTorch (OpenMP) and TensorFlow size their thread pools
# by the host's cores, so two tests side by side, each training on a thread per core, make their
# spinning threads fight: test_service.py's PostgreSQL and SQLite halves side by side took 85 s
# and 154 s of CPU with the defaults, 63 s and 112 s with one thread each.
# (Set in each xdist worker only: one test at a time gets the defaults, a thread per core.)
# A worker a test starts chooses its children's threads itself (worker.supervisor.threads),
# from EPOCHAL_WORKER_CPUS: the same share.
if PARALLEL_TESTS > 1:
    TRAIN_THREADS = str(max(1, (os.cpu_count() or 2) // PARALLEL_TESTS))
    os.environ.setdefault("OMP_NUM_THREADS", TRAIN_THREADS)
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", TRAIN_THREADS)
    os.environ.setdefault("EPOCHAL_WORKER_CPUS", TRAIN_THREADS)


def scaled(seconds: float) -> float:
    """A budget in seconds, sized on a fast machine, stretched for this one."""
    return seconds * TIME_SCALE


def run_module(
    module: str, *args: str, env: dict[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m module *args` from the checkout, its output captured as text; `env` is added
    to this process's environment; `timeout` (a fast machine's seconds) is scaled, and None
    waits for the command to end."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, **env} if env else None,
        capture_output=True,
        text=True,
        timeout=None if timeout is None else scaled(timeout),
        check=False,
    )


def as_background_job() -> None:
    """preexec_fn: start a command with SIGINT ignored, as a shell starts `cmd &` (and CI
    runners their steps): Ctrl-C must still reach the commands that promise to answer it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def configure(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Point this process's settings, engines and producer at `env`."""
    for key in (
        "EPOCHAL_DATABASE_URL",
        "EPOCHAL_BROKER_URL",
        "EPOCHAL_HOME",
        "EPOCHAL_STORE_URL",
        "EPOCHAL_STORE_ENDPOINT",
    ):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    clear_caches()


def run_async(main: Coroutine[Any, Any, Any]) -> Any:
    """asyncio.run(main), closing the loop's PostgreSQL pool after it (app.core.async_db), as
    the app's shutdown does: a pool left open keeps the loop from ending."""

    async def closing() -> Any:
        try:
            return await main
        finally:
            await close_pool()

    return asyncio.run(closing())


def clear_caches() -> None:
    get_settings.cache_clear()
    get_store.cache_clear()
    store_watch.cache_clear()
    producer.cache_clear()
    reset_engines()
    KEYS.clear()


def migrate() -> None:
    from alembic import command

    from app.cli import alembic_config

    get_settings().resolved_home.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(), "head")


_sqlite_template: list[Path] = []  # this process's migrated, empty SQLite database


def migrate_sqlite() -> None:
    """migrate() for a fresh embedded home: the first in a process runs Alembic, the others get
    a copy of what it made (sqlite3's backup API: ~1 ms against ~55 ms of Alembic a test)."""
    target = Path(str(sa.engine.make_url(get_settings().sqlalchemy_url).database))
    if not _sqlite_template:
        migrate()
        folder = Path(tempfile.mkdtemp(prefix="epochal-test-template-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _copy_sqlite(target, folder / target.name)
        _sqlite_template.append(folder / target.name)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    _copy_sqlite(_sqlite_template[0], target)


def _copy_sqlite(source: Path, target: Path) -> None:
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


def migrate_in_subprocess(env: dict[str, str]) -> None:
    subprocess.run(
        [*CHECKOUT_CLI, "migrate"],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        capture_output=True,
    )


def create_pg_database(admin_url: str, name: str) -> str:
    try:
        engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        engine.dispose()
    except sa.exc.OperationalError as exc:
        pytest.fail(f"PostgreSQL is required for these tests and is not reachable: {exc}")
    return str(
        sa.engine.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    )


def drop_pg_database(admin_url: str, name: str) -> None:
    reset_engines()
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    engine.dispose()


REDIS_LOCK = "epochal-test-lock"


def pick_redis_db(base: str) -> tuple[str, redis.Redis]:
    """An empty DB number (1-15) that no other run is using; a DB whose run died is taken back."""
    for number in list(range(1, 16)):
        client = redis.Redis.from_url(f"{base}/{number}")
        try:
            if _reclaim_if_abandoned(client) and client.set(REDIS_LOCK, os.getpid(), nx=True):
                return f"{base}/{number}", client
        except redis.exceptions.ConnectionError as exc:
            pytest.fail(f"Redis is required for these tests and is not reachable: {exc}")
    pytest.fail("no empty Redis DB number left (1-15)")


def _reclaim_if_abandoned(client: redis.Redis) -> bool:
    """True when the DB is empty, or held by a test run whose process is gone (then emptied).

    A killed run never flushes its DB; without this, 15 killed runs would leave none free."""
    if client.dbsize() == 0:
        return True
    owner = client.get(REDIS_LOCK)
    if owner is None or not owner.isdigit() or _alive(int(owner)):
        return False  # not a test run's DB, or its run is still going
    with client.pipeline() as pipe:
        try:  # only one reclaimer wins: the lock must still name the dead run
            pipe.watch(REDIS_LOCK)
            if pipe.get(REDIS_LOCK) != owner:
                return False
            pipe.multi()
            pipe.flushdb()
            pipe.execute()
        except redis.exceptions.WatchError:
            return False
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def truncate_all() -> None:
    from app.core.db import get_engine
    from app.domain.tables import Base

    with get_engine().begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(table.delete())


@contextmanager
def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A size-limited tmpfs mounted on `folder` (a small disk to fill), unmounted after.

    Mounting needs root (or CAP_SYS_ADMIN): elsewhere the test is skipped, saying why."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", None) or exc
        pytest.skip(f"cannot mount a {size} tmpfs to fill (needs root): {detail}")
    try:
        yield folder
    finally:  # lazily: a process of the test still holding a file must not keep it mounted
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Service:
    """A live API (uvicorn) and worker (Celery) started as real processes."""

    env: dict[str, str]
    url: str
    api_key: str = ""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: Path = ROOT / "test-artifacts"
    command: tuple[str, ...] = CHECKOUT_CLI  # how to run `epochal`, from `cwd`
    cwd: Path = ROOT

    def client(self, api_key: str | None = None) -> httpx.Client:
        key = self.api_key if api_key is None else api_key
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, timeout=30, headers=headers)

    def create_key(self, name: str, admin: bool = False) -> str:
        """A new API key made with the real CLI (the key is the last word it prints)."""
        out = self.run_cli("keys", "create", name, *(["--admin"] if admin else []))
        return out.split()[-1]

    def run_cli(self, *args: str) -> str:
        """Run a server verb of `epochal` against this service; its output."""
        out = subprocess.run(
            [*self.command, *args],
            cwd=self.cwd,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout

    def start_api(self, workers: int = 1) -> None:
        port = self.url.rsplit(":", 1)[1]
        argv = [*self.command, "api", "--port", port, "--workers", str(workers)]
        self.spawn("api", argv)
        wait_until(lambda: answers(self.url + "/healthz"), 30, "the API to answer /healthz")

    def start_worker(self, name: str = "worker", extra_env: dict[str, str] | None = None) -> None:
        node = f"{name}-{os.getpid()}@%h"
        self.spawn(name, [*self.command, "worker", "--name", node], extra_env)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.processes.pop(name, None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=scaled(30))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> None:
        """Start `argv` as process `name` in its own session, its output in test-artifacts."""
        self.logs.mkdir(exist_ok=True)
        log = open(self.logs / f"{Path(self.env['EPOCHAL_HOME']).parent.name}-{name}.log", "ab")  # noqa: SIM115
        env = {**os.environ, **self.env, **(extra_env or {}), "PYTHONUNBUFFERED": "1"}
        self.processes[name] = subprocess.Popen(
            argv,
            cwd=self.cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def answers(url: str) -> bool:
    """Whether a GET of `url` answers 200 now."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll until `predicate` is truthy; `timeout` (a fast machine's seconds) is scaled."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@contextmanager
def running_service(env: dict[str, str], worker: bool = True, **settings: str) -> Iterator[Service]:
    """API + worker against the given settings (fast heartbeats so tests stay short)."""
    full_env = {
        "EPOCHAL_HEARTBEAT_SECONDS": "1",
        "EPOCHAL_MAINTENANCE_SECONDS": "1",
        # Most e2e jobs are PyTorch: a warm TensorFlow child per worker start (and again after
        # each TensorFlow job) is seconds of CPU no test uses; TensorFlow jobs start cold.
        "EPOCHAL_WARM_FRAMEWORKS": "pytorch",
        **env,
        **settings,
    }
    service = Service(full_env, f"http://127.0.0.1:{free_port()}")
    service.api_key = service.create_key("e2e-admin", admin=True)
    try:
        service.start_api()
        if worker:
            service.start_worker()
        yield service
    finally:
        service.stop_all()


def wait_for_status(
    client: httpx.Client, job_id: str, statuses: set[str], timeout: float = 180
) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        job = client.get(f"/v1/jobs/{job_id}").json()
        return job if job["status"] in statuses else None

    return wait_until(done, timeout, f"job {job_id} to reach {statuses}", interval=0.3)


def submit_job(client: httpx.Client, **spec: Any) -> dict[str, Any]:
    """POST a spec (a PyTorch job unless it says otherwise); the 201 body."""
    response = client.post("/v1/jobs", json={"framework": "pytorch", **spec})
    assert response.status_code == 201, response.text
    return dict(response.json())


def metric_attempts(service: Service, job_id: str) -> list[tuple[int, int]]:
    """(epoch, attempt that wrote it) for each stored row, straight from PostgreSQL."""
    engine = sa.create_engine(service.env["EPOCHAL_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT epoch, attempt FROM epoch_metric WHERE job_id = :j ORDER BY epoch"),
                {"j": job_id},
            )
            return [(int(e), int(a)) for e, a in rows]
    finally:
        engine.dispose()


def latest_checkpoint(service: Service, job_id: str) -> str | None:
    """The checkpoint set the job's row names as its latest, straight from PostgreSQL."""
    engine = sa.create_engine(service.env["EPOCHAL_DATABASE_URL"])
    try:
        with engine.connect() as conn:
            query = sa.text("SELECT latest_checkpoint FROM job WHERE id = :j")
            return conn.execute(query, {"j": job_id}).scalar_one()
    finally:
        engine.dispose()


def run_cli(
    service: Service, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`epochal ARGS` from the checkout against the live service, as a user runs it: none of
    the tests' own EPOCHAL_ settings, the service's address and key; `timeout` is scaled."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    base |= {"EPOCHAL_URL": service.url, "EPOCHAL_API_KEY": service.api_key, **(env or {})}
    argv = [sys.executable, "-m", "app.cli", *args]
    return subprocess.run(
        argv, cwd=ROOT, env=base, capture_output=True, text=True, timeout=scaled(timeout)
    )
