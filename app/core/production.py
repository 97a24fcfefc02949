"""EPOCHAL_PRODUCTION: the server verbs refuse the embedded default and guessable passwords.

docker-compose.yml sets it and already refuses to start without POSTGRES_PASSWORD and
REDIS_PASSWORD; this is the second line, for a password set to a default anyway (or a service
started by other means with the flag set).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from app.core.config import Settings

# The passwords older compose files defaulted to, and the ones people type when told to set one.
KNOWN_DEFAULT_PASSWORDS = frozenset(
    {"epochal", "postgres", "redis", "password", "changeme", "secret", "admin", "root"}
)


def _password_problem(variable: str, password: str | None) -> str | None:
    if not password:
        return f"{variable} has no password"
    if password.lower() in KNOWN_DEFAULT_PASSWORDS:
        return f"the password in {variable} is a known default ({password!r})"
    return None


def _database_password(url: str) -> str | None:
    try:
        return make_url(url).password
    except ArgumentError:
        return None  # not a URL at all: the engine will say so; here it has no password


def production_problems(settings: Settings) -> list[str]:
    """Why these settings must not serve in production; empty when they may (or off)."""
    if not settings.production:
        return []
    problems: list[str | None] = []
    database, broker = settings.database_url, settings.broker_url
    if not database or database.startswith("sqlite"):
        problems.append("EPOCHAL_DATABASE_URL must name PostgreSQL (SQLite is for one machine)")
    else:
        problems.append(_password_problem("EPOCHAL_DATABASE_URL", _database_password(database)))
    if not broker or not broker.startswith(("redis://", "rediss://")):
        problems.append("EPOCHAL_BROKER_URL must name Redis (the filesystem broker is local)")
    else:
        problems.append(_password_problem("EPOCHAL_BROKER_URL", urlsplit(broker).password))
    return [p for p in problems if p]
