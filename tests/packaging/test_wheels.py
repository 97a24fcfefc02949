"""The two distributions as users install them: built wheels, non-editable, fresh virtualenvs,
run from outside the checkout. The server box migrates, serves and trains; the laptop has only
the client, and follows a job on that server."""

from __future__ import annotations

import re
import secrets
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from app.cli import alembic_config
from app.domain.tables import Base
from tests.helpers import (
    PG_ADMIN,
    REDIS,
    ROOT,
    Service,
    create_pg_database,
    drop_pg_database,
    free_port,
    pick_redis_db,
    submit_job,
    wait_for_status,
)
from tests.packaging.venvs import Venv, Wheels, timed

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # the first test builds and installs
CLIENT_VERBS = {"submit", "follow", "jobs", "show", "metrics", "logs", "cancel", "delete",
                "download", "predict", "tensorboard", "datasets", "workers", "sweep",
                "queue", "continue"}  # fmt: skip
SERVER_VERBS = {"up", "api", "worker", "migrate", "keys"}
SERVER_ONLY_MODULES = ("fastapi", "sqlalchemy", "celery", "alembic", "app", "worker", "migrations")
TINY_DIGITS = "framework: pytorch\ndataset: {name: digits}\ntraining: {epochs: 2}\n"


def checkout_files(folder: str, pattern: str) -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / folder).glob(pattern) if p.is_file()}


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head
    return head


def schema_of(url: str) -> tuple[str, set[str]]:
    """The Alembic revision a database is at, and its tables."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            revision = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
            return str(revision), set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def listed_verbs(help_text: str) -> set[str]:
    """Command names in typer's --help boxes."""
    return set(re.findall(r"^│ ([a-z][a-z-]*) ", help_text, flags=re.MULTILINE))


def test_the_wheels_hold_the_packages_migrations_and_dashboard(wheels: Wheels) -> None:
    server = set(zipfile.ZipFile(wheels.server).namelist())
    shipped = checkout_files("migrations", "*.py") | checkout_files("migrations", "versions/*.py")
    shipped |= checkout_files("migrations", "script.py.mako") | checkout_files("app/static", "**/*")
    assert "migrations/env.py" in shipped and "app/static/index.html" in shipped
    assert shipped <= server, sorted(shipped - server)
    info = "epochal-0.1.0.dist-info"
    assert {n.split("/")[0] for n in server} == {"app", "worker", "migrations", info}
    entry_points = zipfile.ZipFile(wheels.server).read(f"{info}/entry_points.txt")
    assert b"[epochal.commands]\nserver = app.cli:register" in entry_points

    client = zipfile.ZipFile(wheels.client)
    assert {n.split("/")[0] for n in client.namelist()} == {
        "epochal_client",
        "epochal_client-0.1.0.dist-info",
    }
    scripts = client.read("epochal_client-0.1.0.dist-info/entry_points.txt")
    assert b"epochal = epochal_client.cli:main" in scripts


def test_the_server_venv_imports_the_installed_copies(server_venv: Venv) -> None:
    code = "import app, worker, migrations, epochal_client as c; print(app.__file__, c.__file__)"
    for file in server_venv.run(server_venv.python, "-c", code).split():
        assert Path(file).is_relative_to(server_venv.path), file


def test_migrate_on_sqlite_outside_the_checkout(server_venv: Venv) -> None:
    home = server_venv.outside / "sqlite-home"
    with timed("epochal migrate (SQLite)"):
        out = server_venv.run(server_venv.epochal, "migrate", EPOCHAL_HOME=str(home))
    assert "database at head" in out
    revision, tables = schema_of(f"sqlite:///{home / 'epochal.db'}")
    assert revision == head_revision() and set(Base.metadata.tables) <= tables
    assert not (server_venv.outside / "alembic.ini").exists()


