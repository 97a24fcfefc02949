"""Which store a URL names: its scheme picks the back-end module (imported only when used).

Adding a back-end is adding a module with a class that has `from_url(url, endpoint, quick=)`
(quick: one try with short timeouts, for a probe) and satisfies app.storage.base.Store, and
one line here.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse

from app.core.config import Settings, get_settings
from app.storage.base import Store

BACKENDS = {  # URL scheme -> "module:class"
    "file": "app.storage.directory:DirectoryStore",
    "s3": "app.storage.s3:S3Store",
}


def open_store(url: str, endpoint: str | None = None, *, quick: bool = False) -> Store:
    """The store `url` names (file:///path or s3://bucket/prefix); quick: for a probe."""
    scheme = urlparse(url).scheme
    if scheme not in BACKENDS:
        raise ValueError(f"no store for {scheme or 'a URL without a scheme'}: {sorted(BACKENDS)}")
    module, name = BACKENDS[scheme].split(":")
    store: Store = getattr(importlib.import_module(module), name).from_url(
        url, endpoint, quick=quick
    )
    return store


def store_for(settings: Settings) -> Store:
    """The store these settings name (EPOCHAL_STORE_URL, EPOCHAL_STORE_ENDPOINT)."""
    return open_store(settings.resolved_store_url, settings.store_endpoint)


def is_artifacts_dir(settings: Settings) -> bool:
    """Whether the store is the artifacts directory itself (the embedded default): its keys
    are then the very files a worker writes there, and nothing is copied into it."""
    parsed = urlparse(settings.resolved_store_url)
    if parsed.scheme != "file":
        return False
    return Path(unquote(parsed.path)).expanduser().resolve() == settings.resolved_artifacts_dir


@lru_cache
def get_store() -> Store:
    """The process's store (one client and its connection pool, shared by threads)."""
    return store_for(get_settings())
