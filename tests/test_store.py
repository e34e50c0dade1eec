"""The SQLite store: messages kept in delivery order, public keys once per sender, old databases migrated."""

import sqlite3

from middleware import crypto
from middleware.store import SCHEMA_VERSION, Store
from middleware.types import ChatMessage

ANN, BOB = crypto.Identity.generate(), crypto.Identity.generate()
GID = "g-1"


def message(identity, seqno, parent=None, gid=GID, text=None):
    return ChatMessage(gid, (identity.pid, seqno), parent, identity.pid[:6], text or f"message {seqno}",
                       1_700_000_000_000 + seqno, 1_700_000_000_500 + seqno, 0, bytes([seqno]) * 66,
                       identity.public_key)


def test_messages_come_back_in_delivery_order_with_their_keys(tmp_path):
    store = Store(tmp_path / "m.db")
    sent = [message(BOB, 2, (ANN.pid, 1)), message(ANN, 1), message(BOB, 1, gid="other"), message(ANN, 2, (BOB.pid, 2))]
    stored = store.add_messages(sent)
    store.commit()
    assert [m.order for m in stored] == [1, 2, 3, 4]
    assert store.history(GID) == [stored[0], stored[1], stored[3]]
    assert store.history() == stored
    fetched = store.fetch(GID, [(ANN.pid, 2), (BOB.pid, 2), (BOB.pid, 9)])
    assert [(f.sender, f.seqno, f.public_key, f.sig) for f in fetched] == [
        (BOB.pid, 2, BOB.public_key, sent[0].signature), (ANN.pid, 2, ANN.public_key, sent[3].signature)]
    store.close()

    reopened = Store(tmp_path / "m.db")
    assert reopened.history() == stored
    more = reopened.add_messages([message(ANN, 3)])
    assert more[0].order == 5 and reopened.history(GID)[-1] == more[0]
    reopened.close()


def test_a_message_stored_twice_is_kept_once(tmp_path):
    store = Store(tmp_path / "m.db")
    first = store.add_messages([message(ANN, 1, text="first")])
    store.add_messages([message(ANN, 1, text="second")])
    assert store.history(GID) == first
    store.close()


VERSION_0 = """
CREATE TABLE messages (
    gid TEXT NOT NULL, sender TEXT NOT NULL, seqno INTEGER NOT NULL,
    parent_sender TEXT, parent_seqno INTEGER, sender_name TEXT NOT NULL, text TEXT NOT NULL,
    sent_at INTEGER NOT NULL, received_at INTEGER NOT NULL, delivery_order INTEGER NOT NULL,
    public_key BLOB NOT NULL, sig BLOB NOT NULL,
    PRIMARY KEY (gid, sender, seqno)
) WITHOUT ROWID;
CREATE INDEX messages_by_order ON messages (gid, delivery_order);
"""


def test_a_version_0_database_is_migrated_without_losing_anything(tmp_path):
    path = tmp_path / "m.db"
    old = sqlite3.connect(path)
    old.executescript(VERSION_0)
    rows = [
        (GID, ANN.pid, 1, None, None, "Ann", "root", 10, 11, 1, ANN.public_key, b"s1"),
        (GID, BOB.pid, 1, ANN.pid, 1, "Bob", "reply", 12, 13, 2, BOB.public_key, b"s2"),
        ("other", ANN.pid, 1, None, None, "Ann", "elsewhere", 14, 15, 3, ANN.public_key, b"s3"),
    ]
    old.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    old.commit()
    old.close()

    store = Store(path)
    assert store.history() == [
        ChatMessage(g, (s, q), (ps, pq) if ps else None, n, t, sa, ra, o, sig, key)
        for g, s, q, ps, pq, n, t, sa, ra, o, key, sig in rows
    ]
    assert [(f.sender, f.public_key) for f in store.fetch(GID, [(BOB.pid, 1)])] == [(BOB.pid, BOB.public_key)]
    assert store.add_messages([message(BOB, 2)])[0].order == 4
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {name for (name,) in store._db.execute("SELECT name FROM sqlite_master")}
    assert "messages_v0" not in tables and "messages_by_order" not in tables
    store.close()
