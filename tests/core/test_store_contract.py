"""The PeerStore contract (middleware/store_api.py), run against both stores: SQLite and memory."""

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.gjlp import GroupRecord
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.store import Store
from m2mc.middleware import kinds
from m2mc.middleware.store_api import PeerStore
from m2mc.middleware.types import ChatMessage
from tests.testbed.stores import after_crash

OP_MARKER = kinds.body(kinds.OPERATION, "")  # how an operation's body opens (middleware.kinds)

ANN, BOB = crypto.Identity.generate(), crypto.Identity.generate()


def group(creator=ANN, desc="lunch") -> GroupRecord:
    descriptor = wire.sign_descriptor(creator, desc, False, "", 0, 0, crypto.new_salt(), b"", "239.255.3.4", 47477,
                                      1_700_000_000_000)
    return GroupRecord.from_descriptor(descriptor.gid, descriptor)


def message(identity, seqno, gid, parent=None, text=None) -> ChatMessage:
    return ChatMessage(gid, (identity.pid, seqno), parent, identity.pid[:6], text or f"message {seqno}",
                       1_700_000_000_000 + seqno, 1_700_000_000_500 + seqno, 0, bytes([seqno % 256]) * 66,
                       identity.public_key)


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    opened: list[PeerStore] = [Store(tmp_path / "m.db") if request.param == "sqlite" else MemoryStore()]
    yield opened
    opened[-1].close()


def test_messages_come_back_in_delivery_order_with_their_keys_and_once(store):
    s = store[0]
    sent = [message(BOB, 2, "g", (ANN.pid, 1)), message(ANN, 1, "g"), message(BOB, 1, "other"),
            message(ANN, 2, "g", (BOB.pid, 2))]
    stored = s.add_messages(sent)
    assert [m.order for m in stored] == [1, 2, 3, 4]
    assert s.add_messages([message(ANN, 1, "g", text="again")]) == []  # one copy per (gid, mid)
    s.commit()
    assert s.history("g") == [stored[0], stored[1], stored[3]] and s.history() == stored
    fetched = s.fetch("g", [(ANN.pid, 2), (BOB.pid, 2), (BOB.pid, 9)])
    assert [(f.sender, f.seqno, f.parent, f.public_key, f.sig) for f in fetched] == [
        (BOB.pid, 2, (ANN.pid, 1), BOB.public_key, sent[0].signature),
        (ANN.pid, 2, (BOB.pid, 2), ANN.public_key, sent[3].signature)]
    assert sorted(s.delivered_mids("g")) == sorted([(ANN.pid, 1), (ANN.pid, 2), (BOB.pid, 2)])
    store.append(after_crash(s))
    assert store[-1].history() == stored
    assert store[-1].add_messages([message(ANN, 3, "g")])[0].order == 5


def test_rollback_drops_every_write_since_the_commit_and_the_same_writes_can_be_tried_again(store):
    s = store[0]
    record = group()
    s.save_group(record)
    s.save_members(record.gid, [wire.sign_member(ANN, record.gid, "Ann", 1, True)])
    first = s.add_messages([message(ANN, 1, record.gid)])
    s.commit()
    s.set_next_seqno(record.gid, 5)
    s.save_members(record.gid, [wire.sign_member(ANN, record.gid, "Ann B", 2, True),
                                wire.sign_member(BOB, record.gid, "Bob", 1, True)])
    s.add_messages([message(ANN, 2, record.gid), message(BOB, 1, record.gid)])
    s.save_conflict(record.gid, first[0] and wire.StoredMessage(ANN.pid, 1, None, 0, "a", "x", b"", b""),
                    wire.StoredMessage(ANN.pid, 1, None, 0, "a", "y", b"", b""))
    s.add_read_marks(record.gid, [(1, 3)])
    s.rollback()
    assert s.history() == first and s.next_seqno(record.gid) == 1 and s.conflicts(record.gid) == []
    assert s.read_marks(record.gid) is None
    ((loaded, next_seqno),) = s.load_groups()
    assert {pid: m.name for pid, m in loaded.members.items()} == {ANN.pid: "Ann"} and next_seqno == 1
    again = s.add_messages([message(ANN, 2, record.gid), message(BOB, 1, record.gid)])
    assert [m.order for m in again] == [2, 3]  # the orders rolled back are used again, none skipped
    s.commit()
    assert s.history() == first + again


