"""The SQLite store: messages kept in delivery order (in segments), public keys once per sender,
old databases migrated."""

import random
import sqlite3

import pytest

import msgpack

from m2mc.middleware import crypto
from m2mc.middleware import kinds
from m2mc.middleware.store import Store
from m2mc.middleware.store_schema import SCHEMA, SCHEMA_VERSION, VERSION_1_MESSAGES
from m2mc.middleware.store_segments import SEGMENT_MESSAGES
from m2mc.middleware.types import ChatMessage

OP_MARKER = kinds.body(kinds.OPERATION, "")  # how an operation's body opens (middleware.kinds)

ANN, BOB = crypto.Identity.generate(), crypto.Identity.generate()
GID = "g-1"


def message(identity, seqno, parent=None, gid=GID, text=None):
    return ChatMessage(gid, (identity.pid, seqno), parent, identity.pid[:6], text or f"message {seqno}",
                       1_700_000_000_000 + seqno, 1_700_000_000_500 + seqno, 0, bytes([seqno % 256]) * 66,
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
    assert store.add_messages([message(ANN, 1, text="second"), message(ANN, 1, text="third")]) == []
    assert store.history(GID) == first
    store.close()
    reopened = Store(tmp_path / "m.db")
    assert reopened.add_messages([message(ANN, 1, text="again"), message(ANN, 2)])[0].mid == (ANN.pid, 2)
    assert [m.text for m in reopened.history(GID)] == ["first", "message 2"]
    reopened.close()


def test_any_mix_of_senders_and_seqnos_is_found_again(tmp_path):
    """Flushes of interleaved senders with gaps and seqnos out of order, past a segment's size."""
    store = Store(tmp_path / "m.db")
    flushes = [
        [message(ANN, 5), message(BOB, 1), message(ANN, 2), message(ANN, 3), message(BOB, 3), message(ANN, 1)],
        [message(ANN, seqno) for seqno in range(6, 6 + SEGMENT_MESSAGES + 10)] + [message(BOB, 2, gid="other")],
        [message(ANN, 4), message(BOB, 2)],
    ]
    stored = [m for flush in flushes for m in store.add_messages(flush)]
    store.commit()
    assert [m.order for m in stored] == list(range(1, len(stored) + 1))
    assert store.history() == stored
    in_group = [m for m in stored if m.gid == GID]
    assert store.history(GID) == in_group
    assert sorted(store.delivered_mids(GID)) == sorted(m.mid for m in in_group)
    for asked in ([(ANN.pid, 4)], [(ANN.pid, 300), (BOB.pid, 2), (BOB.pid, 4), ("nobody", 1)],
                  [m.mid for m in in_group] + [(ANN.pid, 999)]):
        expected = [m for m in in_group if m.mid in set(asked)]
        fetched = store.fetch(GID, asked)
        assert [((f.sender, f.seqno), f.text, f.sig, f.public_key) for f in fetched] == [
            (m.mid, m.text, m.signature, m.public_key) for m in expected]
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
    assert tables.isdisjoint({"messages_v0", "messages_by_order", "messages"})
    store.close()


def test_a_version_1_database_is_migrated_without_losing_anything(tmp_path):
    """Version 1: a row per message in delivery order (with a gap where a duplicate was refused)."""
    path = tmp_path / "m.db"
    old = sqlite3.connect(path)
    old.executescript(VERSION_1_MESSAGES + "CREATE TABLE peer_keys (pid TEXT PRIMARY KEY, public_key BLOB NOT NULL);")
    rows = [
        (1, GID, ANN.pid, 1, None, None, "Ann", "root", 10, 11, b"s1"),
        (2, GID, BOB.pid, 1, ANN.pid, 1, "Bob", "reply", 12, 13, b"s2"),
        (4, GID, BOB.pid, 2, BOB.pid, 1, "Bob", "after a gap", 14, 15, b"s3"),
        (5, "other", ANN.pid, 1, None, None, "Ann", "elsewhere", 16, 17, b"s4"),
        (6, GID, ANN.pid, 2, None, None, "Ann", "back", 18, 19, b"s5"),
    ]
    old.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    old.executemany("INSERT INTO peer_keys VALUES (?, ?)", [(ANN.pid, ANN.public_key), (BOB.pid, BOB.public_key)])
    old.execute("PRAGMA user_version = 1")
    old.commit()
    old.close()

    store = Store(path)
    keys = {ANN.pid: ANN.public_key, BOB.pid: BOB.public_key}
    assert store.history() == [
        ChatMessage(g, (s, q), (ps, pq) if ps else None, n, t, sa, ra, o, sig, keys[s])
        for o, g, s, q, ps, pq, n, t, sa, ra, sig in rows
    ]
    assert [f.text for f in store.fetch(GID, [(BOB.pid, 2), (ANN.pid, 2)])] == ["after a gap", "back"]
    assert store.add_messages([message(BOB, 2), message(BOB, 3)])[0].order == 7
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert "messages" not in {name for (name,) in store._db.execute("SELECT name FROM sqlite_master")}
    store.close()


def signed_messages(identity, count):
    """``count`` messages of ``identity`` with real burst proofs (datagrams of up to 17)."""
    datagrams = [[f"m{seqno}".encode() for seqno in range(start, min(start + 17, count))] for start in range(0, count, 17)]
    _, _, proofs = crypto.sign_burst(identity, datagrams[: crypto.MAX_BURST])
    flat = [proof for datagram in proofs for proof in datagram]
    return [message(identity, seqno + 1)._replace(signature=proof) for seqno, proof in enumerate(flat)]


def test_proofs_are_stored_compactly_and_come_back_whole(tmp_path):
    store = Store(tmp_path / "m.db")
    sent = signed_messages(ANN, 100) + [message(BOB, 1)]  # a short fake proof among real ones
    store.add_messages(sent)
    store.commit()
    (blob,) = store._db.execute("SELECT messages FROM segments").fetchone()
    _, kept = msgpack.unpackb(blob)
    assert sum(map(len, kept)) < 0.3 * sum(len(m.signature) for m in sent)
    assert [m.signature for m in store.history(GID)] == [m.signature for m in sent]
    assert [f.sig for f in store.fetch(GID, [(ANN.pid, 50), (BOB.pid, 1)])] == [sent[49].signature, sent[100].signature]
    store.close()


def test_a_version_2_database_is_migrated_without_losing_anything(tmp_path):
    """Version 2: segments whose rows carry each proof whole."""

    path = tmp_path / "m.db"
    sent = signed_messages(BOB, 40)
    old = sqlite3.connect(path)
    old.executescript(SCHEMA)
    rows = [[m.mid[0], m.mid[1], None, None, m.sender_name, m.text, m.sent_at, m.received_at, m.signature] for m in sent]
    old.execute("INSERT INTO segments VALUES (1, ?, 1, ?, ?)", (GID, len(rows), msgpack.packb(rows, use_bin_type=True)))
    old.execute("INSERT INTO segment_runs VALUES (?, ?, 1, 40, 1)", (GID, BOB.pid))
    old.execute("INSERT INTO peer_keys VALUES (?, ?)", (BOB.pid, BOB.public_key))
    old.execute("PRAGMA user_version = 2")
    old.commit()
    old.close()

    store = Store(path)
    assert store.history(GID) == [m._replace(order=order) for order, m in enumerate(sent, 1)]
    assert [f.sig for f in store.fetch(GID, [(BOB.pid, 7)])] == [sent[6].signature]
    assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.add_messages([message(BOB, 41)])[0].order == 41
    store.close()


def test_a_data_dir_from_before_read_marks_is_told_apart_explicitly_and_a_new_group_starts_unread(tmp_path):
    """Issue 32 item 1: what a data dir held before read marks existed counts as read (the reader
    was never told it was new); a group with no marks in a data dir of today reads as nothing read."""
    store = Store(tmp_path / "m.db")
    stored = store.add_messages([message(ANN, 1), message(BOB, 1, gid="other"), message(ANN, 2)])
    store.commit()
    store.close()
    with sqlite3.connect(tmp_path / "m.db") as db:  # as the version before read marks left it
        db.execute("DROP TABLE read_marks")
    old = Store(tmp_path / "m.db")
    assert old.read_marks(GID) == [(1, stored[2].order)] and old.read_marks("other") == [(1, stored[1].order)]
    later = old.add_messages([message(ANN, 3)])  # after the upgrade: unread
    old.commit()
    assert later[0].order not in range(1, stored[2].order + 1)
    old.close()

    again = Store(tmp_path / "m.db")  # told apart once: opening again changes nothing
    assert again.read_marks(GID) == [(1, stored[2].order)]
    assert again.read_marks("never-marked") is None
    again.close()
    fresh = Store(tmp_path / "fresh.db")
    fresh.add_messages([message(ANN, 1)])
    fresh.commit()
    assert fresh.read_marks(GID) is None
    fresh.close()
@pytest.mark.parametrize("batch", [None, 7])
def test_a_data_dir_from_before_the_threads_tables_gets_them_built_on_open_with_the_same_answers(tmp_path, monkeypatch,
                                                                                                 batch):
    rng = random.Random(7)
    path = tmp_path / "threads.db"
    store = Store(path)
    ann, bob = crypto.Identity.generate(), crypto.Identity.generate()
    sent: dict[str, list] = {"g1": [], "g2": []}
    for n in range(1, 401):
        gid = rng.choice(["g1", "g2"])
        earlier = sent[gid]
        parent = rng.choice(earlier).mid if earlier and rng.random() < 0.7 else None
        text = f"{OP_MARKER}op" if rng.random() < 0.05 else None
        written = message(rng.choice([ann, bob]), n, parent, gid, text)
        if text is None:
            earlier.append(written)
        store.add_messages([written])
        if n % 37 == 0:
            store.commit()
    store.commit()
    expected = {gid: (store.threads(gid, limit=1000), [store.thread(gid, m.mid) for m in sent[gid]])
                for gid in sent}
    store.close()
    assert all(len(threads) > 10 and any(t.replies > 5 for t in threads) for threads, _ in expected.values())
    db = sqlite3.connect(path)
    db.execute("DROP TABLE threads")  # as a data dir written before them
    db.execute("DROP TABLE thread_replies")
    db.commit()
    db.close()
    if batch is not None:  # rebuilt in small batches, with the roots met forgotten between them
        from m2mc.middleware import store as store_module
        monkeypatch.setattr(store_module, "CATCH_UP_BATCH", batch)
        monkeypatch.setattr(store_module, "THREAD_ROOTS_CACHED", 5)
    store = Store(path)
    assert {gid: (store.threads(gid, limit=1000), [store.thread(gid, m.mid) for m in sent[gid]])
            for gid in sent} == expected
    store.close()


def test_storing_writes_no_thread_rows_the_first_thread_query_catches_up_and_a_rollback_undoes_it(tmp_path):
    store = Store(tmp_path / "lazy.db")
    root = message(ANN, 1)
    store.add_messages([root, message(BOB, 1, root.mid), message(ANN, 2, (BOB.pid, 1))])
    store.commit()
    rows = lambda: store._db.execute("SELECT COUNT(*) FROM thread_replies").fetchone()[0]  # noqa: E731
    assert rows() == 0  # delivery pays nothing for the threads tables
    assert [t.replies for t in store.threads(GID)] == [2] and rows() == 2
    store.add_messages([message(BOB, 2, (ANN.pid, 2))])
    store.commit()
    assert store.thread_root(GID, (BOB.pid, 2)) == root.mid and rows() == 3
    store.rollback()  # the catch-up was in the open transaction: both go together
    assert rows() == 2 and [t.replies for t in store.threads(GID)] == [3]
    store.close()


def test_a_crash_while_migrating_to_read_marks_leaves_the_migration_to_be_done_again(tmp_path, monkeypatch):
    store = Store(tmp_path / "m.db")
    stored = store.add_messages([message(ANN, 1), message(ANN, 2)])
    store.commit()
    store.close()
    with sqlite3.connect(tmp_path / "m.db") as db:
        db.execute("DROP TABLE read_marks")

    def crash(self):
        self._db.close()  # as a kill -9 leaves it: what was not committed is gone
        raise RuntimeError("killed while the open migrates")
    monkeypatch.setattr(Store, "_mentions_table", crash)  # a later step of the same open
    with pytest.raises(RuntimeError):
        Store(tmp_path / "m.db")
    monkeypatch.undo()
    again = Store(tmp_path / "m.db")
    assert again.read_marks(GID) == [(1, stored[1].order)]  # not a table left empty: all unread
    again.close()


def test_a_sender_s_kept_versions_read_their_threads_a_bounded_number_of_times(tmp_path, monkeypatch):
    """Finding a moved reply's answers reads its thread from it on: a member that equivocates again
    and again on replies in a long thread could make every peer read it each time.  Past
    MAX_BRANCH_MOVES a sender's kept versions stay where they were in the threads tables."""
    from m2mc.middleware import store as store_module, wire

    monkeypatch.setattr(store_module, "MAX_BRANCH_MOVES", 2)
    store = Store(tmp_path / "m.db")
    roots = [message(ANN, seqno) for seqno in (1, 2)]
    replies = [message(BOB, seqno, roots[0].mid) for seqno in range(1, 5)]
    store.add_messages(roots + replies)
    store.commit()
    assert store.threads(GID)[0].replies == 4  # written before the versions change
    reads = []
    monkeypatch.setattr(store, "_messages_at", lambda gid, orders, read=store._messages_at: reads.append(orders) or
                        read(gid, orders))
    for reply in replies[:3]:
        store.replace_message(GID, wire.StoredMessage(BOB.pid, reply.mid[1], roots[1].mid, 0, "b", "moved",
                                                      BOB.public_key, b"k" * 66))
        store.commit()
    assert len(reads) == 2
    assert [store.thread_root(GID, reply.mid) for reply in replies] == [roots[1].mid, roots[1].mid, roots[0].mid,
                                                                        roots[0].mid]
    store.close()


def test_the_wal_stays_near_its_limit_under_writes_that_never_pause(tmp_path, monkeypatch):
    # A flood of direct messages commits without a pause: PASSIVE checkpoints alone let the WAL grow
    # to 810 MB in 8 s (issue 41), as they never copy all of it while the writer keeps appending.
    import time

    from m2mc.middleware import store as store_module
    from m2mc.middleware.direct import StoredDirect

    monkeypatch.setattr(store_module, "WAL_LIMIT", 2**20, raising=False)  # (raising: the code before had none)
    store = Store(tmp_path / "m.db")
    wal = tmp_path / "m.db-wal"
    peer, peak, seqno, written = "b" * 32, 0, 0, 0
    began = time.monotonic()
    while written < 12 * store_module.WAL_LIMIT:
        rows = [StoredDirect(peer, peer, seqno + i, None, "Ann", f"w{seqno + i} " + "x" * 2_000, 1, 1, seqno + i,
                             "received", False, b"\x91\x90") for i in range(1, 21)]
        seqno += 20
        written += sum(len(r.text) for r in rows)
        store.save_direct(rows)
        store.commit()
        peak = max(peak, wal.stat().st_size)
    print(f"{seqno} rows, {written / 2**20:.0f} MB of text in {time.monotonic() - began:.1f} s of commits: the WAL peaked at "
          f"{peak / 2**20:.2f} MB (limit {store_module.WAL_LIMIT / 2**20:.0f} MB), {getattr(store, 'wal_truncations', 0)} truncations")
    assert peak <= 2 * store_module.WAL_LIMIT, f"the WAL reached {peak / 2**20:.1f} MB"
    assert store.direct_message(peer, (peer, seqno))  # nothing lost
    store.close()
