"""Where the service keeps bytes: one interface (base.Store), a directory or an S3 store behind
it (registry.open_store picks by URL), and checkpoints that are whole or absent on top."""

from app.storage.base import ObjectNotFound, Store, StoreError, StoreUnavailable
from app.storage.registry import get_store, open_store, store_for

__all__ = [
    "ObjectNotFound",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "get_store",
    "open_store",
    "store_for",
]