def test_a_crash_keeps_what_was_committed_only(store):
    s = store[0]
    record = group()
    s.save_group(record)
    s.set_next_seqno(record.gid, 3)
    s.save_members(record.gid, [wire.sign_member(ANN, record.gid, "Ann", 1, True)])
    kept = s.add_messages([message(ANN, 1, record.gid), message(ANN, 2, record.gid)])
    s.commit()
    s.set_next_seqno(record.gid, 4)
    s.add_messages([message(ANN, 3, record.gid)])
    s = after_crash(s)
    store.append(s)
    assert s.history() == kept and s.next_seqno(record.gid) == 3
    ((loaded, next_seqno),) = s.load_groups()
    assert loaded.gid == record.gid and loaded.descriptor == record.descriptor and next_seqno == 3
    assert set(loaded.members) == {ANN.pid} and loaded.sources == {"local"}


def test_groups_members_seqnos_and_keys(store):
    s = store[0]
    ann_group, bob_group = group(), group(BOB, "tea")
    s.save_group(ann_group)
    s.save_group(ann_group)  # a second save keeps the first
    s.save_group(bob_group)
    s.save_group(GroupRecord("legacy", "old", "239.1.1.1", 1, False, legacy=True))  # nothing new to keep
    s.set_next_seqno("unknown", 9)  # a group not stored is left alone
    s.set_next_seqno(bob_group.gid, 7)
    s.set_group_key(bob_group.gid, b"k" * 32)
    s.save_members(bob_group.gid, [wire.sign_member(BOB, bob_group.gid, "Bob", 1, True)])
    s.save_members(bob_group.gid, [wire.sign_member(BOB, bob_group.gid, "Bobby", 2, True)])
    s.commit()
    loaded = {record.gid: (record, next_seqno) for record, next_seqno in after_crash(s).load_groups()}
    store.append(s := after_crash(s))
    assert set(loaded) == {ann_group.gid, bob_group.gid}
    assert loaded[bob_group.gid][1] == 7 and loaded[ann_group.gid][1] == 1
    assert {pid: (m.name, m.counter) for pid, m in loaded[bob_group.gid][0].members.items()} == {BOB.pid: ("Bobby", 2)}
    assert s.group_key(bob_group.gid) == b"k" * 32 and s.group_key(ann_group.gid) is None
    assert s.next_seqno("unknown") == 1


def test_identity_and_name_are_kept_at_once(store):
    s = store[0]
    identity = s.identity()
    s.set_name("Ann")
    s = after_crash(s)
    store.append(s)
    assert s.identity().pid == identity.pid and s.name() == "Ann"


def test_equivocations_and_replaced_versions(store):
    s = store[0]
    stored = s.add_messages([message(ANN, 1, "g"), message(BOB, 1, "g", (ANN.pid, 1))])
    kept = wire.StoredMessage(BOB.pid, 1, None, 5, "Bob", "kept", BOB.public_key, b"s" * 66)
    other = wire.StoredMessage(BOB.pid, 1, (ANN.pid, 1), 6, "Bob", "other", BOB.public_key, b"t" * 66)
    s.save_conflict("g", kept, other)
    s.save_conflict("g", wire.StoredMessage(ANN.pid, 1, None, 1, "a", "x", b"", b""), other)
    assert s.replace_message("g", kept)
    assert not s.replace_message("g", wire.StoredMessage(BOB.pid, 9, None, 5, "Bob", "none", b"", b""))
    s.commit()
    assert [k.sender for k, _ in s.conflicts("g")] == sorted([ANN.pid, BOB.pid]) and s.conflicts("other") == []
    (replaced,) = [m for m in s.history("g") if m.mid == (BOB.pid, 1)]
    assert (replaced.text, replaced.parent, replaced.sent_at, replaced.signature) == ("kept", None, 5, b"s" * 66)
    assert (replaced.order, replaced.received_at) == (stored[1].order, stored[1].received_at)  # same place


