"""The relay tree's datagrams on the wire (RELAY, IHAVE, GRAFT, PRUNE: wire.encode_relay and
parse_relay) and their authentication (middleware/relay_link.py): a pairwise key per two members,
a stamp that refuses replays, bounds on what one datagram names, and their real sizes."""

from __future__ import annotations

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.relay_link import GroupRelay

GID = "abcdefghijklmnopqrstuvwxyz"
ANN, BOB, EVE = (crypto.Identity.generate() for _ in range(3))


def key(a: crypto.Identity, b: crypto.Identity) -> bytes:
    k = a.relay_key(GID, b.pid, b.direct_public)
    assert k is not None
    return k


def test_the_four_types_have_the_numbers_agreed_and_no_envelope_can_be_taken_for_one():
    assert (wire.MsgType.RELAY, wire.MsgType.IHAVE, wire.MsgType.GRAFT, wire.MsgType.PRUNE) == (19, 20, 21, 22)
    envelope = wire.encode(ANN, wire.Adv("ann"))
    assert not wire.is_relay(envelope) and not wire.is_relay(wire.encode_direct(b"x" * 40))
    with pytest.raises(wire.WireError):
        wire.decode(wire.encode_relay(key(ANN, BOB), wire.MsgType.IHAVE, ANN.pid, GID, 1))


def test_both_members_derive_the_same_pairwise_key_and_a_third_or_another_group_does_not():
    assert key(ANN, BOB) == key(BOB, ANN)
    assert key(ANN, EVE) != key(ANN, BOB)
    assert ANN.relay_key("othergroup", BOB.pid, BOB.direct_public) != key(ANN, BOB)
    assert ANN.relay_key(GID, BOB.pid, bytes(32)) is None  # a low-order point gives no key
    assert ANN.relay_key(GID, BOB.pid, b"short") is None


