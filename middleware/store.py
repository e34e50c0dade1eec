"""The peer's persistent state in SQLite: identity, groups, members, seqnos and messages.

One database file per data dir, in WAL mode with ``synchronous=NORMAL``: a
committed transaction survives the process being killed at any moment (only a
power cut can lose the last commits before a checkpoint, which a background
thread runs every two seconds).  Callers batch their
writes and call :meth:`Store.commit` before they announce or transmit anything
that depends on them, so nothing that was sent or shown is ever forgotten.

The identity is an Ed25519 key pair made at first start (:mod:`middleware.crypto`);
messages are kept with their writers' signatures so that any member can relay them.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Iterable

from . import wire
from .crypto import Identity
from .gjlp import GroupRecord
from .types import ChatMessage, Mid

# Version 1: messages are kept in delivery order (the rowid), so storing one appends to
# the table and to one index (by mid); a sender's public key is kept once, in peer_keys,
# since its pid is that key's fingerprint.  Version 0 stored the key in every row and
# kept a second index: half again as much work per stored message.
SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS identity (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS groups (
    gid TEXT PRIMARY KEY, desc TEXT NOT NULL, addr TEXT NOT NULL, port INTEGER NOT NULL,
    private INTEGER NOT NULL, next_seqno INTEGER NOT NULL DEFAULT 1,
    salt BLOB NOT NULL DEFAULT x'', key_check BLOB NOT NULL DEFAULT x'', group_key BLOB
);
CREATE TABLE IF NOT EXISTS members (
    gid TEXT NOT NULL, pid TEXT NOT NULL, name TEXT NOT NULL, epoch INTEGER NOT NULL,
    state TEXT NOT NULL, PRIMARY KEY (gid, pid)
);
CREATE TABLE IF NOT EXISTS peer_keys (pid TEXT PRIMARY KEY, public_key BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    delivery_order INTEGER PRIMARY KEY,
    gid TEXT NOT NULL, sender TEXT NOT NULL, seqno INTEGER NOT NULL,
    parent_sender TEXT, parent_seqno INTEGER, sender_name TEXT NOT NULL, text TEXT NOT NULL,
    sent_at INTEGER NOT NULL, received_at INTEGER NOT NULL, sig BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS messages_by_mid ON messages (gid, sender, seqno);
"""