def test_read_marks_merge_refuse_bad_ranges_and_stay_bounded(store):
    s = store[0]
    assert s.read_marks("g") is None
    s.add_read_marks("g", [(1, 5), (9, 9)])
    s.add_read_marks("g", [(6, 7)])
    s.commit()
    assert s.read_marks("g") == [(1, 7), (9, 9)]
    with pytest.raises(ValueError):
        s.add_read_marks("g", [(5, 1)])
    s.MAX_READ_RANGES = 50  # type: ignore[misc]
    s.add_read_marks("h", [(2 * i, 2 * i) for i in range(200)])
    marks = s.read_marks("h")
    assert len(marks) <= 50 and marks[-1] == (398, 398) and marks[0][0] == 0


def test_messages_by_mid_keep_their_arrival_and_delivery_order(store):
    s = store[0]
    stored = s.add_messages([message(ANN, seqno, "g") for seqno in range(1, 40)] + [message(BOB, 1, "other")])
    s.commit()
    wanted = [(ANN.pid, 30), (ANN.pid, 2), (BOB.pid, 1), (ANN.pid, 99)]
    got = s.messages("g", wanted)
    assert [(m.mid, m.received_at, m.order) for m in got] == [
        (m.mid, m.received_at, m.order) for m in stored if m.gid == "g" and m.mid in wanted]
    assert all(m.public_key == ANN.public_key for m in got)


def test_a_peer_cache_keeps_the_newest_rows_up_to_its_cap(store):
    from m2mc.middleware.addresses import Endpoint
    from m2mc.middleware.store_api import MAX_CACHED_PEERS

    s = store[0]
    for i in range(MAX_CACHED_PEERS + 10):
        s.cache_peer(f"peer{i}", Endpoint("10.0.0.1", 1000 + i), 1_800_000_000.0 + i)
    s.cache_peer("peer0", Endpoint("10.0.0.2", 47477), 1_900_000_000.0)  # seen again, elsewhere
    s.commit()
    cached = s.cached_peers()
    assert len(cached) == MAX_CACHED_PEERS
    assert cached[0] == ("peer0", Endpoint("10.0.0.2", 47477), 1_900_000_000.0)
    assert {pid for pid, _, _ in cached} == {"peer0", *(f"peer{i}" for i in range(11, MAX_CACHED_PEERS + 10))}


def test_mentions_of_a_pid_come_newest_first_operations_left_out_and_survive_a_crash(store):
    from m2mc.middleware.chatops import encode
    from m2mc.middleware.mentions import token

    s = store[0]
    about_bob = [message(ANN, 1, "g", text=f"hi {token(BOB.pid)}"), message(ANN, 2, "g", text="no one"),
                 message(ANN, 3, "h", text=f"{token(BOB.pid)} again"),
                 message(ANN, 4, "g", text=encode("edit", None, 1, f"{token(BOB.pid)}"))]
    stored = s.add_messages(about_bob)
    s.commit()
    assert [m.mid for m in s.mentions(BOB.pid, 10)] == [(ANN.pid, 3), (ANN.pid, 1)]
    assert s.mentions(BOB.pid, 1) == [stored[2]] and s.mentions(ANN.pid, 10) == []
    s.add_messages([message(ANN, 5, "g", text=token(BOB.pid))])  # not committed
    store.append(after_crash(s))
    assert [m.mid for m in store[-1].mentions(BOB.pid, 10)] == [(ANN.pid, 3), (ANN.pid, 1)]