@pytest.fixture(scope="module")
def pg_env(server_venv: Venv) -> Iterator[dict[str, str]]:
    """A fresh PostgreSQL database and Redis DB number, migrated by the installed `epochal`."""
    name = f"epochal_wheel_{secrets.token_hex(4)}"
    broker, redis_client = pick_redis_db(REDIS)
    env = {
        "EPOCHAL_HOME": str(server_venv.outside / "pg-home"),
        "EPOCHAL_DATABASE_URL": create_pg_database(PG_ADMIN, name),
        "EPOCHAL_BROKER_URL": broker,
    }
    try:
        with timed("epochal migrate (PostgreSQL)"):
            server_venv.run(server_venv.epochal, "migrate", **env)
        yield env
    finally:
        redis_client.flushdb()
        drop_pg_database(PG_ADMIN, name)


def test_migrate_on_a_fresh_postgres_database(pg_env: dict[str, str]) -> None:
    revision, tables = schema_of(pg_env["EPOCHAL_DATABASE_URL"])
    assert revision == head_revision() and set(Base.metadata.tables) <= tables


@pytest.fixture(scope="module")
def service(server_venv: Venv, pg_env: dict[str, str]) -> Iterator[Service]:
    """The installed `epochal api` and `epochal worker` on PostgreSQL + Redis."""
    env = server_venv.env(
        **pg_env,
        PYTHONPATH="",  # overrides any the test run has: imports come from the venv alone
        EPOCHAL_HEARTBEAT_SECONDS="1",
        EPOCHAL_WARM_FRAMEWORKS="pytorch",  # the venv has no TensorFlow
    )
    url = f"http://127.0.0.1:{free_port()}"
    svc = Service(env, url, command=(server_venv.epochal,), cwd=server_venv.outside)
    svc.api_key = svc.create_key("wheel-admin", admin=True)  # `epochal keys create`
    try:
        with timed("epochal api until /healthz"):
            svc.start_api()
        svc.start_worker("wheel-worker")
        yield svc
    finally:
        svc.stop_all()


def test_installed_api_serves_healthz_and_the_dashboard(service: Service) -> None:
    with service.client() as http:
        assert http.get("/healthz").status_code == 200
        page = http.get("/ui")
        assert page.status_code == 200 and "<html" in page.text.lower()
        for asset in checkout_files("app/static", "*.js"):
            assert http.get(f"/ui/static/{Path(asset).name}").status_code == 200, asset


def test_installed_worker_trains_a_digits_job(service: Service) -> None:
    with service.client() as http, timed("train digits, pytorch, 2 epochs (server venv)"):
        job = submit_job(http, dataset={"name": "digits"}, training={"epochs": 2})
        done = wait_for_status(http, job["id"], {"succeeded", "failed", "cancelled"})
        assert done["status"] == "succeeded", done
        rows = http.get(f"/v1/jobs/{job['id']}/metrics").json()["items"]
    assert [row["epoch"] for row in rows] == [1, 2]


def test_the_client_venv_has_no_server_dependencies(client_venv: Venv) -> None:
    probe = (
        "import importlib.util, epochal_client.client, httpx; "
        f"print(*[m for m in {SERVER_ONLY_MODULES!r} if importlib.util.find_spec(m)])"
    )
    assert client_venv.run(client_venv.python, "-c", probe).split() == []


def test_epochal_help_lists_the_verbs_each_install_has(
    client_venv: Venv, server_venv: Venv
) -> None:
    assert listed_verbs(client_venv.run(client_venv.epochal, "--help")) == CLIENT_VERBS
    on_server = listed_verbs(server_venv.run(server_venv.epochal, "--help"))
    assert on_server == CLIENT_VERBS | SERVER_VERBS


def test_the_client_alone_submits_and_follows_a_job(client_venv: Venv, service: Service) -> None:
    spec = client_venv.outside / "digits.yaml"
    spec.write_text(TINY_DIGITS)
    with timed("epochal submit --follow (client venv)"):
        out = client_venv.run(
            client_venv.epochal,
            "submit",
            spec.name,
            "--follow",
            EPOCHAL_URL=service.url,
            EPOCHAL_API_KEY=service.api_key,
        )
    job_id = out.splitlines()[0].strip()
    assert f"job {job_id} succeeded" in out and "2/2 epochs" in out, out
