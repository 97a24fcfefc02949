"""API keys: `ep_<id>_<secret>`; only a SHA-256 of the secret is stored; constant-time checks."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import string
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.tables import ApiKey, utcnow

PREFIX = "ep"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(session: Session, name: str, is_admin: bool = False) -> tuple[ApiKey, str]:
    """Store a new key and return it with its plaintext, which is shown once and never stored."""
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    row = ApiKey(id=key_id, name=name, secret_hash=_digest(secret), is_admin=is_admin)
    session.add(row)
    session.flush()
    return row, f"{PREFIX}_{key_id}_{secret}"


def verify(session: Session, presented: str) -> ApiKey | None:
    """The live key this plaintext belongs to, or None."""
    parts = presented.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or len(parts[1]) != 12:
        return None
    if not all(c in string.hexdigits for c in parts[1]):  # never send junk (NUL) to the DB
        return None
    row = session.get(ApiKey, parts[1])
    if row is None or row.revoked_at is not None:
        return None
    return row if hmac.compare_digest(row.secret_hash, _digest(parts[2])) else None


def list_keys(session: Session) -> Sequence[ApiKey]:
    return session.scalars(select(ApiKey).order_by(ApiKey.created_at)).all()


def revoke(session: Session, key_id: str) -> bool:
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    return True