def test_search_and_mentions_leave_out_a_removed_members_messages_past_its_cut(store):
    """Cuts are per group: Ann removed from "g" after her seqno 2 keeps 1 and 2 there, and all in "h"."""
    from m2mc.middleware.mentions import token

    s = store[0]
    s.add_messages([message(ANN, seqno, gid, text=f"zebra {seqno} {token(BOB.pid)}")
                    for gid in ("g", "h") for seqno in (1, 2, 3, 4)] + [message(BOB, 1, "g", text="zebra bob")])
    s.commit()
    cuts = {"g": {ANN.pid: 2}}
    kept = [("g", (ANN.pid, 1)), ("g", (ANN.pid, 2)), ("g", (BOB.pid, 1))] + [("h", (ANN.pid, n)) for n in (1, 2, 3, 4)]
    assert sorted((h.gid, h.mid) for h in s.search("zebra", cuts=cuts, limit=20)) == sorted(kept)
    assert len(s.search("zebra", limit=20)) == 9  # without cuts, every one
    newest = s.search("zebra", gid="g", cuts=cuts, by_time=True, limit=2)
    assert [h.mid for h in newest] == [(BOB.pid, 1), (ANN.pid, 2)]  # the limit counts what is found
    assert [h.mid for h in s.search("zebra", gid="g", sender=ANN.pid, cuts=cuts, offset=1)] == [(ANN.pid, 1)]
    assert [(m.gid, m.mid) for m in s.mentions(BOB.pid, 3, cuts)] == [("h", (ANN.pid, n)) for n in (4, 3, 2)]
    assert [(m.gid, m.mid) for m in s.mentions(BOB.pid, 10, cuts)] == [
        ("h", (ANN.pid, n)) for n in (4, 3, 2, 1)] + [("g", (ANN.pid, n)) for n in (2, 1)]


def test_threads_are_read_by_root_counted_and_listed_by_activity_operations_left_out(store):
    s = store[0]
    a1, b1 = message(ANN, 1, "g"), message(BOB, 1, "g")
    replies = [message(BOB, 2, "g", a1.mid), message(ANN, 2, "other"), message(ANN, 3, "g", (BOB.pid, 2)),
               message(BOB, 3, "g", b1.mid), message(BOB, 4, "g", text=f"{OP_MARKER}op")]
    s.add_messages([a1, b1])
    s.add_messages(replies[:2])
    s.commit()
    s.add_messages(replies[2:])  # a reply whose parent came in another flush
    s.commit()
    mids = lambda found: [m.mid for m in found]  # noqa: E731
    assert mids(s.thread("g", a1.mid)) == [a1.mid, (BOB.pid, 2), (ANN.pid, 3)]
    assert mids(s.thread("g", (BOB.pid, 2))) == [(BOB.pid, 2), (ANN.pid, 3)]  # a branch: its answers only
    assert s.thread("g", (ANN.pid, 9)) == [] and s.thread("other", a1.mid) == []
    assert s.thread_root("g", (ANN.pid, 3)) == a1.mid and s.thread_root("g", b1.mid) == b1.mid
    assert s.thread_root("g", (ANN.pid, 9)) is None
    listed = s.threads("g")
    assert [(t.root.mid, t.replies, t.last.mid) for t in listed] == [
        (b1.mid, 1, (BOB.pid, 3)), (a1.mid, 2, (ANN.pid, 3))]
    assert [t.root.mid for t in s.threads("g", before=listed[0].last.order, limit=5)] == [a1.mid]
    assert [t.root.mid for t in s.threads("g", limit=1)] == [b1.mid]
    store.append(after_crash(s))
    assert mids(store[-1].thread("g", a1.mid)) == [a1.mid, (BOB.pid, 2), (ANN.pid, 3)]
    assert store[-1].add_messages([message(BOB, 5, "g", (ANN.pid, 3))])  # its root found after a restart
    assert [(t.root.mid, t.replies) for t in store[-1].threads("g", limit=1)] == [(a1.mid, 3)]


