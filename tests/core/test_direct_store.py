"""The direct-message part of the PeerStore contract (middleware/store_api.py), against both stores."""

import pytest

from m2mc.middleware.direct import StoredDirect
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.store import Store
from m2mc.middleware.store_api import PeerStore
from tests.testbed.stores import after_crash

ME, ANN, BOB = "a" * 32, "b" * 32, "c" * 32


def row(peer, sender, seqno, order, status, parent=None, text=None) -> StoredDirect:
    return StoredDirect(peer, sender, seqno, parent, sender[:3], text or f"{sender[:1]}{seqno}", 1_700_000_000_000,
                        1_700_000_000_500 + seqno, order, status, False, b"\x91\x90")


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    opened: list[PeerStore] = [Store(tmp_path / "m.db") if request.param == "sqlite" else MemoryStore()]
    yield opened
    opened[-1].close()


def test_messages_by_conversation_in_order_with_before_and_limit(store):
    s = store[0]
    rows = [row(ANN, ME, 1, 1, "delivered"), row(ANN, ANN, 1, 2, "received", parent=(ME, 1)),
            row(ANN, ANN, 2, 0, "held"), row(BOB, ME, 1, 1, "queued"), row(ANN, ME, 2, 3, "sent")]
    s.save_direct(rows)
    s.commit()
    assert s.direct_history(ANN) == [rows[0], rows[1], rows[4]]  # held ones are not shown
    assert s.direct_history(ANN, before=3) == [rows[0], rows[1]]
    assert s.direct_history(ANN, limit=2) == [rows[1], rows[4]]
    assert s.direct_history(ANN, before=3, limit=1) == [rows[1]]
    assert s.direct_history(ANN, limit=0) == []
    assert s.direct_history("d" * 32) == []
    assert s.direct_unsettled() == [rows[3], rows[4], rows[2]]  # by arrival: held ones are fed to SES so
    assert s.direct_unread(ANN, 0) == [(2, 1)] and s.direct_unread(ANN, 2) == []
    assert s.direct_message(ANN, (ANN, 1)) == rows[1] and s.direct_message(BOB, (ANN, 1)) is None
    settled = rows[4]._replace(status="delivered")
    s.save_direct([settled])  # a new version replaces the old
    s.commit()
    assert s.direct_history(ANN)[-1] == settled and settled not in s.direct_unsettled()


def test_conversations_settings_rollback_and_crash(store):
    s = store[0]
    s.save_direct([row(ANN, ME, 1, 1, "queued")])
    s.save_direct_conversation(ANN, b"state 1")
    s.set_direct_setting("ses", b"clock 1")
    s.commit()
    s.save_direct([row(ANN, ME, 1, 1, "sent"), row(ANN, ME, 2, 2, "queued")])
    s.save_direct_conversation(ANN, b"state 2")
    s.save_direct_conversation(BOB, b"state 3")
    s.set_direct_setting("ses", b"clock 2")
    s.rollback()
    assert s.direct_history(ANN) == [row(ANN, ME, 1, 1, "queued")]
    assert s.direct_conversations() == {ANN: b"state 1"} and s.direct_setting("ses") == b"clock 1"
    s.save_direct([row(ANN, ME, 2, 2, "queued")])
    s.set_direct_setting("receipts", b"0")
    store.append(after_crash(s))
    s = store[-1]
    assert s.direct_history(ANN) == [row(ANN, ME, 1, 1, "queued")]
    assert s.direct_setting("receipts") is None


def test_a_loop_of_parents_named_by_a_peer_ends_the_walk_to_a_thread_s_first_message(store):
    """Search results name each hit's thread: a peer that sends two messages answering each other
    must not make that walk go round (before: 100,000 store reads for each such hit)."""
    from types import SimpleNamespace

    from m2mc.middleware.peer_core import PeerCore

    s = store[0]
    s.save_direct([row(ANN, ANN, 1, 1, "received", parent=(ANN, 2)), row(ANN, ANN, 2, 2, "received", parent=(ANN, 1)),
                   row(ANN, ANN, 3, 3, "received", parent=(ANN, 2))])
    s.commit()
    reads = []
    counting = SimpleNamespace(direct_message=lambda peer, mid: reads.append(mid) or s.direct_message(peer, mid))
    assert PeerCore._direct_root(SimpleNamespace(store=counting), ANN, (ANN, 3)) == (ANN, 1)  # shown first
    assert len(reads) <= 4
