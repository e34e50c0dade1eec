"""Test support: a peer's store as a killed process leaves it, for either store."""

from __future__ import annotations

from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.store import Store
from m2mc.middleware.store_api import PeerStore


def after_crash(store: PeerStore) -> PeerStore:
    """The store as the next start finds it when the process dies now: only what was committed.

    A SQLite store is abandoned without a commit (closing its connection drops the open
    transaction) and opened again from its file; a memory store drops its uncommitted writes."""
    if isinstance(store, MemoryStore):
        store.crash()
        return store
    assert isinstance(store, Store)
    store._checkpointer.stop()
    store._db.close()
    return Store(store.path)
