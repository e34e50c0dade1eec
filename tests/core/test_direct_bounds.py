"""The direct channel's bounds on what many keys can do together, sans I/O (middleware/direct.py,
middleware/ses.py): the unread messages of all senders together and who gives way first, and SES
stamps whose demands name pids that share no group with the receiver.  The namespace LAN tests of
the same bounds are tests/lan/test_lan_direct_bounds.py."""

from __future__ import annotations

import msgpack
import pytest

from m2mc.middleware import crypto, direct
from m2mc.middleware.direct import DROPPED, DirectCore, StoredDirect, UnreadCounts
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.ses import Ses, SesStamp
from m2mc.middleware.store import Store

NOW = 1_000.0


class Keys:
    """Who a core shares a group with (``keys_of``): members can be added and can leave."""

    def __init__(self, *identities: crypto.Identity) -> None:
        self.current = {i.pid: i for i in identities}

    def __call__(self, pid: str) -> tuple[bytes, bytes] | None:
        i = self.current.get(pid)
        return None if i is None else (i.public_key, i.direct_public)


def core_of(identity: crypto.Identity, keys: Keys) -> DirectCore:
    return DirectCore(identity, keys, lambda peer, mid: None, Ses(identity.pid))


def msg(sender: crypto.Identity, to: crypto.Identity, seqno: int, text: str, stamp: SesStamp) -> bytes:
    """A sealed MSG frame as middleware/direct.py documents it."""
    body = msgpack.packb([1, seqno, None, 1_700_000_000_000, "x", text, stamp.to_wire()], use_bin_type=True)
    return crypto.seal_direct(sender, to.pid, to.direct_public, body)


def send(core: DirectCore, sender: crypto.Identity, seqno: int, text: str | None = None,
         stamp: SesStamp | None = None) -> None:
    stamp = stamp or SesStamp({sender.pid: seqno}, ())
    core.receive(msg(sender, core.identity, seqno, text or f"{sender.pid[:4]} {seqno}", stamp), NOW, NOW)


def unread(core: DirectCore) -> dict[str, int]:
    return {peer: len(c.unread) for peer, c in core.conversations.items() if c.unread}


def dropped(core: DirectCore) -> list[tuple[str, int]]:
    rows, _, _ = core.take_writes()
    return sorted((row.peer, row.seqno) for row in rows if row.status == DROPPED)


# -- the unread messages of all senders together ---------------------------------------------------


def test_unread_counts_know_the_total_and_who_holds_the_most():
    counts = UnreadCounts()
    for peer, count in (("a", 3), ("b", 5), ("c", 5), ("a", 4)):
        counts.set(peer, count)
    assert counts.total == 14 and counts.of("a") == 4 and counts.of("z") == 0
    assert counts.most() in (("b", 5), ("c", 5))
    assert counts.most(other_than="b") == ("c", 5)
    counts.set("b", 0)
    counts.set("c", 1)
    assert counts.most() == ("a", 4) and counts.most(other_than="a") == ("c", 1)
    assert counts.total == 5 and sorted(counts.holders()) == ["a", "c"]
    counts.set("a", 0)
    counts.set("c", 0)
    assert counts.most() is None and counts.total == 0


def test_past_the_total_a_sender_who_left_gives_way_first_then_whoever_holds_the_most(monkeypatch):
    monkeypatch.setattr(direct, "MAX_UNREAD_TOTAL", 10)
    bob, ann, left, s1, s2, s3 = (crypto.Identity.generate() for _ in range(6))
    keys = Keys(ann, left, s1, s2, s3)
    core = core_of(bob, keys)
    for seqno in (1, 2):
        send(core, left, seqno)
    del keys.current[left.pid]  # it left the only group shared with Bob: a stranger now
    for seqno in range(1, 5):
        send(core, s1, seqno)
        send(core, s2, seqno)
    core.committed()
    assert sum(unread(core).values()) == 10
    send(core, s3, 1)
    send(core, s3, 2)
    # The stranger's two went first (its newest first), though two sybils hold more.
    assert dropped(core) == sorted([(left.pid, 1), (left.pid, 2)])
    assert unread(core) == {s1.pid: 4, s2.pid: 4, s3.pid: 2}
    core.committed()
    send(core, s3, 3)  # s3 holds 2, the most is 4: one of the most gives way
    [(victim, seqno)] = dropped(core)
    assert victim in (s1.pid, s2.pid) and seqno == 4  # its newest
    core.committed()
    refused = core.stats["direct_refused_total"]
    send(core, s3, 4)  # s3 holds 3, the most is 4: not two more, so s3's message is refused (and retried)
    assert core.stats["direct_refused_total"] == refused + 1 and unread(core)[s3.pid] == 3
    assert 4 not in core.conversations[s3.pid].received  # not acknowledged: the sender keeps it
    # A member who has sent little gets through: one of those holding the most gives way.
    core.committed()
    send(core, ann, 1, "Ann's real message")
    assert [m.text for e in core.committed() for m in e.messages] == ["Ann's real message"]
    assert sum(unread(core).values()) == 10 and unread(core)[ann.pid] == 1
    assert core.stats["direct_dropped"] == 4


