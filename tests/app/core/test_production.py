"""EPOCHAL_PRODUCTION: `epochal api`, `worker` and `migrate` refuse the embedded default and
guessable passwords, and start on strong ones (real processes, real PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from sqlalchemy.engine import make_url

from app.core.config import Settings
from app.core.production import production_problems
from tests.helpers import ROOT, scaled

STRONG_DB = "postgresql+psycopg://epochal:9c2f51a7e0b34d@db:5432/epochal"
STRONG_BROKER = "redis://:4be61f0c93d2a8@redis:6379/0"


def problems(database: str | None, broker: str | None, production: bool = True) -> list[str]:
    return production_problems(
        Settings(production=production, database_url=database, broker_url=broker)
    )


def test_strong_passwords_pass_and_the_flag_off_checks_nothing() -> None:
    assert problems(STRONG_DB, STRONG_BROKER) == []
    assert problems(None, None, production=False) == []  # the embedded default, as `make run`


@pytest.mark.parametrize(
    ("database", "broker", "expected"),
    [
        (
            "postgresql+psycopg://epochal:epochal@postgres:5432/epochal",
            STRONG_BROKER,
            ["the password in EPOCHAL_DATABASE_URL is a known default ('epochal')"],
        ),
        (STRONG_DB, "redis://:Password@redis:6379/0", [
            "the password in EPOCHAL_BROKER_URL is a known default ('Password')"
        ]),
        ("postgresql+psycopg://epochal@postgres/epochal", "redis://redis:6379/0", [
            "EPOCHAL_DATABASE_URL has no password",
            "EPOCHAL_BROKER_URL has no password",
        ]),
        (None, None, [
            "EPOCHAL_DATABASE_URL must name PostgreSQL (SQLite is for one machine)",
            "EPOCHAL_BROKER_URL must name Redis (the filesystem broker is local)",
        ]),
        ("sqlite:////data/epochal.db", "filesystem://", [
            "EPOCHAL_DATABASE_URL must name PostgreSQL (SQLite is for one machine)",
            "EPOCHAL_BROKER_URL must name Redis (the filesystem broker is local)",
        ]),
    ],
)  # fmt: skip
def test_each_unsafe_setting_is_named(
    database: str | None, broker: str | None, expected: list[str]
) -> None:
    assert problems(database, broker) == expected


def run_cli(verb: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHAL_")}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", verb],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )


@pytest.mark.e2e
@pytest.mark.parametrize("verb", ["api", "worker", "migrate"])
def test_the_server_verbs_refuse_a_default_password(verb: str, tmp_path: os.PathLike[str]) -> None:
    env = {
        "EPOCHAL_HOME": str(tmp_path),
        "EPOCHAL_PRODUCTION": "true",
        "EPOCHAL_DATABASE_URL": "postgresql+psycopg://epochal:epochal@127.0.0.1:5432/epochal",
        "EPOCHAL_BROKER_URL": STRONG_BROKER,
    }
    out = run_cli(verb, env)
    assert out.returncode == 2, out.stderr
    assert "refusing to start (EPOCHAL_PRODUCTION is set): the password in " in out.stderr
    assert "EPOCHAL_DATABASE_URL is a known default" in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""  # stopped before serving


@pytest.mark.e2e
def test_migrate_runs_with_the_flag_and_strong_passwords(
    pg_database: str, redis_url: str, tmp_path: os.PathLike[str]
) -> None:
    """The local PostgreSQL trusts loopback, so any password connects: the check alone decides."""
    database = make_url(pg_database).set(password="9c2f51a7e0b34d")
    broker = redis_url.replace("redis://", "redis://:4be61f0c93d2a8@", 1)
    env = {
        "EPOCHAL_HOME": str(tmp_path),
        "EPOCHAL_PRODUCTION": "1",
        "EPOCHAL_DATABASE_URL": database.render_as_string(hide_password=False),
        "EPOCHAL_BROKER_URL": broker,
    }
    out = run_cli("migrate", env)
    assert out.returncode == 0, out.stderr
    assert "database at head" in out.stdout and "9c2f51a7e0b34d" not in out.stdout
