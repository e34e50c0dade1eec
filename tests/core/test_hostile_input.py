"""The whole receive path of a GroupManager under hostile and broken input (no sockets opened)."""

import hashlib

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from m2mc.middleware import crypto, wire
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.types import parse_mid
from tests.testbed.arrivals import arriving


@pytest.fixture(scope="module")
def manager(tmp_path_factory):
    # Never started: its sockets stay closed, so everything below is in-process.
    m = GroupManager(Config(tmp_path_factory.mktemp("hostile"), name="Ann", iface="127.0.0.1",
                            zeroconf=False, max_held=1_000))
    m.gid = m.create_group("target")
    yield m
    m.store.close()


def feed(manager, *datagrams, control=False):
    (manager._on_control_datagrams if control else manager._on_data_datagrams)(arriving(datagrams))
    manager.flush()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=5), st.booleans())
def test_random_bytes_never_escape_the_receive_path(manager, datagrams, control):
    before = manager.stats.malformed_dropped
    feed(manager, *datagrams, control=control)
    assert manager.stats.malformed_dropped >= before


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=7),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, max(wire.MsgType)), json_like)
def test_well_framed_garbage_is_dropped_and_counted(manager, type_code, body):
    data = msgpack.packb([wire.VERSION, type_code, MALLORY.pid, MALLORY.public_key, body, None])
    data += MALLORY.sign(data)  # a real member's signature on nonsense
    feed(manager, data)
    feed(manager, data, control=True)
    assert manager.stats_dict()["pending"] <= 1_000


MALLORY = crypto.Identity.generate()
_identities: dict[str, crypto.Identity] = {}


def identity(name):
    return _identities.setdefault(name, crypto.Identity.generate())


def data(gid, sender, seqno, text, parent=None):
    """A well-signed DATA from the identity called ``sender``."""
    who = identity(sender)
    return wire.encode(who, wire.signed_data(who, gid, seqno, parent, 0, "x", text))


def join(manager, name):
    """``name`` joins the group the way a peer does: a signed JOIN on the control channel."""
    who = identity(name)
    feed(manager, wire.encode(who, wire.Join(wire.sign_member(who, manager.gid, name, 1, True))), control=True)


@pytest.fixture(scope="module", autouse=True)
def members(manager):
    for name in ("carol", "dave", "erin"):
        join(manager, name)


def test_messages_for_other_groups_are_dropped(manager):
    before = manager.stats.not_member_dropped
    feed(manager, data("some-other-group", "b" * 32, 1, "hi"))
    assert manager.stats.not_member_dropped == before + 1


def test_a_mid_resent_with_other_content_keeps_the_lowest_hash_whatever_the_order(manager):
    """Equivocation: whichever version came first, the one whose signed bytes hash lowest is kept."""
    versions = ["original", "equivocated replacement"]
    for sender, arrival in (("carol", versions), ("erin", versions[::-1])):
        pid = identity(sender).pid
        kept = min(versions, key=lambda text: hashlib.sha256(
            crypto.message_bytes(manager.gid, pid, 1, None, 0, "x", text)).digest())
        for text in arrival:
            feed(manager, data(manager.gid, sender, 1, text))
        assert [m.text for m in manager.history(manager.gid) if m.mid == (pid, 1)] == [kept]
    assert manager.stats_dict()["conflicts"] == 2
    # A relayed copy with other content but no valid signature is no evidence: not counted.
    carol = identity("carol")
    borrowed = wire.signed_data(carol, manager.gid, 1, None, 0, "x", "original").sig  # well formed, other text
    fake = wire.StoredMessage(carol.pid, 1, None, 0, "x", "forged third version", carol.public_key, borrowed)
    feed(manager, wire.encode(MALLORY, wire.Repair(manager.gid, (fake,))))
    assert manager.stats_dict()["conflicts"] == 2