def test_a_flood_from_many_keys_settles_each_at_an_equal_share_and_stops_notifying(monkeypatch):
    monkeypatch.setattr(direct, "MAX_UNREAD_TOTAL", 100)
    bob = crypto.Identity.generate()
    sybils = [crypto.Identity.generate() for _ in range(20)]
    core = core_of(bob, Keys(*sybils))
    shown = 0
    for seqno in range(1, 31):  # each sends 30, in turn: 600 in all
        for sybil in sybils:
            send(core, sybil, seqno)
        shown += sum(len(e.messages) for e in core.committed())
    counts = sorted(unread(core).values())
    print(f"600 messages from 20 keys: {shown} shown, {sum(counts)} unread kept, shares {counts[0]}..{counts[-1]}, "
          f"{core.stats['direct_dropped']} dropped, {core.stats['direct_refused_total']} refused")
    assert sum(counts) == 100 and counts[-1] - counts[0] <= 1
    assert shown <= 100 + core.stats["direct_dropped"] and core.stats["direct_dropped"] <= 20
    quiet = shown
    for sybil in sybils:  # more of the same shows nothing: every one is refused
        send(core, sybil, 31)
    assert sum(len(e.messages) for e in core.committed()) == 0 and quiet == shown


def test_reading_makes_room_and_a_read_message_never_gives_way(monkeypatch):
    monkeypatch.setattr(direct, "MAX_UNREAD_TOTAL", 4)
    bob, ann, mal = (crypto.Identity.generate() for _ in range(3))
    core = core_of(bob, Keys(ann, mal))
    for seqno in range(1, 5):
        send(core, mal, seqno)
    core.mark_read(mal.pid, (mal.pid, 2))
    core.committed()
    send(core, mal, 5)
    send(core, mal, 6)
    assert unread(core) == {mal.pid: 4} and dropped(core) == []
    send(core, mal, 7)  # full again, and nobody holds two more than Mal: refused
    assert core.stats["direct_refused_total"] == 1 and core.stats["direct_dropped"] == 0


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_a_dropped_message_leaves_the_store_and_its_search_index(kind, tmp_path):
    store = Store(tmp_path / "m.db") if kind == "sqlite" else MemoryStore()
    ann = "b" * 32
    rows = [StoredDirect(ann, ann, seqno, None, "Ann", text, 1_700_000_000_000, 1_700_000_000_000, seqno, "received",
                         False, b"\x91\x90") for seqno, text in ((1, "kept words"), (2, "spam words"))]
    store.save_direct(rows)
    store.commit()
    store.save_direct([StoredDirect(ann, ann, 2, None, "", "", 0, 0, 0, DROPPED, False, b"")])
    store.commit()
    assert store.direct_history(ann) == rows[:1] and store.direct_message(ann, (ann, 2)) is None
    assert store.direct_unread(ann, 0) == [(1, 1)]
    if kind == "sqlite":
        assert [h.mid for h in store.search_direct("words")] == [(ann, 1)]
        assert store.search_direct("spam") == []
        store._db.execute("INSERT INTO direct_search (direct_search, rank) VALUES ('integrity-check', 0)")
    store.close()


# -- SES stamps naming pids that share no group with the receiver ----------------------------------


def test_a_stamp_naming_a_made_up_pid_neither_holds_a_message_nor_is_relayed():
    ann, bob, cat, mal = (crypto.Identity.generate() for _ in range(4))
    made_up = crypto.Identity.generate().pid  # in no group: no message of theirs can ever come
    at_ann = core_of(ann, Keys(bob, cat, mal))  # Mal shares a group with Ann only
    at_bob = core_of(bob, Keys(ann, cat))
    # Mal claims Bob must first have made_up's 5th message; Mal's clock claims it too.
    forged = SesStamp({mal.pid: 1, made_up: 5}, ((bob.pid, {made_up: 5}),))
    send(at_ann, mal, 1, "hello Ann", forged)
    assert at_ann.held() == 0
    assert made_up not in at_ann.ses.clock() and at_ann.ses.buffer().get(bob.pid, {}).get(made_up) is None
    stamp = at_ann.ses.stamp(bob.pid)
    assert all(made_up not in vector for _, vector in stamp.buffer) and made_up not in stamp.clock
    # The receiver's own check, whatever the relay did: the forged demand arrives in Ann's stamp.
    relayed = SesStamp({ann.pid: 1, made_up: 5}, ((bob.pid, {made_up: 5}),))
    send(at_bob, ann, 1, "Ann's next message", relayed)
    assert at_bob.held() == 0 and unread(at_bob) == {ann.pid: 1}
    # A demand naming a current member is still honoured: causal order among members holds.
    send(at_bob, ann, 2, "after Cat's", SesStamp({ann.pid: 2, cat.pid: 1}, ((bob.pid, {cat.pid: 1}),)))
    assert at_bob.held() == 1
    send(at_bob, cat, 1, "Cat's", SesStamp({cat.pid: 1}, ()))
    assert at_bob.held() == 0 and [m.text for e in at_bob.committed() for m in e.messages][-2:] == [
        "Cat's", "after Cat's"]


def test_a_demand_naming_a_member_who_left_holds_nothing():
    ann, bob, gone = (crypto.Identity.generate() for _ in range(3))
    keys = Keys(ann, gone)
    at_bob = core_of(bob, keys)
    del keys.current[gone.pid]
    send(at_bob, ann, 1, "no wait", SesStamp({ann.pid: 1, gone.pid: 9}, ((bob.pid, {gone.pid: 9}),)))
    assert at_bob.held() == 0 and unread(at_bob) == {ann.pid: 1}
