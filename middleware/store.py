"""The peer's persistent state in SQLite: identity, groups, members, seqnos and messages.

One database file per data dir, in WAL mode with ``synchronous=NORMAL``: a
committed transaction survives the process being killed at any moment (only a
power cut can lose the last commits before a checkpoint, which a background
thread runs every two seconds; a commit that leaves the WAL over :data:`WAL_LIMIT`
truncates it).  Callers batch their
writes and call :meth:`Store.commit` before they announce or transmit anything
that depends on them, so nothing that was sent or shown is ever forgotten (but
what a bound drops on purpose: :data:`middleware.direct.MAX_UNREAD_TOTAL`).

The identity is an Ed25519 key pair made at first start (:mod:`middleware.crypto`);
messages are kept with their writers' signatures so that any member can relay them.

:class:`Store` keeps the messages (in segments: :mod:`middleware.store_segments`), their threads,
mentions and kinds, equivocations, read marks, identity and groups, and composes the parts that
share its connection and its transactions, each in a module of its own: the schema and its
migrations (:mod:`middleware.store_schema`), the search index (``search_index``:
:mod:`middleware.store_search`), direct messages (``direct``: :mod:`middleware.store_direct`)
and the peer cache (``peer_cache``: :mod:`middleware.store_peers`).  Every call of
:class:`middleware.store_api.PeerStore` is on :class:`Store`, which hands a part's on to it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from bisect import bisect_right
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterable, Iterator

import msgpack

from . import kinds, wire
from .addresses import Endpoint
from .crypto import Identity
from .gjlp import GroupRecord
from .mentions import mentioned_pids
from .rangeset import RangeSet
from .direct import StoredDirect
from .store_api import (MAX_READ_RANGES, SearchHit, StoredThread, in_branch, merged_read_marks,
                        searched_text)
from .store_direct import DirectMessages
from .store_peers import PeerCache
from .store_schema import new_table, upgrade
from .roles import Cuts
from .store_search import SearchIndex, cuts_argument
from .store_segments import (SEGMENT_MESSAGES, decode_segment, pack_segment, read_segments, segment_rows_at,
                             write_segment)
from .types import ChatMessage, Mid

log = logging.getLogger(__name__)

# Threads: a row per thread (its root's delivery order, its reply count and its latest message's
# order), found by activity, and a row per reply naming its root, found by root, so a thread is
# read by one index range instead of a walk of the whole history.  Operations are in neither.
# A reply's root is known once its parent is stored, which S_b order makes before it.  They are
# not written with the message: delivery would pay 4-5 µs a message for them (about 60 % more CPU
# than storing costs without them, app/bench figures in benchmarks.md).  Each thread query first
# brings them up to the last stored message from threads_upto (:meth:`Store.catch_up_threads`),
# in the caller's transaction, so its answer is exact; a headless peer that is never asked pays
# nothing, and the app pays once per burst it shows (about 4 µs a message, in batches).  A data dir
# from before them catches up from 0 on open.
THREADS_SCHEMA = """
CREATE TABLE threads (root INTEGER PRIMARY KEY, gid TEXT NOT NULL, replies INTEGER NOT NULL, last INTEGER NOT NULL);
CREATE INDEX threads_by_activity ON threads (gid, last);
CREATE TABLE thread_replies (delivery_order INTEGER PRIMARY KEY, root INTEGER NOT NULL);
CREATE INDEX thread_replies_by_root ON thread_replies (root, delivery_order);
CREATE TABLE threads_upto (only INTEGER PRIMARY KEY CHECK (only = 0), upto INTEGER NOT NULL);
INSERT INTO threads_upto VALUES (0, 0);
"""
FEW_ORDERS = 200
"""Up to this many messages are found a segment each by the order index; more, by one range of the group's segments."""
CATCH_UP_BATCH = 20_000
"""Threads rows a catch-up holds before it writes them."""
MAX_BRANCH_MOVES = 64
"""Kept versions of a sender's messages whose answers are found by reading their thread (Store._rethread)."""
THREAD_ROOTS_CACHED = 100_000
"""Roots of recently stored messages kept in memory: a reply to one finds its root without a query."""
WAL_LIMIT = 32 * 2**20
"""Bytes of WAL past which a commit truncates it.  The checkpointer's PASSIVE checkpoints never wait
for the writer, so under writes that never pause they never copy the whole WAL, SQLite never starts
the WAL over, and the file grows for as long as they last (810 MB in 8 s of a direct-message flood's
commits).  A TRUNCATE checkpoint copies everything and empties the file; it needs the writer's lock,
which a thread waiting for it in SQLite's busy handler does not get from a writer that never pauses
(the WAL still reached 138 MB so), so the writer runs it itself, after the commit that passed the
limit.  That commit takes longer, as it copies what the checkpointer has not: 0.17-0.41 s at
32 MB, 0.07-0.21 s at 8 MB (four times as often), under writes of 25 MB a second on the build
machine, loaded.  The WAL stays within WAL_LIMIT and one commit."""


class _Checkpointer:
    """Checkpoints the WAL every few seconds from a daemon thread with its own connection, and
    sooner when a quarter of :data:`WAL_LIMIT` was written since the last time: so when a commit
    truncates the WAL, most of it has been copied already, and that commit is short."""

    INTERVAL = 2.0
    LOOK = 0.25  # s between two looks at the WAL's size

    def __init__(self, path: Path) -> None:
        self._path = path
        self._wal = path.with_name(path.name + "-wal")
        self._stop = threading.Event()
        # Held through each checkpoint, the writer's TRUNCATE included: SQLite runs one checkpoint
        # at a time and answers a second with "busy" at once, so without it a commit that comes
        # during a slow PASSIVE one (a loaded machine) leaves the WAL over the limit, commit after commit.
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="m2mc-checkpoint", daemon=True)
        self._thread.start()

    def _wal_bytes(self) -> int:
        try:
            return self._wal.stat().st_size
        except OSError:
            return 0

    def _run(self) -> None:
        db = sqlite3.connect(self._path, check_same_thread=False)
        last_size, waited = 0, 0.0
        try:
            while not self._stop.wait(self.LOOK):
                waited += self.LOOK
                size = self._wal_bytes()
                if waited < self.INTERVAL and not size - last_size >= WAL_LIMIT / 4:
                    continue
                try:
                    with self.lock:
                        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass  # busy or closing: the next round (or close) does it
                last_size, waited = self._wal_bytes(), 0.0
        finally:
            db.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class _NoCheckpoints:
    """An in-memory database's stand-in for :class:`_Checkpointer`: no WAL, nothing to copy."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def _wal_bytes(self) -> int:
        return 0

    def stop(self) -> None:
        pass


def _stored_message(blob: bytes) -> wire.StoredMessage:
    sender, seqno, parent, sent_at, name, text, public_key, sig = msgpack.unpackb(blob, raw=False)
    return wire.StoredMessage(sender, seqno, tuple(parent) if parent else None, sent_at, name, text, public_key, sig)


def _mention_rows(gid: str, sender: str, seqno: int, text: str, order: int) -> list[tuple]:
    """The mentions table's rows for one message (none for an operation: its text is not shown as is)."""
    if not kinds.listed(text):
        return []
    return [(pid, order, gid, sender, seqno) for pid in mentioned_pids(text)]