class _Checkpointer:
    """Checkpoints the WAL every few seconds from a daemon thread with its own connection."""

    INTERVAL = 2.0

    def __init__(self, path: Path) -> None:
        self._path = path
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="m2mc-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        db = sqlite3.connect(self._path, check_same_thread=False)
        try:
            while not self._stop.wait(self.INTERVAL):
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass  # busy or closing: the next round (or close) does it
        finally:
            db.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._db = sqlite3.connect(self.path, isolation_level="DEFERRED")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Checkpoints copy the WAL into the database and fsync it: tens of milliseconds.
        # They run on a thread of their own (SQLite allows it in WAL mode), not in a commit
        # on the event loop, so they never stall delivery.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpointer = _Checkpointer(self.path)
        self._migrate()
        self._db.executescript(SCHEMA)
        self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._db.commit()
        row = self._db.execute("SELECT MAX(delivery_order) FROM messages").fetchone()
        self._next_order = (row[0] or 0) + 1
        self._keys_stored: set[str] = set()

    def _migrate(self) -> None:
        """Bring a version-0 database (public key in every message row) to the current schema."""
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(messages)")}
        if "public_key" not in columns:
            return
        self._db.executescript(
            "BEGIN;"
            "ALTER TABLE messages RENAME TO messages_v0;"
            "DROP INDEX IF EXISTS messages_by_order;"
            + SCHEMA
            + "INSERT OR IGNORE INTO peer_keys SELECT sender, public_key FROM messages_v0 WHERE length(public_key) > 0;"
            "INSERT INTO messages SELECT delivery_order, gid, sender, seqno, parent_sender, parent_seqno, "
            "  sender_name, text, sent_at, received_at, sig FROM messages_v0;"
            "DROP TABLE messages_v0;"
            "COMMIT;"
        )

    def close(self) -> None:
        self._db.commit()
        self._checkpointer.stop()
        self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.close()

    def commit(self) -> None:
        self._db.commit()

    # -- identity ---------------------------------------------------------------

    def _get(self, key: str) -> bytes | None:
        row = self._db.execute("SELECT value FROM identity WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def _put(self, key: str, value: bytes) -> None:
        self._db.execute("INSERT OR REPLACE INTO identity (key, value) VALUES (?, ?)", (key, value))

    def identity(self) -> Identity:
        """This peer's signing key (and so its pid), made and kept on first use."""
        raw = self._get("ed25519")
        if raw is None:
            raw = Identity.generate().private_bytes()
            self._put("ed25519", raw)
            self.commit()
        return Identity.from_bytes(raw)

    def name(self) -> str | None:
        raw = self._get("name")
        return raw.decode() if raw is not None else None

    def set_name(self, name: str) -> None:
        self._put("name", name.encode())
        self.commit()

    def next_counter(self, key: str) -> int:
        """A persistent counter (e.g. for gids): returns 1, 2, 3, … across restarts."""
        raw = self._get(key)
        value = int(raw.decode()) + 1 if raw else 1
        self._put(key, str(value).encode())
        return value

    # -- groups -----------------------------------------------------------------

    def save_group(self, record: GroupRecord) -> None:
        self._db.execute(
            "INSERT INTO groups (gid, desc, addr, port, private, salt, key_check) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (gid) DO UPDATE SET desc = excluded.desc",
            (record.gid, record.desc, record.addr, record.port, int(record.private), record.salt, record.key_check),
        )
        self._db.executemany(
            "INSERT OR REPLACE INTO members (gid, pid, name, epoch, state) VALUES (?, ?, ?, ?, ?)",
            [(record.gid, pid, name, epoch, state) for pid, (name, epoch, state) in record.members.items()],
        )

    def load_groups(self) -> list[tuple[GroupRecord, int]]:
        """Every stored group with its members, and this peer's next seqno in it."""
        result = []
        for gid, desc, addr, port, private, next_seqno, salt, check in self._db.execute(
            "SELECT gid, desc, addr, port, private, next_seqno, salt, key_check FROM groups"
        ):
            record = GroupRecord(gid, desc, addr, port, bool(private), sources={"local"}, salt=salt, key_check=check)
            for pid, name, epoch, state in self._db.execute(
                "SELECT pid, name, epoch, state FROM members WHERE gid = ?", (gid,)
            ):
                record.members[pid] = (name, epoch, state)
            result.append((record, next_seqno))
        return result

    def group_key(self, gid: str) -> bytes | None:
        """A private group's key, kept after the passphrase was accepted (the data dir is 0700)."""
        row = self._db.execute("SELECT group_key FROM groups WHERE gid = ?", (gid,)).fetchone()
        return row[0] if row else None

    def set_group_key(self, gid: str, key: bytes) -> None:
        self._db.execute("UPDATE groups SET group_key = ? WHERE gid = ?", (key, gid))

    def set_next_seqno(self, gid: str, next_seqno: int) -> None:
        self._db.execute("UPDATE groups SET next_seqno = ? WHERE gid = ?", (next_seqno, gid))

    # -- messages ---------------------------------------------------------------

    def add_messages(self, messages: Iterable[ChatMessage]) -> list[ChatMessage]:
        """Store delivered messages in delivery order; returns them with ``order`` set."""
        stored = []
        rows = []
        new_keys = {}
        for gid, mid, parent, name, text, sent_at, received_at, _, signature, public_key in messages:
            order = self._next_order
            self._next_order += 1
            sender, seqno = mid
            parent_sender, parent_seqno = parent or (None, None)
            rows.append((order, gid, sender, seqno, parent_sender, parent_seqno, name, text, sent_at, received_at,
                         signature))
            stored.append(ChatMessage(gid, mid, parent, name, text, sent_at, received_at, order, signature, public_key))
            if sender not in self._keys_stored and public_key:
                new_keys[sender] = public_key
        if new_keys:
            self._db.executemany("INSERT OR IGNORE INTO peer_keys VALUES (?, ?)", new_keys.items())
            self._keys_stored.update(new_keys)
        self._db.executemany("INSERT OR IGNORE INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        return stored

    def history(self, gid: str | None = None) -> list[ChatMessage]:
        """Delivered messages (of one group, or all) in this peer's delivery order."""
        query = (
            "SELECT gid, sender, seqno, parent_sender, parent_seqno, sender_name, text, sent_at, "
            "received_at, delivery_order, sig, public_key FROM messages LEFT JOIN peer_keys ON pid = sender"
        )
        if gid is None:
            cursor = self._db.execute(query + " ORDER BY delivery_order")
        else:
            cursor = self._db.execute(query + " WHERE gid = ? ORDER BY delivery_order", (gid,))
        return [
            ChatMessage(g, (s, q), (ps, pq) if ps is not None else None, n, t, sa, ra, o, sig, key or b"")
            for g, s, q, ps, pq, n, t, sa, ra, o, sig, key in cursor
        ]

    def fetch(self, gid: str, mids: list[Mid]) -> list[wire.StoredMessage]:
        """The stored messages among ``mids``, in delivery order (for repairs and sync)."""
        by_sender: dict[str, list[int]] = {}
        for sender, seqno in mids:
            by_sender.setdefault(sender, []).append(seqno)
        rows = []
        for sender, seqnos in by_sender.items():
            for start in range(0, len(seqnos), 500):
                part = seqnos[start : start + 500]
                rows += self._db.execute(
                    "SELECT delivery_order, sender, seqno, parent_sender, parent_seqno, sent_at, sender_name, text, "
                    "ifnull(public_key, x''), sig FROM messages LEFT JOIN peer_keys ON pid = sender "
                    f"WHERE gid = ? AND sender = ? AND seqno IN ({','.join('?' * len(part))})",
                    [gid, sender, *part],
                ).fetchall()
        rows.sort()
        return [
            wire.StoredMessage(s, q, (ps, pq) if ps is not None else None, at, n, t, pk, sig)
            for _, s, q, ps, pq, at, n, t, pk, sig in rows
        ]

    def delivered_mids(self, gid: str) -> list[Mid]:
        return [(s, q) for s, q in self._db.execute(
            "SELECT sender, seqno FROM messages WHERE gid = ? ORDER BY delivery_order", (gid,)
        )]

    def group_desc(self, gid: str) -> str:
        row = self._db.execute("SELECT desc FROM groups WHERE gid = ?", (gid,)).fetchone()
        return row[0] if row else ""
