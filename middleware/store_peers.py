"""The peer cache in the store: where peers were last proven to be (reach), kept across restarts.

One row per pid, at most :data:`middleware.store_api.MAX_CACHED_PEERS`; who gives way past that cap
is the caller's to say (``keep``: see :meth:`middleware.store_api.PeerStore.cache_peer`).  The table
lives in the store's database and is written in the store's transactions (:class:`PeerCache`
shares :class:`middleware.store.Store`'s connection; the commit is the caller's).
"""

from __future__ import annotations

import sqlite3
from typing import Callable

from .addresses import Endpoint
from .store_api import MAX_CACHED_PEERS

# Made on first use, like read_marks: a database without it has an empty cache.
PEER_CACHE_SCHEMA = ("CREATE TABLE IF NOT EXISTS peer_cache (pid TEXT PRIMARY KEY, host TEXT NOT NULL, "
                     "port INTEGER NOT NULL, seen REAL NOT NULL)")


class PeerCache:
    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self._ready = False

    def _table(self) -> None:
        if not self._ready:
            self._db.execute(PEER_CACHE_SCHEMA)
            self._ready = True

    def cached(self) -> list[tuple[str, Endpoint, float]]:
        """(pid, endpoint, when it was proven) of the cached peers, the latest proven first."""
        self._table()
        rows = self._db.execute("SELECT pid, host, port, seen FROM peer_cache ORDER BY seen DESC LIMIT ?",
                                (MAX_CACHED_PEERS,)).fetchall()
        return [(pid, Endpoint(host, port), seen) for pid, host, port, seen in rows]

    def cache(self, pid: str, endpoint: Endpoint, wall: float, keep: Callable[[str], bool] | None = None) -> None:
        """Keep ``pid``'s proven endpoint (commit is the caller's); past the cap a stranger's
        oldest row gives way first (``keep``: see PeerStore.cache_peer)."""
        self._table()
        self._db.execute("INSERT OR REPLACE INTO peer_cache (pid, host, port, seen) VALUES (?, ?, ?, ?)",
                         (pid, endpoint.host, endpoint.port, wall))
        rows = self._db.execute("SELECT pid FROM peer_cache ORDER BY seen").fetchall()
        excess = len(rows) - MAX_CACHED_PEERS
        if excess > 0:
            kept = keep or (lambda _pid: False)
            oldest_first = [row[0] for row in rows]
            victims = ([p for p in oldest_first if not kept(p)] + [p for p in oldest_first if kept(p)])[:excess]
            self._db.executemany("DELETE FROM peer_cache WHERE pid = ?", [(p,) for p in victims])