@pytest.mark.parametrize("kind, fields", [
    (wire.MsgType.IHAVE, {"ranges": ((bytes(6), 1, 1), (b"abcdef", 7, 300), (b"zzzzzz", 2**40, 2**40 + 5))}),
    (wire.MsgType.GRAFT, {"ranges": ((b"abcdef", 9, 9),)}),
    (wire.MsgType.PRUNE, {"writers": (b"abcdef", b"ghijkl")}),
    (wire.MsgType.RELAY, {"ranges": ((b"abcdef", 3, 4),), "inner": b"\x94some writer's datagram"}),
    (wire.MsgType.RELAY, {"inner": b"x"}),
])
def test_each_type_round_trips_and_its_tag_checks_out_only_under_the_pair_key(kind, fields):
    data = wire.encode_relay(key(ANN, BOB), kind, ANN.pid, GID, 12345, **fields)
    parsed = wire.parse_relay(data)
    assert (parsed.type, parsed.sender, parsed.group_tag, parsed.stamp) == (kind, ANN.pid, wire.relay_group_tag(GID), 12345)
    assert parsed.ranges == fields.get("ranges", ())
    assert parsed.writers == fields.get("writers", ())
    assert parsed.inner == fields.get("inner", b"")
    assert wire.relay_authentic(data, key(BOB, ANN))
    assert not wire.relay_authentic(data, key(BOB, EVE))
    for at in (1, 5, len(data) // 2, len(data) - 1):  # any byte changed: refused
        tampered = bytearray(data)
        tampered[at] ^= 1
        assert not wire.relay_authentic(bytes(tampered), key(BOB, ANN))


def test_control_is_cheap_a_header_of_44_bytes_and_about_10_a_range():
    k = key(ANN, BOB)
    empty = wire.encode_relay(k, wire.MsgType.IHAVE, ANN.pid, GID, 2**47)
    assert len(empty) == wire.RELAY_OVERHEAD + 1 == 45
    ref = wire.writer_ref(BOB.pid)
    ten = wire.encode_relay(k, wire.MsgType.IHAVE, ANN.pid, GID, 2**47, ranges=((ref, 1000, 1003),) * 10)
    assert (len(ten) - len(empty)) / 10 == 9  # 6-byte ref, a 2-byte seqno, a 1-byte count
    assert len(wire.encode_relay(k, wire.MsgType.PRUNE, ANN.pid, GID, 1, writers=(ref,))) == 51


@pytest.mark.parametrize("bad", [
    b"", b"\xc1", b"\xc1\x13" + bytes(40),  # too short
    b"\xc1\x08" + bytes(60),  # a type that is not the relay tree's
    b"\xc1\x14" + bytes(26) + b"\x85\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80" + bytes(16),  # an overlong varint
    b"\xc1\x14" + bytes(26) + b"\x80\x04" + bytes(16),  # 512 ranges
    b"\xc1\x14" + bytes(26) + b"\x01abc" + bytes(16),  # a truncated range
    b"\xc1\x14" + bytes(26) + b"\x01abcdef\x00\x00" + bytes(16),  # seqno 0
    b"\xc1\x14" + bytes(26) + b"\x00extra" + bytes(16),  # an IHAVE carrying a datagram
    b"\xc1\x13" + bytes(26) + b"\x00" + bytes(16),  # a RELAY carrying none
    b"\xc1\x16" + bytes(26) + b"\x02abcdef" + bytes(16),  # a PRUNE naming 2 writers, holding 1
])
def test_malformed_relay_datagrams_raise_wire_error_only(bad):
    with pytest.raises(wire.WireError):
        wire.parse_relay(bad)


def test_what_would_be_refused_is_never_made():
    k = key(ANN, BOB)
    with pytest.raises(wire.WireError):
        wire.encode_relay(k, wire.MsgType.IHAVE, ANN.pid, GID, 1, ranges=((b"abcdef", 1, 1),) * 257)
    with pytest.raises(wire.WireError):
        wire.encode_relay(k, wire.MsgType.IHAVE, ANN.pid, GID, 1, ranges=((b"abcdef", 0, 1),))
    with pytest.raises(wire.WireError):
        wire.encode_relay(k, wire.MsgType.NAK, ANN.pid, GID, 1)
    with pytest.raises(wire.WireError):
        wire.encode_relay(k, wire.MsgType.IHAVE, "not-a-pid", GID, 1)
    with pytest.raises(wire.WireError):
        wire.encode_relay(k, wire.MsgType.IHAVE, ANN.pid, GID, 2**48)
    with pytest.raises(wire.WireError):
        wire.encode_relay(k, wire.MsgType.GRAFT, ANN.pid, GID, 1, inner=b"x")


def relay_at(me: crypto.Identity, *members: crypto.Identity) -> GroupRelay:
    relay = GroupRelay(me, GID)
    relay.set_members([m.pid for m in members], 0.0)
    return relay


def test_a_strangers_control_is_refused_and_so_is_a_members_replay():
    bob = relay_at(BOB, ANN)
    fresh = wire.encode_relay(key(ANN, BOB), wire.MsgType.IHAVE, ANN.pid, GID, 1_000)
    assert bob.accept(wire.parse_relay(fresh), fresh, ANN.direct_public)
    assert not bob.accept(wire.parse_relay(fresh), fresh, ANN.direct_public), "a replay"
    # Eve is no member Bob relays with: her datagram is refused, whatever key she tags it with
    eves = wire.encode_relay(key(EVE, BOB), wire.MsgType.GRAFT, EVE.pid, GID, 2_000, ranges=((b"abcdef", 1, 9),))
    assert not bob.accept(wire.parse_relay(eves), eves, EVE.direct_public)
    # Eve forging Ann's datagram without Ann's key: refused
    forged = wire.encode_relay(key(EVE, BOB), wire.MsgType.PRUNE, ANN.pid, GID, 3_000, writers=(b"abcdef",))
    assert not bob.accept(wire.parse_relay(forged), forged, ANN.direct_public)
    assert bob.stats["relay_unauthentic_dropped"] == 2 and bob.stats["relay_replays_refused"] == 1


def test_stamps_reordered_within_the_window_are_taken_once_and_older_ones_never():
    bob = relay_at(BOB, ANN)
    k = key(ANN, BOB)

    def take(stamp: int) -> bool:
        data = wire.encode_relay(k, wire.MsgType.IHAVE, ANN.pid, GID, stamp)
        return bob.accept(wire.parse_relay(data), data, ANN.direct_public)

    assert take(100) and take(90) and not take(90) and take(101) and take(99)
    assert not take(100 - 64) and not take(5)


def test_the_simulators_control_sizes_are_the_wires():
    from m2mc.app.bench import relay as bench
    from m2mc.middleware.relay import IHave, Prune

    k = key(ANN, BOB)
    writers = [ANN.pid, BOB.pid, EVE.pid]
    ranges = ((ANN.pid, 1, 1), (BOB.pid, 3, 9), (EVE.pid, 200, 200))
    on_wire = tuple((wire.writer_ref(w), first + bench.SEQNO_BASE, last + bench.SEQNO_BASE) for w, first, last in ranges)
    assert bench.control_size(IHave(ranges)) == len(
        wire.encode_relay(k, wire.MsgType.IHAVE, ANN.pid, GID, 2**45, ranges=on_wire))
    assert bench.control_size(Prune(tuple(writers))) == len(
        wire.encode_relay(k, wire.MsgType.PRUNE, ANN.pid, GID, 2**45, writers=tuple(map(wire.writer_ref, writers))))
