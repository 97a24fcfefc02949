"""API keys: `ep_<id>_<secret>`; only a SHA-256 of the secret is stored; constant-time checks.

A request's key is checked against a short in-process cache of key rows (`KEYS`), so a request
pays no query for it: a revocation made in this process is seen at once, one made by another
process (`epochal keys revoke`, another API worker) within `KEY_CACHE_SECONDS`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, bindparam, select
from sqlalchemy.orm import Session

from app.domain.tables import ApiKey, utcnow

PREFIX = "ep"
# How long a key row read from the database is trusted: the delay before another process's
# revocation takes effect here.
KEY_CACHE_SECONDS = 1.0
KEY_CACHE_SIZE = 10_000


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Caller:
    """The live key behind a request: what routes need to know of it."""

    id: str
    is_admin: bool


@dataclass(frozen=True)
class KeyRow:
    """What checking a key needs of its row, and until when that may be trusted."""

    secret_hash: str
    is_admin: bool
    revoked: bool
    expires: float

    def check(self, key_id: str, secret: str) -> Caller | None:
        """The caller if the key is live and the secret is its own."""
        if self.revoked or not hmac.compare_digest(self.secret_hash, _digest(secret)):
            return None
        return Caller(key_id, self.is_admin)


class KeyCache:
    """Key rows by id for `seconds`; found keys only, so a new key works at once."""

    def __init__(self, seconds: float, size: int = KEY_CACHE_SIZE) -> None:
        self.seconds, self.size = seconds, size
        self._rows: dict[str, KeyRow] = {}

    def get(self, key_id: str) -> KeyRow | None:
        row = self._rows.get(key_id)
        return row if row is not None and row.expires > time.monotonic() else None

    def store(self, key_id: str, found: Sequence[Any] | None) -> KeyRow | None:
        """Remember the key's row as KEY_ROW read it (None: there is no such key)."""
        if found is None:  # gone since: its old row must not vouch for it
            self.forget(key_id)
            return None
        expires = time.monotonic() + self.seconds
        row = KeyRow(found[0], bool(found[1]), found[2] is not None, expires)
        if len(self._rows) >= self.size:  # junk ids are never stored, so this is rare
            self._rows.clear()
        self._rows[key_id] = row
        return row

    def known(self, key_id: str) -> bool:
        """Whether the key has a row here, live or out of date."""
        return key_id in self._rows

    def forget(self, key_id: str) -> None:
        self._rows.pop(key_id, None)

    def clear(self) -> None:
        self._rows.clear()


KEYS = KeyCache(KEY_CACHE_SECONDS)
# What checking a key reads of its row (parameter `key_id`).
KEY_ROW = select(ApiKey.secret_hash, ApiKey.is_admin, ApiKey.revoked_at).where(
    ApiKey.id == bindparam("key_id", type_=String)
)


def split(presented: str) -> tuple[str, str] | None:
    """(key id, secret) of something shaped like a key, else None: junk (a NUL) never reaches
    the database."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or len(parts[1]) != 12:
        return None
    if not all(c in string.hexdigits for c in parts[1]):
        return None
    return parts[1], parts[2]


def create_key(session: Session, name: str, is_admin: bool = False) -> tuple[ApiKey, str]:
    """Store a new key and return it with its plaintext, which is shown once and never stored."""
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    row = ApiKey(id=key_id, name=name, secret_hash=_digest(secret), is_admin=is_admin)
    session.add(row)
    session.flush()
    return row, f"{PREFIX}_{key_id}_{secret}"


def verify(session: Session, presented: str) -> ApiKey | None:
    """The live key this plaintext belongs to, or None (read from the database, not the cache)."""
    parts = split(presented)
    if parts is None:
        return None
    row = session.get(ApiKey, parts[0])
    if row is None or row.revoked_at is not None:
        return None
    return row if hmac.compare_digest(row.secret_hash, _digest(parts[1])) else None


def caller_of(session: Session, key_id: str) -> Caller:
    """The key as a caller, for work done on its behalf later (a sweep's trials)."""
    row = session.get(ApiKey, key_id)
    return Caller(key_id, bool(row is not None and row.is_admin))


def list_keys(session: Session) -> Sequence[ApiKey]:
    return session.scalars(select(ApiKey).order_by(ApiKey.created_at)).all()


def revoke(session: Session, key_id: str) -> bool:
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    KEYS.forget(key_id)
    return True


def set_share(
    session: Session,
    key_id: str,
    *,
    weight: float | None = None,
    max_priority: int | None = None,
    clear_cap: bool = False,
) -> ApiKey | None:
    """An admin's setting of a key's share weight or priority cap (None: no such key)."""
    row = session.get(ApiKey, key_id)
    if row is None:
        return None
    if weight is not None:
        row.share_weight = weight
    if max_priority is not None or clear_cap:
        row.max_priority = max_priority
    return row