def test_a_kept_version_naming_its_own_reply_as_parent_starts_a_thread_and_loops_nothing(manager):
    """A member equivocates on a message that has replies: the version kept answers one of them.
    Every peer keeps it, and the threads stay a tree: the message starts a thread of its own."""
    for name in ("grace", "heidi"):
        join(manager, name)
    grace, heidi = identity("grace").pid, identity("heidi").pid
    feed(manager, data(manager.gid, "grace", 1, "a thread"), data(manager.gid, "grace", 2, "first", parent=(grace, 1)),
         data(manager.gid, "heidi", 1, "an answer", parent=(grace, 2)))
    assert manager.thread_root(manager.gid, (heidi, 1)) == (grace, 1)  # the threads tables are written

    def signed_hash(text, parent):
        return hashlib.sha256(crypto.message_bytes(manager.gid, grace, 2, parent, 0, "x", text)).digest()
    original = signed_hash("first", (grace, 1))
    text = next(f"second {i}" for i in range(1000) if signed_hash(f"second {i}", (heidi, 1)) < original)
    feed(manager, data(manager.gid, "grace", 2, text, parent=(heidi, 1)))
    (kept,) = [m for m in manager.history(manager.gid) if m.mid == (grace, 2)]
    assert (kept.text, kept.parent) == (text, (heidi, 1))
    assert manager.thread_root(manager.gid, (grace, 2)) == (grace, 2)
    assert manager.thread_root(manager.gid, (heidi, 1)) == (grace, 2)
    assert [m.mid for m in manager.thread(manager.gid, (grace, 1))] == [(grace, 1)]
    assert [m.mid for m in manager.thread(manager.gid, (grace, 2))] == [(grace, 2), (heidi, 1)]


def test_floods_keep_memory_bounded(manager):
    flood = [data(manager.gid, "dave", seqno, "x", parent=("ghost" + "0" * 27, seqno)) for seqno in range(1, 3001)]
    for start in range(0, len(flood), 500):
        feed(manager, *flood[start:start + 500])
    assert manager.pending(manager.gid) == 1_000
    assert manager.stats_dict()["evicted"] >= 2_000
    channel = manager.channels[manager.gid]
    strangers = manager.stats_dict()["stranger_dropped"]
    many = [data(manager.gid, f"sybil{i}", 1, "x") for i in range(12_000)]
    for start in range(0, len(many), 1000):
        feed(manager, *many[start:start + 1000])
    assert len(channel._state.senders.by_pid) <= 10_000
    assert manager.stats_dict()["stranger_dropped"] == strangers + 12_000  # not members: dropped and counted
    assert len(channel._presence.strangers) <= 1_024 and not channel._loss.naks_due.keys() - {identity("dave").pid}


def test_forged_and_tampered_datagrams_are_dropped_and_counted(manager):
    before = manager.stats_dict()["bad_signature_dropped"]
    honest = data(manager.gid, "erin", 1, "hello there")
    feed(manager, honest.replace(b"hello", b"jello"))
    forged = msgpack.packb([wire.VERSION, 1, identity("erin").pid, MALLORY.public_key,
                            [manager.gid, 2, None, 0, "x", "I am Erin", bytes(64)], None])
    feed(manager, forged)
    assert manager.stats_dict()["bad_signature_dropped"] == before + 2
    assert not any(m.text in ("jello there", "I am Erin") for m in manager.history(manager.gid))


def test_a_replayed_datagram_is_not_delivered_twice(manager):
    datagram = data(manager.gid, "carol", 2, "only once")  # carol is known: past the sender cap too
    for _ in range(3):
        feed(manager, datagram)
    assert [m.text for m in manager.history(manager.gid)].count("only once") == 1


def test_the_peer_still_works_afterwards(manager):
    mid = manager.send(manager.gid, "still here")
    manager.flush()
    assert manager.history(manager.gid)[-1].mid == mid
    assert parse_mid(f"{mid[0]}:{mid[1]}") == mid


@pytest.mark.parametrize("seqno", [str(2**63), "9" * 20, "9" * 5000, "0", "-1", "+1", " 1", "\u0663", "\u00b2", "1.0"])
def test_a_mid_whose_seqno_no_store_can_hold_is_a_value_error(seqno):
    # A ValueError is what the JSON-RPC peer answers as a parameter error (-32602); 2**63 reached
    # the store and came back as an OverflowError, answered as "internal error" (-32000).
    with pytest.raises(ValueError, match="not a message id"):
        parse_mid(f"{'ab' * 16}:{seqno}")
    assert parse_mid(f"{'ab' * 16}:{2**63 - 1}") == ("ab" * 16, 2**63 - 1)