class Store:
    DECODED_SEGMENTS = 16

    # The path that keeps the database in memory (SQLite's own name): for tests and the GUI's
    # in-memory LAN (middleware.memory_lan); it has no WAL and no file, so no checkpointing thread.
    IN_MEMORY = ":memory:"

    def __init__(self, path: Path | str, identity: Identity | None = None) -> None:
        """``identity``: this peer's key when the database has none yet (else one is made on first use)."""
        in_memory = str(path) == self.IN_MEMORY
        self.path = Path(path)
        if not in_memory:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._db = sqlite3.connect(self.path, isolation_level="DEFERRED")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Checkpoints copy the WAL into the database and fsync it: tens of milliseconds.
        # They run on a thread of their own (SQLite allows it in WAL mode), not in a commit
        # on the event loop, so they never stall delivery.
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpointer = _NoCheckpoints() if in_memory else _Checkpointer(self.path)
        self.wal_truncations = 0  # TRUNCATE checkpoints that emptied the WAL (WAL_LIMIT)
        self._packer = msgpack.Packer(use_bin_type=True)
        # Whether stored messages go into the search index: always once open (migrations write
        # segments before the index exists, and it is built after them).  Benchmarks switch it off
        # to measure what the index costs; what is stored meanwhile is never found.
        self.indexing = False
        self._decoded: OrderedDict[int, list] = OrderedDict()  # segment -> rows, most recent last
        self.search_index = SearchIndex(self._db, self._decoded)
        self.direct = DirectMessages(self._db, self.search_index.snippets, self.identity)
        self.peer_cache = PeerCache(self._db)
        version = upgrade(self._db, self._packer)  # (middleware.store_schema)
        self._mentions_table()
        self._kinds_table()
        if identity is not None and self._get("ed25519") is None:
            self._put("ed25519", identity.private_bytes())
        self._db.commit()
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not self.search_index.present(tables):
            self.search_index.build(self.path)  # no index, or one that kept a copy of the text
        elif version < 4:
            self.search_index.reindex_offers()
        if not self.direct.search_index_present(tables):
            self.direct.build_search_index()
        self.search_index.open_merging()
        self._db.commit()
        self.search_index.written = False
        self.indexing = True
        row = self._db.execute("SELECT MAX(first_order + count) FROM segments").fetchone()
        self._next_order = row[0] or 1
        self._keys_stored: set[str] = set()
        # Per (gid, sender), the seqnos stored: a message delivered twice is kept once.
        self._stored: dict[tuple[str, str], RangeSet] = {}
        self._roots: dict[tuple[str, Mid], int] = {}  # (gid, mid) -> its thread root's order, recent ones
        self._branch_moves: dict[str, int] = {}  # sender -> threads read for its kept versions (_rethread)
        if not {"threads", "thread_replies", "threads_upto"} <= tables:
            self._build_threads()
        self._learn_kinds()

    def _build_threads(self) -> None:
        """The threads tables for a data dir from before them, filled from every stored message."""
        self._db.execute("BEGIN")
        for table in ("threads", "thread_replies", "threads_upto"):
            self._db.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in THREADS_SCHEMA.split(";")[:-1]:
            if "INDEX" not in statement:  # made after the rows, in one sorted pass
                self._db.execute(statement)
        self.catch_up_threads(log_progress=True)
        for statement in THREADS_SCHEMA.split(";")[:-1]:
            if "INDEX" in statement:
                self._db.execute(statement)
        self._db.commit()

    def catch_up_threads(self, log_progress: bool = False) -> None:
        """Bring the threads tables up to the last stored message (see THREADS_SCHEMA); every thread
        query does it first, and an idle peer may do it beforehand.  The commit is the caller's."""
        (upto,) = self._db.execute("SELECT upto FROM threads_upto").fetchone()
        if upto >= self._next_order - 1:
            return
        roots: dict[tuple[str, Mid], int] = {}  # those met lately in this catch-up (the rest: _root_order)
        threads: dict[int, list] = {}  # root -> [gid, replies, last], for threads new here
        bumped: dict[int, list[int]] = {}  # root -> [replies, last], for threads stored before
        replies: list[tuple[int, int]] = []
        written = [0, 0]  # threads and replies written, for the log

        def write() -> None:  # a batch: a big store's first catch-up never holds its whole history
            self._db.executemany("INSERT INTO threads VALUES (?, ?, ?, ?)",
                                 [(root, gid, count, end) for root, (gid, count, end) in threads.items()])
            self._db.executemany("INSERT INTO thread_replies VALUES (?, ?)", replies)
            self._db.executemany("UPDATE threads SET replies = replies + ?, last = ? WHERE root = ?",
                                 [(count, end, root) for root, (count, end) in bumped.items()])
            written[0] += len(threads)
            written[1] += len(replies)
            threads.clear()
            bumped.clear()
            replies.clear()
            if len(roots) > THREAD_ROOTS_CACHED:  # what is written is found by _root_order
                roots.clear()

        newest = upto
        for _, gid, first_order, rows in self._segments(  # a rowid range from the order index, not a scan
                "segment >= COALESCE((SELECT segment FROM segments WHERE first_order <= ? "
                "ORDER BY first_order DESC LIMIT 1), 0)", (upto + 1,)):
            for order, row in enumerate(rows, first_order):
                if order <= upto or not kinds.listed(row[5]):
                    continue
                parent = (row[2], row[3]) if row[2] is not None else None
                root = None
                if parent is not None:
                    root = roots.get((gid, parent))
                    if root is None:
                        root = self._root_order(gid, parent, before=order)
                if root is None:  # a root, or (never in S_b order) a reply whose parent is not stored before it
                    threads[order] = [gid, 0, order]
                    root = order
                else:
                    replies.append((order, root))
                    thread = threads.get(root) or bumped.setdefault(root, [0, order])
                    thread[-2] += 1
                    thread[-1] = order
                roots[(gid, (row[0], row[1]))] = root
            newest = max(newest, first_order + len(rows) - 1)
            if len(replies) + len(threads) >= CATCH_UP_BATCH:
                write()
        write()
        self._db.execute("UPDATE threads_upto SET upto = ?", (newest,))
        if len(roots) < THREAD_ROOTS_CACHED:  # the latest ones, for the next catch-up's replies
            if len(self._roots) + len(roots) > THREAD_ROOTS_CACHED:
                self._roots.clear()
            self._roots.update(roots)
        if log_progress and any(written):
            log.info("threads of %s built: %d threads, %d replies", self.path, *written)

    def close(self) -> None:
        self._checkpointer.stop()
        self.search_index.close()
        try:
            self._db.commit()
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error:  # a full disk: what was committed is in the WAL, which the next open reads
            self._db.rollback()
        self._db.close()

    def commit(self) -> None:
        self.search_index.before_commit()
        self._db.commit()
        self.search_index.written = False
        if self._checkpointer._wal_bytes() > WAL_LIMIT:
            try:
                with self._checkpointer.lock:  # after the PASSIVE one under way, which leaves little to copy
                    busy, _, _ = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                self.wal_truncations += not busy
            except sqlite3.Error as exc:  # committed all the same: the next commit tries again
                log.warning("the WAL (over %d MB) could not be truncated: %s", WAL_LIMIT // 2**20, exc)

    def rollback(self) -> None:
        """Drop the writes since the last commit (one that failed: a full disk, an I/O error),
        and what this object remembered of them, so the same writes can be tried again."""
        self._db.rollback()
        self.search_index.forget()
        self._stored.clear()  # re-read from segment_runs on first use
        self._keys_stored.clear()
        self._decoded.clear()
        self._roots.clear()
        row = self._db.execute("SELECT MAX(first_order + count) FROM segments").fetchone()
        self._next_order = row[0] or 1

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
        """A verified group's row (its descriptor never changes, so a second save keeps the first)."""
        descriptor = record.descriptor
        if descriptor is None:
            return  # legacy or unverified: nothing new to keep
        self._db.execute(
            "INSERT INTO groups (gid, desc, addr, port, private, salt, key_check, descriptor) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (gid) DO NOTHING",
            (record.gid, record.desc, record.addr, record.port, int(record.private), descriptor.salt,
             descriptor.key_check, self._packer.pack(wire._to_wire(descriptor))),
        )

    def save_members(self, gid: str, records: Iterable[wire.MemberRecord]) -> None:
        """Members' own signed records: one row each, replacing that member's previous one."""
        self._db.executemany(
            "INSERT OR REPLACE INTO member_records (gid, pid, record) VALUES (?, ?, ?)",
            [(gid, record.pid, self._packer.pack(wire._to_wire(record))) for record in records],
        )

    def member_rows(self, gid: str) -> int:
        return self._db.execute("SELECT COUNT(*) FROM member_records WHERE gid = ?", (gid,)).fetchone()[0]

    def load_groups(self) -> list[tuple[GroupRecord, int]]:
        """Every stored group with its members, and this peer's next seqno in it.

        Descriptors and member records are verified again on the way in: a record that
        does not check out (a damaged or edited file) is left out, and a group whose
        descriptor does not is loaded as legacy (readable, never joined)."""
        result = []
        for gid, desc, addr, port, private, next_seqno, blob in self._db.execute(
            "SELECT gid, desc, addr, port, private, next_seqno, descriptor FROM groups"
        ).fetchall():
            descriptor = None
            if blob is not None:
                try:
                    descriptor = wire._descriptor(msgpack.unpackb(blob, raw=False), "descriptor")
                except (wire.WireError, ValueError):
                    descriptor = None
                if descriptor is not None and (descriptor.gid != gid or not wire.verify_descriptor(descriptor)):
                    descriptor = None
            if descriptor is not None:
                record = GroupRecord.from_descriptor(gid, descriptor)
                for (raw,) in self._db.execute("SELECT record FROM member_records WHERE gid = ?", (gid,)):
                    try:
                        member = wire._member_record(msgpack.unpackb(raw, raw=False), "member")
                    except (wire.WireError, ValueError):
                        continue
                    if member.gid == gid and wire.verify_member(member):
                        record.members[member.pid] = member
            else:
                record = GroupRecord(gid, desc, addr, port, bool(private), legacy=True)
                for pid, name, epoch, state in self._db.execute(
                    "SELECT pid, name, epoch, state FROM members WHERE gid = ?", (gid,)
                ):
                    record.members[pid] = wire.MemberRecord(gid, b"", name, epoch, state == "current", b"", b"", pid)
            record.sources = {"local"}
            result.append((record, next_seqno))
        return result

    def group_key(self, gid: str) -> bytes | None:
        """A private group's key, kept after the passphrase was accepted (the data dir is 0700)."""
        row = self._db.execute("SELECT group_key FROM groups WHERE gid = ?", (gid,)).fetchone()
        return row[0] if row else None

    def set_group_key(self, gid: str, key: bytes) -> None:
        self._db.execute("UPDATE groups SET group_key = ? WHERE gid = ?", (key, gid))

    def next_seqno(self, gid: str) -> int:
        row = self._db.execute("SELECT next_seqno FROM groups WHERE gid = ?", (gid,)).fetchone()
        return row[0] if row else 1

    def set_next_seqno(self, gid: str, next_seqno: int) -> None:
        self._db.execute("UPDATE groups SET next_seqno = ? WHERE gid = ?", (next_seqno, gid))

    # -- messages ---------------------------------------------------------------

    def _stored_seqnos(self, gid: str, sender: str) -> RangeSet:
        """The seqnos of ``sender`` stored in ``gid``, read from the runs on first use."""
        seen = self._stored.get((gid, sender))
        if seen is None:
            seen = self._stored[(gid, sender)] = RangeSet.from_ranges(self._db.execute(
                "SELECT first, last FROM segment_runs WHERE gid = ? AND sender = ?", (gid, sender)))
        return seen

    def add_messages(self, messages: Iterable[ChatMessage]) -> list[ChatMessage]:
        """Store delivered messages in delivery order; returns them with ``order`` set.

        A message already stored (same gid and mid) is left out of both.
        """
        stored: list[ChatMessage] = []
        rows: list[tuple] = []
        proofs: list[bytes] = []
        new_keys = {}
        segment_gid = None
        mentions: list[tuple] = []
        kinded: list[tuple[str, str, int]] = []
        for gid, mid, parent, name, text, sent_at, received_at, _, signature, public_key, *_ in messages:
            sender, seqno = mid
            if not self._stored_seqnos(gid, sender).add(seqno):
                continue
            if gid != segment_gid or len(rows) == SEGMENT_MESSAGES:
                if rows:
                    self._write_segment(segment_gid, self._next_order - len(rows), rows, proofs)
                segment_gid, rows, proofs = gid, [], []
            parent_sender, parent_seqno = parent or (None, None)
            rows.append((sender, seqno, parent_sender, parent_seqno, name, text, sent_at, received_at))
            proofs.append(signature)
            stored.append(ChatMessage(gid, mid, parent, name, text, sent_at, received_at, self._next_order, signature,
                                      public_key))
            if "<@" in text:
                mentions += _mention_rows(gid, sender, seqno, text, self._next_order)
            if text[:1] == "\x00" and (kind := kinds.kind_of(text)) != kinds.CHAT:  # a chat text: one test
                kinded.append((gid, kind, self._next_order))
            self._next_order += 1
            if sender not in self._keys_stored and public_key:
                new_keys[sender] = public_key
        if rows:
            self._write_segment(segment_gid, self._next_order - len(rows), rows, proofs)
        if new_keys:
            self._db.executemany("INSERT OR IGNORE INTO peer_keys VALUES (?, ?)", new_keys.items())
            self._keys_stored.update(new_keys)
        if mentions:
            self._db.executemany("INSERT OR IGNORE INTO mentions VALUES (?, ?, ?, ?, ?)", mentions)
        if kinded:
            self._db.executemany("INSERT OR IGNORE INTO message_kinds VALUES (?, ?, ?)", kinded)
        return stored

    def _root_order(self, gid: str, mid: Mid, before: int | None = None) -> int | None:
        """The delivery order of the root of stored ``mid``'s thread (the threads tables caught up
        past it); None if ``mid`` is not stored, or not before the order ``before``: a parent
        delivered after its reply leaves the reply a root (PeerStore.thread_root)."""
        root = self._roots.get((gid, mid))
        if root is not None:  # caught up: delivered before what a catch-up meets
            return root
        found = self._rows_of(gid, [mid])
        if not found or before is not None and found[0][0] >= before:
            return None
        order = found[0][0]
        row = self._db.execute("SELECT root FROM thread_replies WHERE delivery_order = ?", (order,)).fetchone()
        return row[0] if row is not None else order

    def _write_segment(self, gid: str, first_order: int, rows: list[tuple], proofs: list[bytes]) -> None:
        """One segment: ``rows`` of (sender, seqno, parent_sender, parent_seqno, name, text,
        sent_at, received_at) in delivery order, the first delivered as ``first_order``, and
        their signature proofs."""
        write_segment(self._db, self._packer, gid, first_order, rows, proofs)
        if self.indexing:
            self.search_index.index_rows(first_order, rows)

    def _segments(self, where: str, args: tuple) -> Iterator[tuple[int, str, int, list]]:
        return read_segments(self._db, where, args)

    def history(self, gid: str | None = None) -> list[ChatMessage]:
        """Delivered messages (of one group, or all) in this peer's delivery order."""
        keys = dict(self._db.execute("SELECT pid, public_key FROM peer_keys"))
        segments = self._segments("1", ()) if gid is None else self._segments("gid = ?", (gid,))
        return [
            ChatMessage(g, (s, q), (ps, pq) if ps is not None else None, n, t, sa, ra, order, sig, keys.get(s, b""))
            for _, g, first_order, rows in segments
            for order, (s, q, ps, pq, n, t, sa, ra, sig) in enumerate(rows, first_order)
        ]

    def _locate(self, gid: str, sender: str, seqnos: list[int]) -> Iterator[tuple[int, int]]:
        """(seqno, segment) of each of ``sender``'s stored ``seqnos`` in ``gid``."""
        if len(seqnos) <= 16:
            for seqno in seqnos:
                row = self._db.execute(
                    "SELECT last, segment FROM segment_runs WHERE gid = ? AND sender = ? AND first <= ? "
                    "ORDER BY first DESC LIMIT 1", (gid, sender, seqno)).fetchone()
                if row is not None and row[0] >= seqno:
                    yield seqno, row[1]
            return
        low, high = min(seqnos), max(seqnos)
        row = self._db.execute(
            "SELECT first FROM segment_runs WHERE gid = ? AND sender = ? AND first <= ? ORDER BY first DESC LIMIT 1",
            (gid, sender, low)).fetchone()
        # Only the runs that can hold one of the seqnos: from the one holding the lowest up.
        runs = self._db.execute(
            "SELECT first, last, segment FROM segment_runs WHERE gid = ? AND sender = ? AND first BETWEEN ? AND ? "
            "ORDER BY first", (gid, sender, row[0] if row else low, high)
        ).fetchall()
        firsts = [first for first, _, _ in runs]
        for seqno in seqnos:
            index = bisect_right(firsts, seqno) - 1
            if index >= 0 and runs[index][1] >= seqno:
                yield seqno, runs[index][2]

    def fetch(self, gid: str, mids: list[Mid]) -> list[wire.StoredMessage]:
        """The stored messages among ``mids``, in delivery order (for repairs and sync)."""
        keys = dict(self._db.execute("SELECT pid, public_key FROM peer_keys"))
        return [wire.StoredMessage(s, q, (ps, pq) if ps is not None else None, sa, n, t, keys.get(s, b""), sig)
                for _, (s, q, ps, pq, n, t, sa, ra, sig) in self._rows_of(gid, mids)]

    def messages(self, gid: str, mids: list[Mid]) -> list[ChatMessage]:
        """The stored messages among ``mids`` as delivered, arrival time and order included."""
        keys = dict(self._db.execute("SELECT pid, public_key FROM peer_keys"))
        return [ChatMessage(gid, (s, q), (ps, pq) if ps is not None else None, n, t, sa, ra, order, sig,
                            keys.get(s, b""))
                for order, (s, q, ps, pq, n, t, sa, ra, sig) in self._rows_of(gid, mids)]

    def _rows_of(self, gid: str, mids: list[Mid]) -> list[tuple[int, tuple]]:
        """(delivery order, row) of each stored message among ``mids``, in delivery order."""
        by_sender: dict[str, list[int]] = {}
        for sender, seqno in mids:
            by_sender.setdefault(sender, []).append(seqno)
        wanted: dict[int, set[Mid]] = {}  # segment -> the mids to take from it
        for sender, seqnos in by_sender.items():
            for seqno, segment in self._locate(gid, sender, seqnos):
                wanted.setdefault(segment, set()).add((sender, seqno))
        if not wanted:
            return []
        found = []
        for segment in sorted(wanted):
            take = wanted[segment]
            (first_order,) = self._db.execute("SELECT first_order FROM segments WHERE segment = ?",
                                              (segment,)).fetchone()
            found += [(order, row) for order, row in enumerate(self._segment_rows(segment), first_order)
                      if (row[0], row[1]) in take]
        return found

    def _segment_rows(self, segment: int) -> list:
        """One segment's rows, decoded; the last few stay decoded, since repairs, sync answers
        and duplicate checks ask for neighbouring messages one after another."""
        rows = self._decoded.get(segment)
        if rows is not None:
            self._decoded.move_to_end(segment)
            return rows
        (blob,) = self._db.execute("SELECT messages FROM segments WHERE segment = ?", (segment,)).fetchone()
        rows = self._decoded[segment] = decode_segment(blob)
        if len(self._decoded) > self.DECODED_SEGMENTS:
            self._decoded.popitem(last=False)
        return rows

    def delivered_mids(self, gid: str) -> list[Mid]:
        """Every stored message's mid in ``gid`` (in no particular order)."""
        return [(sender, seqno) for sender, first, last in self._db.execute(
            "SELECT sender, first, last FROM segment_runs WHERE gid = ?", (gid,)
        ) for seqno in range(first, last + 1)]

    # -- equivocation -------------------------------------------------------------

    def save_conflict(self, gid: str, kept: wire.StoredMessage, other: wire.StoredMessage) -> None:
        """Two signed versions of one message (the evidence), and which one is kept."""
        self._db.execute("INSERT OR REPLACE INTO conflicts VALUES (?, ?, ?, ?, ?)",
                         (gid, kept.sender, kept.seqno, self._pack_stored(kept), self._pack_stored(other)))

    def _pack_stored(self, m: wire.StoredMessage) -> bytes:
        return self._packer.pack([m.sender, m.seqno, list(m.parent) if m.parent else None, m.sent_at, m.name, m.text,
                                  m.public_key, m.sig])

    def conflicts(self, gid: str) -> list[tuple[wire.StoredMessage, wire.StoredMessage]]:
        """``(kept, other)`` of every equivocation known in ``gid``."""
        return [(_stored_message(kept), _stored_message(other)) for kept, other in self._db.execute(
            "SELECT kept, other FROM conflicts WHERE gid = ? ORDER BY sender, seqno", (gid,))]

    def replace_message(self, gid: str, message: wire.StoredMessage) -> bool:
        """Put ``message`` in place of the stored version of its mid (same place in the delivery
        order); False if that mid is not stored."""
        located = list(self._locate(gid, message.sender, [message.seqno]))
        if not located:
            return False
        segment = located[0][1]
        rows = [list(row) for row in self._segment_rows(segment)]
        (first_order,) = self._db.execute("SELECT first_order FROM segments WHERE segment = ?", (segment,)).fetchone()
        for order, row in enumerate(rows, first_order):
            if (row[0], row[1]) == (message.sender, message.seqno):
                self.search_index.reindex(order, self.search_index.indexed_text(order, row[5]),
                                          searched_text(message.text), message.text)
                self._rethread(gid, order, (message.sender, message.seqno), (row[2], row[3]), row[5], message)
                parent_sender, parent_seqno = message.parent or (None, None)
                row[2:7] = [parent_sender, parent_seqno, message.name, message.text, message.sent_at]
                row[8] = message.sig
                self._db.execute("DELETE FROM message_kinds WHERE delivery_order = ?", (order,))
                if message.kind != kinds.CHAT:
                    self._db.execute("INSERT INTO message_kinds VALUES (?, ?, ?)", (gid, message.kind, order))
                self._db.execute("DELETE FROM mentions WHERE delivery_order = ?", (order,))
                self._db.executemany("INSERT OR IGNORE INTO mentions VALUES (?, ?, ?, ?, ?)",
                                     _mention_rows(gid, message.sender, message.seqno, message.text, order))
        body = pack_segment(self._packer, [row[:8] for row in rows], [row[8] for row in rows])
        self._db.execute("UPDATE segments SET messages = ? WHERE segment = ?", (body, segment))
        self._decoded.pop(segment, None)
        self.search_index.forget_segment(segment)
        return True

    def _rethread(self, gid: str, order: int, mid: Mid, old_parent: tuple, old_text: str,
                  kept: wire.StoredMessage) -> None:
        """The threads tables after the message delivered as ``order`` becomes ``kept`` (the version
        an equivocation's rule keeps): with another parent, it and the replies under it leave their
        thread for the new parent's, or start one; an operation (never in the tables) that becomes a
        chat message joins them, and the reverse.  Tables not yet caught up to it need nothing: the
        catch-up reads the new version.  A reply's answers are found by reading its thread from it on,
        at most MAX_BRANCH_MOVES times per sender: past that a sender's kept versions stay where they
        were in the tables (only a member that equivocates again and again gets there)."""
        was_chat, is_chat = kinds.listed(old_text), kinds.listed(kept.text)
        (upto,) = self._db.execute("SELECT upto FROM threads_upto").fetchone()
        if order > upto or not (was_chat or is_chat) or was_chat and is_chat and old_parent == (kept.parent or (None, None)):
            return
        old_root = self._root_order(gid, mid) if was_chat else order
        new_root = order
        found = self._rows_of(gid, [kept.parent]) if kept.parent is not None else []
        if found and found[0][0] < order:  # a parent delivered after it leaves it a root
            new_root = self._root_order(gid, kept.parent) or order
        # Where its answers are filed: under it if it is a root or an operation (as the catch-up files
        # them), else under its thread's root.
        old_home, new_home = old_root, new_root if is_chat else order
        if old_root is None or was_chat == is_chat and old_home == new_home:
            return
        if old_home == order:  # every row filed under it is an answer of its
            moved = [reply for (reply,) in self._db.execute(
                "SELECT delivery_order FROM thread_replies WHERE root = ?", (order,))]
        elif new_home == old_home:
            moved = []
        else:
            spent = self._branch_moves.get(mid[0], 0)
            if spent >= MAX_BRANCH_MOVES:
                return
            self._branch_moves[mid[0]] = spent + 1
            thread = self._messages_at(gid, [reply for (reply,) in self._db.execute(
                "SELECT delivery_order FROM thread_replies WHERE root = ? AND delivery_order > ? "
                "ORDER BY delivery_order", (old_home, order))])
            branch = {mid}
            moved = [m.order for m in thread if in_branch(m, branch)]
        if was_chat:
            self._db.execute("DELETE FROM threads WHERE root = ?", (order,))
            self._db.execute("DELETE FROM thread_replies WHERE delivery_order = ?", (order,))
        if is_chat:
            if new_root == order:
                self._db.execute("INSERT INTO threads VALUES (?, ?, 0, ?)", (order, gid, order))
            else:
                self._db.execute("INSERT INTO thread_replies VALUES (?, ?)", (order, new_root))
        self._db.executemany("UPDATE thread_replies SET root = ? WHERE delivery_order = ?",
                             [(new_home, reply) for reply in moved])
        self._db.executemany(
            "UPDATE threads SET replies = (SELECT COUNT(*) FROM thread_replies WHERE root = threads.root), "
            "last = COALESCE((SELECT MAX(delivery_order) FROM thread_replies WHERE root = threads.root), root) "
            "WHERE root = ?", [(old_root,), (new_root,)])
        self._roots.clear()  # roots of the branch moved

    # -- paging and threads -----------------------------------------------------------

    def history_page(self, gid: str, before: int | None = None, after: int | None = None,
                     limit: int = 50) -> list[ChatMessage]:
        """Up to ``limit`` of ``gid``'s chat messages between the delivery orders ``after`` and
        ``before`` (exclusive), in delivery order: the first ones after ``after`` if given, else the
        last ones.  Segments are read from the near end until the page is full."""
        keys: dict[str, bytes] = {}
        backwards = after is None
        where = "gid = ?"
        args: list = [gid]
        if before is not None:
            where += " AND first_order < ?"
            args.append(before)
        if after is not None:
            where += " AND first_order + count > ?"
            args.append(after + 1)
        page: list[ChatMessage] = []
        for first_order, blob in self._db.execute(
            f"SELECT first_order, messages FROM segments WHERE {where} ORDER BY segment {'DESC' if backwards else ''}",
            args,
        ):
            rows = [(order, row) for order, row in enumerate(decode_segment(blob), first_order)
                    if (before is None or order < before) and (after is None or order > after)
                    and kinds.listed(row[5])]
            for order, (s, q, ps, pq, n, t, sa, ra, sig) in reversed(rows) if backwards else rows:
                if s not in keys:
                    keys[s] = self._public_key(s)
                page.append(ChatMessage(gid, (s, q), (ps, pq) if ps is not None else None, n, t, sa, ra, order, sig,
                                        keys[s]))
                if len(page) == limit:
                    break
            if len(page) == limit:
                break
        return page[::-1] if backwards else page

    def _messages_at(self, gid: str, orders: list[int]) -> list[ChatMessage]:
        """The stored messages of ``gid`` delivered as ``orders`` (ascending), each segment read and decoded
        once: the group's segments over the span are found by one query (a thread spreads over many)."""
        if not orders:
            return []
        if len(orders) <= FEW_ORDERS:  # (threads' roots and ends: a few, spread over the whole history)
            found_spans = {self._db.execute(
                "SELECT segment, first_order, count FROM segments WHERE first_order <= ? AND gid = ? "
                "ORDER BY first_order DESC LIMIT 1", (order, gid)).fetchone() for order in orders}
            spans = sorted(span for span in found_spans if span is not None)
        else:
            spans = self._db.execute(
                "SELECT segment, first_order, count FROM segments WHERE gid = ? AND first_order <= ? "
                "AND first_order >= (SELECT COALESCE(MAX(first_order), 0) FROM segments WHERE first_order <= ?) "
                "ORDER BY segment", (gid, orders[-1], orders[0])).fetchall()
        firsts = [first for _, first, _ in spans]
        keys: dict[str, bytes] = {}
        found: list[ChatMessage] = []
        wanted: dict[int, list[int]] = {}  # segment -> the orders to take from it
        for order in orders:
            at = bisect_right(firsts, order) - 1
            if at >= 0 and order < spans[at][1] + spans[at][2]:
                wanted.setdefault(at, []).append(order)
        for at, taken in wanted.items():
            segment, first, _ = spans[at]
            cached = self._decoded.get(segment)
            if cached is not None:
                rows = {order: cached[order - first] for order in taken}
            else:
                (blob,) = self._db.execute("SELECT messages FROM segments WHERE segment = ?", (segment,)).fetchone()
                rows = segment_rows_at(blob, [order - first for order in taken], first)
            for order in taken:
                s, q, ps, pq, n, t, sa, ra, sig = rows[order]
                if s not in keys:
                    keys[s] = self._public_key(s)
                found.append(ChatMessage(gid, (s, q), (ps, pq) if ps is not None else None, n, t, sa, ra, order,
                                         sig, keys[s]))
        return found

    def unread_before(self, gid: str, below: int) -> int:
        # One pass over the group's segments and the read ranges, both in order: read marks of a
        # reader who follows several groups split into thousands of ranges (the orders are shared).
        ranges = sorted(self.read_marks(gid) or [])
        if not ranges:
            (stored,) = self._db.execute("SELECT COALESCE(SUM(MIN(first_order + count, ?) - first_order), 0) "
                                         "FROM segments WHERE gid = ? AND first_order < ?", (below, gid, below)).fetchone()
            return stored
        unread, at = 0, 0
        for first, count in self._db.execute("SELECT first_order, count FROM segments WHERE gid = ? AND first_order < ? "
                                             "ORDER BY first_order", (gid, below)):
            low, high = first, min(first + count, below)  # this segment's orders, [low, high)
            unread += high - low
            while at < len(ranges) and ranges[at][1] < low:
                at += 1
            scan = at
            while scan < len(ranges) and ranges[scan][0] < high:
                unread -= max(0, min(ranges[scan][1] + 1, high) - max(ranges[scan][0], low))
                scan += 1
        return unread

    def thread(self, gid: str, root: Mid) -> list[ChatMessage]:
        self.catch_up_threads()
        located = self._rows_of(gid, [root])
        if not located:
            return []
        order = located[0][0]
        top = self._root_order(gid, root)
        orders = [order] + [reply for (reply,) in self._db.execute(
            "SELECT delivery_order FROM thread_replies WHERE root = ? AND delivery_order > ? ORDER BY delivery_order",
            (top, order))]
        thread = self._messages_at(gid, orders)
        if top == order:
            return thread
        members = {root}  # the branch under a reply: its descendants only
        return [m for m in thread if m.mid == root or in_branch(m, members)]

    def thread_root(self, gid: str, mid: Mid) -> Mid | None:
        self.catch_up_threads()
        top = self._root_order(gid, mid)
        if top is None:
            return None
        found = self._messages_at(gid, [top])
        return found[0].mid if found else None

    def threads(self, gid: str, before: int | None = None, limit: int = 50) -> list[StoredThread]:
        self.catch_up_threads()
        rows = self._db.execute(
            "SELECT root, replies, last FROM threads WHERE gid = ? AND last < ? ORDER BY last DESC LIMIT ?",
            (gid, before if before is not None else 2 ** 62, limit)).fetchall()
        wanted = sorted({order for root, _, last in rows for order in (root, last)})
        by_order = {m.order: m for m in self._messages_at(gid, wanted)}
        return [StoredThread(by_order[root], replies, by_order[last]) for root, replies, last in rows
                if root in by_order and last in by_order]

    def _public_key(self, pid: str) -> bytes:
        row = self._db.execute("SELECT public_key FROM peer_keys WHERE pid = ?", (pid,)).fetchone()
        return row[0] if row else b""

    def message_count(self, gid: str) -> int:
        return self._db.execute("SELECT COALESCE(SUM(count), 0) FROM segments WHERE gid = ?", (gid,)).fetchone()[0]

    # -- search (middleware.store_search) -------------------------------------------------

    def search(self, query: str, *, gid: str | None = None, sender: str | None = None,
               since: int | None = None, until: int | None = None, limit: int = 20, offset: int = 0,
               by_time: bool = False, cuts: Cuts = {}) -> list[SearchHit]:
        """Matches of ``query`` (FTS5 syntax) in the current text of chat messages (SearchIndex.search)."""
        return self.search_index.search(query, gid=gid, sender=sender, since=since, until=until, limit=limit,
                                        offset=offset, by_time=by_time, cuts=cuts)

    def set_search_text(self, gid: str, mid: Mid, text: str | None) -> None:
        found = self._rows_of(gid, [mid])
        if not found:
            return
        order, row = found[0]
        self.search_index.reindex(order, self.search_index.indexed_text(order, row[5]),
                                  None if text is None else searched_text(text), row[5])

    # -- mentions (middleware.mentions): who each message mentions, written with it --------------

    # One row per (mentioned pid, message): mentions(pid) is then one index range, newest first,
    # while the messages stay packed in segments.  Made at open when missing, and filled from
    # the messages already stored (a data dir from before mentions, which may hold tokens
    # that newer peers sent).
    MENTIONS_SCHEMA = ("CREATE TABLE mentions (pid TEXT NOT NULL, delivery_order INTEGER NOT NULL, "
                       "gid TEXT NOT NULL, sender TEXT NOT NULL, seqno INTEGER NOT NULL, "
                       "PRIMARY KEY (pid, delivery_order)) WITHOUT ROWID;"
                       "CREATE INDEX mentions_by_order ON mentions (delivery_order)")

    # The kind of each message that is not chat text, found by group and kind (the files list reads its
    # offers' rows rather than a scan of the history), and by order (a kept version replaces it).
    KINDS_SCHEMA = ("CREATE TABLE message_kinds (gid TEXT NOT NULL, kind TEXT NOT NULL, delivery_order INTEGER NOT NULL, "
                    "PRIMARY KEY (gid, kind, delivery_order)) WITHOUT ROWID;"
                    "CREATE INDEX message_kinds_by_order ON message_kinds (delivery_order)")

    def _kinds_table(self) -> None:
        """Version 5's message_kinds, from the messages stored (version 4's file_offers goes with it:
        the same transaction, so a crash leaves either both or the old one, and the next open does it)."""
        if not new_table(self._db, "message_kinds", self.KINDS_SCHEMA):
            return
        # decoded: only the segments that hold a kind's opening bytes, then the rows that are of it
        self._db.executemany("INSERT INTO message_kinds VALUES (?, ?, ?)", [
            (gid, kind, order) for _, gid, first_order, segment_rows in self._segments(
                " OR ".join(["instr(messages, ?) > 0"] * len(kinds.MARKS)), kinds.MARKS)
            for order, row in enumerate(segment_rows, first_order) if (kind := kinds.kind_of(row[5])) != kinds.CHAT])
        self._db.execute("DROP TABLE IF EXISTS file_offers")

    def _learn_kinds(self) -> None:
        """Messages stored as of a kind this version did not know (a newer peer's) may be of one it
        knows now that it was upgraded: their rows take the kind their text now reads as.  Few rows,
        and none in most data dirs: one indexed look at open."""
        unknown = self._db.execute("SELECT gid, delivery_order FROM message_kinds WHERE kind = ?",
                                   (kinds.UNKNOWN,)).fetchall()
        for gid, order in unknown:
            for message in self._messages_at(gid, [order]):
                if message.kind != kinds.UNKNOWN:
                    self._db.execute("UPDATE message_kinds SET kind = ? WHERE gid = ? AND kind = ? AND delivery_order = ?",
                                     (message.kind, gid, kinds.UNKNOWN, order))
        if unknown:
            self._db.commit()

    def of_kind(self, gid: str, kind: str) -> list[ChatMessage]:
        orders = [order for (order,) in self._db.execute(
            "SELECT delivery_order FROM message_kinds WHERE gid = ? AND kind = ? ORDER BY delivery_order", (gid, kind))]
        return self._messages_at(gid, orders)

    def file_offers(self, gid: str) -> list[ChatMessage]:
        return self.of_kind(gid, kinds.FILE_OFFER)

    def _mentions_table(self) -> None:
        if not new_table(self._db, "mentions", self.MENTIONS_SCHEMA):
            return
        rows = [mention for _, gid, first_order, segment_rows in self._segments("1", ())
                for order, (sender, seqno, _, _, _, text, *_) in enumerate(segment_rows, first_order)
                if "<@" in text for mention in _mention_rows(gid, sender, seqno, text, order)]
        self._db.executemany("INSERT OR IGNORE INTO mentions VALUES (?, ?, ?, ?, ?)", rows)

    def mentions(self, pid: str, limit: int, cuts: Cuts = {}) -> list[ChatMessage]:
        """The stored messages that mention ``pid``, newest delivered first, at most ``limit``;
        none past a removal's cut in ``cuts``."""
        found: dict[str, list[Mid]] = {}
        past = " AND NOT past_cut(gid, sender, seqno, ?)" if cuts else ""
        for gid, sender, seqno in self._db.execute(
            f"SELECT gid, sender, seqno FROM mentions WHERE pid = ?{past} ORDER BY delivery_order DESC LIMIT ?",
            (pid, *([cuts_argument(cuts)] if cuts else []), max(limit, 0)),
        ):
            found.setdefault(gid, []).append((sender, seqno))
        messages = [message for gid, mids in found.items() for message in self.messages(gid, mids)]
        return sorted(messages, key=lambda m: m.order, reverse=True)

    def group_desc(self, gid: str) -> str:
        row = self._db.execute("SELECT desc FROM groups WHERE gid = ?", (gid,)).fetchone()
        return row[0] if row else ""

    # -- the peer cache (middleware.store_peers) --------------------------------------------

    def cached_peers(self) -> list[tuple[str, Endpoint, float]]:
        return self.peer_cache.cached()

    def cache_peer(self, pid: str, endpoint: Endpoint, wall: float,
                   keep: Callable[[str], bool] | None = None) -> None:
        self.peer_cache.cache(pid, endpoint, wall, keep)

    # -- read marks (the GUI's unread state, kept across restarts) -------------------

    # Per group, the delivery orders read, as inclusive ranges (msgpack): the table, and the marks
    # of a data dir from before them, are store_schema's READ_MARKS_SCHEMA.
    MAX_READ_RANGES = MAX_READ_RANGES

    def read_marks(self, gid: str) -> list[tuple[int, int]] | None:
        """The delivery orders read in ``gid``, as inclusive ranges; None if never marked."""
        row = self._db.execute("SELECT ranges FROM read_marks WHERE gid = ?", (gid,)).fetchone()
        return [tuple(r) for r in msgpack.unpackb(row[0], raw=False)] if row else None

    def add_read_marks(self, gid: str, ranges: Iterable[tuple[int, int]]) -> None:
        """Add inclusive delivery-order ranges to what was read in ``gid`` (commit is the caller's)."""
        merged = merged_read_marks(self.read_marks(gid) or [], ranges, self.MAX_READ_RANGES)
        self._db.execute("INSERT OR REPLACE INTO read_marks (gid, ranges) VALUES (?, ?)",
                         (gid, self._packer.pack([list(r) for r in merged])))

    # -- direct messages (middleware.store_direct) ------------------------------------------

    def save_direct(self, rows: Iterable[StoredDirect]) -> None:
        self.direct.save(rows, index=self.indexing)

    def direct_history(self, peer: str, before: int | None = None, limit: int | None = None) -> list[StoredDirect]:
        return self.direct.history(peer, before, limit)

    def direct_unsettled(self) -> list[StoredDirect]:
        return self.direct.unsettled()

    def direct_unread(self, peer: str, after_order: int) -> list[tuple[int, int]]:
        return self.direct.unread(peer, after_order)

    def direct_message(self, peer: str, mid: Mid) -> StoredDirect | None:
        return self.direct.message(peer, mid)

    def direct_conversations(self) -> dict[str, bytes]:
        return self.direct.conversations()

    def save_direct_conversation(self, peer: str, state: bytes) -> None:
        self.direct.save_conversation(peer, state)

    def direct_setting(self, key: str) -> bytes | None:
        return self.direct.setting(key)

    def set_direct_setting(self, key: str, value: bytes) -> None:
        self.direct.set_setting(key, value)

    def search_direct(self, query: str, *, peer: str | None = None, sender: str | None = None,
                      since: int | None = None, until: int | None = None, limit: int = 20, offset: int = 0,
                      by_time: bool = False) -> list[SearchHit]:
        return self.direct.search(query, peer=peer, sender=sender, since=since, until=until, limit=limit,
                                  offset=offset, by_time=by_time)