def test_unread_before_equals_a_plain_count_with_groups_interleaved_and_read_marks_in_pieces(store):
    import random
    rng = random.Random(5)
    s = store[0]
    seqnos = {"g": 0, "other": 0}
    for _ in range(300):  # flushes of 1-4 messages, the two groups taking turns at random
        batch = []
        for _ in range(rng.randint(1, 4)):
            gid = rng.choice(["g", "other"])
            seqnos[gid] += 1
            batch.append(message(ANN, seqnos[gid], gid))
        s.add_messages(batch)
        s.commit()
    orders = [m.order for m in s.history("g")]
    read = sorted(rng.sample(orders, len(orders) // 2))
    s.add_read_marks("g", [(order, order) for order in read])  # one range each, as a reader of both groups leaves them
    s.commit()
    for below in [1, *rng.sample(range(1, max(orders) + 2), 20), max(orders) + 1]:
        assert s.unread_before("g", below) == sum(1 for o in orders if o < below and o not in set(read))


def test_unread_before_counts_what_the_read_marks_leave_out_below_an_order(store):
    s = store[0]
    stored = s.add_messages([message(ANN, n, "g") for n in range(1, 6)] + [message(BOB, 1, "other")]
                            + [message(BOB, n, "g") for n in range(2, 6)])  # orders 1-5, 6 elsewhere, 7-10
    s.commit()
    assert [m.order for m in stored][-1] == 10
    assert s.unread_before("g", 11) == 9 and s.unread_before("g", 4) == 3
    s.add_read_marks("g", [(1, 2), (5, 8)])
    s.commit()
    assert s.unread_before("g", 11) == 4  # 3, 4, 9, 10
    assert s.unread_before("g", 9) == 2 and s.unread_before("g", 1) == 0 and s.unread_before("other", 11) == 1


def threads_by_replay(history: list[ChatMessage]) -> dict:
    """Each message's thread root from the history alone: a reply belongs to its parent's thread when
    the parent was delivered before it (S_b order), else it starts a thread (a kept version of an
    equivocation may name a later message, even its own reply or itself, as its parent).  An
    operation is in no thread; a reply to one is filed under it, so in no thread listed either."""
    root: dict = {}
    for m in history:
        chat = not m.text.startswith(OP_MARKER)
        root[m.mid] = root.get(m.parent, m.mid) if m.parent is not None and chat else m.mid
    return root


def assert_threads_agree_with_the_history(s, gid: str) -> None:
    everything = s.history(gid)
    root = threads_by_replay(everything)
    history = [m for m in everything if not m.text.startswith(OP_MARKER)]
    chat = {m.mid for m in history}
    assert {m.mid: s.thread_root(gid, m.mid) for m in history} == {m.mid: root[m.mid] for m in history}
    expected = []
    for top in dict.fromkeys(root[m.mid] for m in history if root[m.mid] in chat):
        members = [m for m in history if root[m.mid] == top]
        assert [m.mid for m in s.thread(gid, top)] == [m.mid for m in members]
        expected.append((top, len(members) - 1, members[-1].mid))
    expected.sort(key=lambda t: [m.order for m in history if m.mid == t[2]][0], reverse=True)
    assert [(t.root.mid, t.replies, t.last.mid) for t in s.threads(gid, limit=100)] == expected


def test_threads_follow_a_kept_version_that_moves_a_reply_makes_a_root_or_names_a_later_parent(store):
    s = store[0]
    a1, b1 = message(ANN, 1, "g"), message(BOB, 1, "g")
    m, c, d = message(BOB, 2, "g", a1.mid), message(ANN, 2, "g", (BOB.pid, 2)), message(ANN, 3, "g", (ANN.pid, 2))
    s.add_messages([a1, b1, m, c, d])
    s.commit()
    assert_threads_agree_with_the_history(s, "g")  # the threads tables are written before the versions change

    def keep(sender, seqno, parent, text=None):
        version = wire.StoredMessage(sender.pid, seqno, parent, 5, "x", text or f"kept {parent}", sender.public_key,
                                     b"k" * 66)
        assert s.replace_message("g", version)
        s.commit()
        assert_threads_agree_with_the_history(s, "g")

    keep(BOB, 2, d.mid)  # its parent is its own later answer: a thread of its own, no loop
    assert s.thread_root("g", d.mid) == m.mid
    keep(BOB, 2, m.mid)  # its parent is itself
    keep(BOB, 2, a1.mid)  # back where it was
    keep(BOB, 2, b1.mid)  # the reply and its answers move to b1's thread
    assert [t.replies for t in s.threads("g") if t.root.mid == b1.mid] == [3]
    keep(BOB, 2, None)  # it starts a thread of its own
    keep(BOB, 1, a1.mid)  # a root becomes a reply: its thread joins a1's
    keep(ANN, 1, b1.mid)  # a root naming a later message stays a root
    keep(ANN, 2, m.mid, f"{OP_MARKER}an operation")  # a reply that is an operation in the version kept
    keep(ANN, 2, a1.mid, f"{OP_MARKER}another")  # an operation with another parent: in no thread still
    keep(ANN, 2, b1.mid)  # a chat message again, under another thread
    keep(BOB, 1, None, f"{OP_MARKER}op")  # a thread's root becomes an operation
    keep(BOB, 1, None)  # and a root again
    store.append(after_crash(s))
    assert_threads_agree_with_the_history(store[-1], "g")
    assert store[-1].add_messages([message(BOB, 5, "g", d.mid)])
    store[-1].commit()
    assert_threads_agree_with_the_history(store[-1], "g")
    if isinstance(store[-1], Store):  # tables built again from every message, in delivery order
        store[-1].commit()
        store[-1]._build_threads()
        assert_threads_agree_with_the_history(store[-1], "g")


def test_file_offers_of_a_group_in_delivery_order_kept_across_a_crash_and_a_replaced_version(store):
    FILE_MARKER = kinds.body(kinds.FILE_OFFER, "")
    s = store[0]
    offer = lambda identity, seqno, gid: message(identity, seqno, gid, text=f"{FILE_MARKER}{{}} {seqno}")  # noqa: E731
    s.add_messages([offer(ANN, 1, "g"), message(ANN, 2, "g"), offer(BOB, 1, "other"), offer(BOB, 2, "g"),
                    message(BOB, 3, "g", text=f"{OP_MARKER}op")])
    s.commit()
    assert [m.mid for m in s.file_offers("g")] == [(ANN.pid, 1), (BOB.pid, 2)]
    assert [m.mid for m in s.file_offers("other")] == [(BOB.pid, 1)] and s.file_offers("none") == []
    # A kept version of an equivocation that is no offer, and one that is.
    assert s.replace_message("g", wire.StoredMessage(ANN.pid, 1, None, 5, "a", "plain", ANN.public_key, b"k" * 66))
    assert s.replace_message("g", wire.StoredMessage(ANN.pid, 2, None, 5, "a", f"{FILE_MARKER}{{}}", ANN.public_key,
                                                     b"k" * 66))
    s.commit()
    assert [m.mid for m in s.file_offers("g")] == [(ANN.pid, 2), (BOB.pid, 2)]
    store.append(after_crash(s))
    assert [m.mid for m in store[-1].file_offers("g")] == [(ANN.pid, 2), (BOB.pid, 2)]
    if isinstance(store[-1], Store):  # a data dir from before the table gets it on open
        store[-1]._db.execute("DROP TABLE message_kinds")
        store[-1].commit()
        path = store[-1].path
        store[-1]._checkpointer.stop()
        store[-1]._db.close()

        dying = []

        def crash_while_reading(self, *args):
            dying.append(self)
            raise KeyboardInterrupt  # the process dies while the table's rows are being found

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Store, "_segments", crash_while_reading)
            with pytest.raises(KeyboardInterrupt):
                Store(path)
        dying[0]._checkpointer.stop()
        dying[0]._db.close()  # what the process's death does: its transaction is gone
        store.append(Store(path))  # not left empty: built again
        assert [m.mid for m in store[-1].file_offers("g")] == [(ANN.pid, 2), (BOB.pid, 2)]
        assert [m.mid for m in store[-1].of_kind("g", kinds.OPERATION)] == [(BOB.pid, 3)]
