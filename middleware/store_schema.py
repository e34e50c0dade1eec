"""The store's schema, its version, and bringing an older data dir's database up to them.

:func:`upgrade` runs first at every open, in the store's connection: it migrates the layouts of
older versions in place (a row per message, whole proofs), makes the core tables (:data:`SCHEMA`),
adds the columns and tables later versions brought, and sets the version.  The parts with tables of
their own make and fill them on open after it, each in its module: the search indexes
(:mod:`middleware.store_search`, :mod:`middleware.store_direct`), the threads, mentions and
message kinds (:mod:`middleware.store`, with :func:`new_table`), the peer cache on first use
(:mod:`middleware.store_peers`).
"""

from __future__ import annotations

import sqlite3

import msgpack

from .store_segments import SEGMENT_MESSAGES, pack_segment, write_segment

# Version 2: the messages one flush delivers to a group are stored as one row, a segment
# (msgpack, in delivery order), with one row per run of consecutive seqnos of a sender
# to find a message by mid.  Storing a message then costs a share of two inserts
# instead of a row and an index entry of its own: 3 µs of CPU against 13 for flushes
# of 90 messages (a micro-benchmark of both layouts on the build machine).  A sender's public
# key is kept once, in peer_keys, since its pid is that key's fingerprint.
# Each message's signature proof is kept written against the one before it in its
# segment (crypto.compact_proofs): neighbours mostly share a datagram, so a proof takes
# about 70 bytes instead of 322.
# Groups: a group made since signed descriptors keeps its descriptor (groups.descriptor,
# msgpack) and one row per member in member_records, the member's own signed record,
# replaced when that member changes (one row per change).  Rows without a descriptor are
# legacy groups: their messages stay readable, their members stay in the old members table.
# Both are added in place (no version number: the columns and tables are looked for).
# Direct messages (middleware.direct) have tables of their own, a row per message keyed by
# conversation and mid, found in delivery order by an index; made where missing, like the rest.
# Version 3 indexed a file offer's whole text (its JSON) for search, version 4 its file name.
# Version 5 names the kind of every message that is not chat text (middleware.kinds) in a row of
# message_kinds (its kind column), found by group and kind: version 4's file_offers named file
# offers alone.  A message's kind is also in its text (its body, as signed: kinds.split), which
# stays in the segment as it came, so that relaying it needs nothing rebuilt.
# Version 2 kept the proofs whole; version 1 kept a row per message in delivery order;
# version 0 also stored the key in every row.  All are migrated in place.
SCHEMA_VERSION = 5
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
CREATE TABLE IF NOT EXISTS member_records (
    gid TEXT NOT NULL, pid TEXT NOT NULL, record BLOB NOT NULL, PRIMARY KEY (gid, pid)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS peer_keys (pid TEXT PRIMARY KEY, public_key BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS segments (
    segment INTEGER PRIMARY KEY, gid TEXT NOT NULL, first_order INTEGER NOT NULL, count INTEGER NOT NULL,
    messages BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS segments_by_group ON segments (gid, segment);
CREATE INDEX IF NOT EXISTS segments_by_order ON segments (first_order);
CREATE INDEX IF NOT EXISTS segments_by_group_order ON segments (gid, first_order);
CREATE TABLE IF NOT EXISTS segment_runs (
    gid TEXT NOT NULL, sender TEXT NOT NULL, first INTEGER NOT NULL, last INTEGER NOT NULL,
    segment INTEGER NOT NULL, PRIMARY KEY (gid, sender, first)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS conflicts (
    gid TEXT NOT NULL, sender TEXT NOT NULL, seqno INTEGER NOT NULL, kept BLOB NOT NULL, other BLOB NOT NULL,
    PRIMARY KEY (gid, sender, seqno)
);
CREATE TABLE IF NOT EXISTS direct_messages (
    peer TEXT NOT NULL, sender TEXT NOT NULL, seqno INTEGER NOT NULL, parent_sender TEXT, parent_seqno INTEGER,
    name TEXT NOT NULL, text TEXT NOT NULL, sent_at INTEGER NOT NULL, received_at INTEGER NOT NULL,
    ord INTEGER NOT NULL, status TEXT NOT NULL, late INTEGER NOT NULL, stamp BLOB NOT NULL,
    PRIMARY KEY (peer, sender, seqno)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS direct_by_order ON direct_messages (peer, ord);
CREATE INDEX IF NOT EXISTS direct_unsettled ON direct_messages (status) WHERE status IN ('queued', 'sent', 'held');
CREATE TABLE IF NOT EXISTS direct_conversations (peer TEXT PRIMARY KEY, state BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS direct_settings (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
"""

# Version 1's message table, the step between a version-0 database and segments.
VERSION_1_MESSAGES = """
CREATE TABLE messages (
    delivery_order INTEGER PRIMARY KEY,
    gid TEXT NOT NULL, sender TEXT NOT NULL, seqno INTEGER NOT NULL,
    parent_sender TEXT, parent_seqno INTEGER, sender_name TEXT NOT NULL, text TEXT NOT NULL,
    sent_at INTEGER NOT NULL, received_at INTEGER NOT NULL, sig BLOB NOT NULL
);
"""
# Read marks: per group, the delivery orders read, as inclusive ranges (msgpack).  Joining or creating
# a group stores its row, empty: nothing read.  A data dir from before read marks (its database has
# segments but no read_marks table) is told apart when it is first opened: what it holds was there
# before the reader could be told it is unread, so it is marked read, explicitly, and a group with no
# row at all reads as nothing read.
READ_MARKS_SCHEMA = "CREATE TABLE IF NOT EXISTS read_marks (gid TEXT PRIMARY KEY, ranges BLOB NOT NULL)"
# Columns added to groups in place: data dirs from before private groups, or before descriptors.
GROUP_COLUMNS = (("salt", "BLOB NOT NULL DEFAULT x''"), ("key_check", "BLOB NOT NULL DEFAULT x''"),
                 ("group_key", "BLOB"), ("descriptor", "BLOB"))


def upgrade(db: sqlite3.Connection, packer: msgpack.Packer) -> int:
    """Bring ``db`` to :data:`SCHEMA_VERSION`'s core tables; returns the version it was at.  What
    is left in the transaction under way (read marks, columns, the version) is the caller's to
    commit, with the tables the parts then make."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version == 2:
        _compact_proofs(db, packer)
    _segments_from_rows(db, packer)
    tables_before = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.executescript(SCHEMA)
    if "read_marks" not in tables_before:
        db.execute("BEGIN")  # the table and its rows together: a crash must not leave the table alone
        db.execute(READ_MARKS_SCHEMA)
        if "segments" in tables_before:
            _mark_history_read(db, packer)
    columns = {row[1] for row in db.execute("PRAGMA table_info(groups)")}
    for column, kind in GROUP_COLUMNS:
        if column not in columns:
            db.execute(f"ALTER TABLE groups ADD COLUMN {column} {kind}")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return version


def new_table(db: sqlite3.Connection, name: str, schema: str) -> bool:
    """Make table ``name`` (``schema``: its statements, ``;`` between them) unless the data dir
    has it, in a transaction that its rows then join: a crash must not leave it made and empty,
    as it would never be filled again.  False if it was there."""
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone():
        return False
    if not db.in_transaction:
        db.execute("BEGIN")
    for statement in schema.split(";"):
        db.execute(statement)
    return True


def _segments_from_rows(db: sqlite3.Connection, packer: msgpack.Packer) -> None:
    """Bring a version-0 or version-1 database (a row per message) to the current schema."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
    if not columns:
        return
    if "public_key" in columns:  # version 0: the public key in every row
        db.executescript(
            "BEGIN;"
            "ALTER TABLE messages RENAME TO messages_v0;"
            "DROP INDEX IF EXISTS messages_by_order;"
            + SCHEMA + VERSION_1_MESSAGES
            + "INSERT OR IGNORE INTO peer_keys SELECT sender, public_key FROM messages_v0 WHERE length(public_key) > 0;"
            "INSERT INTO messages SELECT delivery_order, gid, sender, seqno, parent_sender, parent_seqno, "
            "  sender_name, text, sent_at, received_at, sig FROM messages_v0;"
            "DROP TABLE messages_v0;"
            "COMMIT;"
        )
    db.executescript(SCHEMA)
    db.execute("BEGIN")
    rows = db.execute(
        "SELECT delivery_order, gid, sender, seqno, parent_sender, parent_seqno, sender_name, text, sent_at, "
        "received_at, sig FROM messages ORDER BY delivery_order"
    )
    segment: list[tuple] = []
    for row in rows:
        if segment and (row[1] != segment[0][1] or row[0] != segment[-1][0] + 1 or len(segment) == SEGMENT_MESSAGES):
            write_segment(db, packer, segment[0][1], segment[0][0], [r[2:10] for r in segment], [r[10] for r in segment])
            segment = []
        segment.append(row)
    if segment:
        write_segment(db, packer, segment[0][1], segment[0][0], [r[2:10] for r in segment], [r[10] for r in segment])
    db.execute("DROP TABLE messages")
    db.commit()


def _compact_proofs(db: sqlite3.Connection, packer: msgpack.Packer) -> None:
    """Version 2 kept each proof whole inside its segment's rows: write them compactly."""
    db.execute("BEGIN")
    for segment, blob in db.execute("SELECT segment, messages FROM segments").fetchall():
        rows = msgpack.unpackb(blob, raw=False)
        body = pack_segment(packer, [row[:8] for row in rows], [row[8] for row in rows])
        db.execute("UPDATE segments SET messages = ? WHERE segment = ?", (body, segment))
    db.commit()


def _mark_history_read(db: sqlite3.Connection, packer: msgpack.Packer) -> None:
    """A data dir from before read marks: everything it holds was read (see READ_MARKS_SCHEMA)."""
    db.executemany("INSERT INTO read_marks (gid, ranges) VALUES (?, ?)",
                   [(gid, packer.pack([[1, last]])) for gid, last in db.execute(
                       "SELECT gid, MAX(first_order + count - 1) FROM segments GROUP BY gid")])
