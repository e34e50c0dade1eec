"""Wire codec: round trips, limits, and hostile bytes that must only ever raise WireError."""

import dataclasses

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m2mc.middleware import crypto, wire
from m2mc.middleware.wire import (
    Adv, Data, GroupInfo, GroupsInfo, Heartbeat, Join, Leave, Nak, StoredMessage,
    Repair, SyncReq, SyncResp, WireError, decode, encode,
)

ME = crypto.Identity.generate()
PID = ME.pid
KEY = ME.public_key
SIG = bytes(66)  # a well-formed (if false) proof: signature, index 0, no path
OPEN = wire.sign_descriptor(ME, "Lunch", False, "", 0, 0, bytes(16), b"", "239.255.1.2", 5007, 1_700_000_000_000)
SECRET = wire.sign_descriptor(ME, "Secret", True, crypto.ARGON2ID, 3, 2**28, bytes(range(16)), bytes(16),
                              "239.255.1.3", 5007, 1_700_000_000_000)
ANN_IN = wire.sign_member(ME, OPEN.gid, "Ann", 1, True)
ANN_OUT = wire.sign_member(ME, OPEN.gid, "Ann", 2, False)
SAMPLES = [
    wire.signed_data(ME, "g1", 1, None, 1_700_000_000_000, "Ann", "hello"),
    wire.signed_data(ME, "g1", 7, ("b" * 32, 3), 1_700_000_000_001, "", "Ünïcødé ✓ reply"),
    *wire.sign_burst(ME, [[Data("g1", seqno, ("b" * 32, 3) if seqno % 2 else None, seqno, "Ann", f"m{seqno}", b"")
                           for seqno in range(1, 6)], [Data("g1", 6, None, 6, "Ann", "m6", b"")]]),
    Adv("Ann"),
    Adv("Ann", (OPEN.gid, SECRET.gid)),
    GroupsInfo((GroupInfo(OPEN.gid, OPEN, (ANN_IN,)), GroupInfo(SECRET.gid, SECRET, ()))),
    Join(ANN_IN),
    Leave(ANN_OUT),
    SyncReq("g1", 2, (("p1", ((1, 10), (12, 40))), ("p2", ()))),
    SyncResp("g1", "p1", 2, 40, (StoredMessage("p2", 11, ("p1", 10), 5, "Bob", "x", KEY, SIG),)),
    Repair("g1", (StoredMessage("p2", 12, None, 5, "Bob", "y", KEY, SIG),)),
    Nak("g1", "p2", ((3, 5),)),
    Heartbeat("g1", 40),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message):
    envelope = decode(encode(ME, message))
    assert envelope.sender == PID
    assert envelope.message == message
    assert envelope.public_key == KEY


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_sealed_round_trip_needs_the_key(message):
    if not hasattr(message, "gid"):
        return
    cipher = crypto.GroupCipher(bytes(32))
    data = encode(ME, message, cipher)
    assert decode(data, {message.gid: cipher}.get).message == message
    with pytest.raises(wire.SealedError):
        decode(data)
    with pytest.raises(wire.SealedError):
        decode(data, {message.gid: crypto.GroupCipher(bytes(31) + b"x")}.get)
    if isinstance(message, wire.Data):
        assert message.text.encode() not in data


def test_forged_and_tampered_datagrams_are_refused():
    mallory = crypto.Identity.generate()
    honest = encode(ME, Adv("Ann"))
    # Claiming another pid with one's own key.
    forged = msgpack.packb([wire.VERSION, 2, PID, mallory.public_key, ["Ann"], None])
    with pytest.raises(wire.SignatureError, match="fingerprint"):
        decode(forged + mallory.sign(forged))
    # Another pid's key without its private half: the signature does not verify.
    forged = msgpack.packb([wire.VERSION, 2, PID, KEY, ["Eve"], None])
    with pytest.raises(wire.SignatureError, match="bad signature"):
        decode(forged + mallory.sign(forged))
    # A tampered copy of a real datagram.
    tampered = honest.replace(b"Ann", b"Bob")
    with pytest.raises(wire.SignatureError):
        decode(tampered)
    data = encode(ME, SAMPLES[0]).replace(b"hello", b"jello")
    with pytest.raises(wire.SignatureError, match="DATA"):
        decode(data)


def test_a_batch_travels_under_one_signature_and_each_message_can_be_relayed_alone():
    messages = [Data("g1", seqno, None, 0, "Ann", f"m{seqno}", b"") for seqno in range(1, 12)]
    datagram = encode(ME, wire.sign_burst(ME, [messages])[0])
    batch = decode(datagram).message
    assert [item[0] for item in batch.items] == list(range(1, 12))
    assert {proof[:64] for proof in batch.proofs} == {batch.signature}
    for item, proof in zip(batch.items, batch.proofs):  # what a member relays in a REPAIR later
        seqno, parent, sent_at, name, text = item
        assert wire.verify_stored("g1", StoredMessage(PID, seqno, parent, sent_at, name, text, KEY, proof))
    assert not wire.verify_stored("g1", StoredMessage(PID, 1, None, 0, "Ann", "m1", KEY, batch.proofs[1]))


def test_a_batch_with_any_message_changed_or_dropped_is_rejected():
    burst = wire.sign_burst(ME, [[Data("g1", seqno, None, 0, "Ann", f"m{seqno}", b"") for seqno in range(1, 6)],
                                 [Data("g1", 6, None, 0, "Ann", "m6", b"")]])
    batch = burst[0]
    changed = dataclasses.replace(batch, items=batch.items[:2] + ((3, None, 0, "Ann", "forged"),) + batch.items[3:])
    dropped = dataclasses.replace(batch, items=batch.items[1:])
    other_group = dataclasses.replace(batch, gid="g2")
    other_place = dataclasses.replace(batch, burst_path=burst[1].burst_path)
    other_sibling = dataclasses.replace(batch, burst_path=batch.burst_path[:2] + bytes(32))
    for tampered in (changed, dropped, other_group, other_place, other_sibling):
        with pytest.raises(wire.SignatureError, match="DATA_BATCH"):
            decode(encode(ME, tampered))


def test_a_batch_holds_at_most_max_batch_messages():
    items = [[seqno, None, 0, "Ann", "m"] for seqno in range(1, crypto.MAX_BATCH + 2)]
    with pytest.raises(WireError, match="batch holds"):
        decode(raw(wire.VERSION, int(wire.MsgType.DATA_BATCH), PID, ["g1", items, bytes(64), bytes(2)]))
    with pytest.raises(WireError, match="batch holds"):
        decode(raw(wire.VERSION, int(wire.MsgType.DATA_BATCH), PID, ["g1", [], bytes(64), bytes(2)]))


@pytest.mark.parametrize("path", [b"", b"\x00", bytes(3), b"\x00\x01", b"\x00\x02" + bytes(32), bytes(2 + 4 * 32), "path"])
def test_malformed_burst_paths_raise_only_wire_error(path):
    items = [[1, None, 0, "Ann", "m"]]
    with pytest.raises(WireError, match="burst_path"):
        decode(raw(wire.VERSION, int(wire.MsgType.DATA_BATCH), PID, ["g1", items, bytes(64), path]))


def test_a_burst_is_signed_once_and_each_datagram_still_opens_alone(monkeypatch):
    datagrams = [[Data("g1", 3 * d + i, None, 0, "Ann", f"m{3 * d + i}", b"") for i in range(1, 4)] for d in range(5)]
    burst = wire.sign_burst(ME, datagrams)
    assert len({batch.signature for batch in burst}) == 1
    verified = []
    real_verify = crypto.verify
    monkeypatch.setattr(crypto, "verify", lambda *args: verified.append(args) or real_verify(*args))
    crypto._verified_roots.clear()
    assert [decode(encode(ME, batch)).message.proofs for batch in burst] == [batch.proofs for batch in burst]
    assert len(verified) == 1  # one signature check for the whole burst
    crypto._verified_roots.clear()
    assert decode(encode(ME, burst[3])).message.items == burst[3].items  # the others were lost
    for batch in burst:
        for (seqno, parent, sent_at, name, text), proof in zip(batch.items, batch.proofs):
            assert wire.verify_stored("g1", StoredMessage(PID, seqno, parent, sent_at, name, text, KEY, proof))
    with pytest.raises(ValueError, match="burst holds"):
        wire.sign_burst(ME, datagrams * 2)


def test_a_relayed_proof_with_other_signature_bytes_fails_even_after_its_burst_was_verified():
    batch = wire.sign_burst(ME, [[Data("g1", seqno, None, 0, "Ann", f"m{seqno}", b"") for seqno in range(1, 4)]])[0]
    decode(encode(ME, batch))  # the burst's root is now verified and remembered
    seqno, parent, sent_at, name, text = batch.items[0]
    forged = bytes([batch.proofs[0][0] ^ 1]) + batch.proofs[0][1:]
    assert wire.verify_stored("g1", StoredMessage(PID, seqno, parent, sent_at, name, text, KEY, batch.proofs[0]))
    assert not wire.verify_stored("g1", StoredMessage(PID, seqno, parent, sent_at, name, text, KEY, forged))


@pytest.mark.parametrize("items", [7, None, "text", b"bytes", True, 1.5, [7], [[1, None, 0, "n"]],
                                   [[0, None, 0, "n", "t"]], [[1, ["p", 0], 0, "n", "t"]], [[1, None, -1, "n", "t"]],
                                   [[1, None, 0, "n", "x" * (wire.MAX_TEXT + 1)]]])
def test_malformed_batch_items_raise_only_wire_error(items):
    with pytest.raises(WireError, match="items"):
        decode(raw(wire.VERSION, int(wire.MsgType.DATA_BATCH), PID, ["g1", items, bytes(64), bytes(2)]))


def test_relayed_messages_are_checked_against_their_writer():
    data = SAMPLES[1]
    stored = StoredMessage(PID, data.seqno, data.parent, data.sent_at, data.name, data.text, KEY, data.sig)
    assert wire.verify_stored("g1", stored)
    assert not wire.verify_stored("g2", stored)
    assert not wire.verify_stored("g1", StoredMessage(PID, data.seqno, data.parent, data.sent_at, data.name,
                                                      "changed", KEY, data.sig))


def test_limits_are_enforced_on_encode():
    with pytest.raises(WireError, match="text"):
        encode(ME, Data("g", 1, None, 0, "n", "x" * (wire.MAX_TEXT + 1), SIG))
    with pytest.raises(WireError, match="seqno"):
        encode(ME, Data("g", 0, None, 0, "n", "t", SIG))
    with pytest.raises(WireError, match="desc"):
        wire.sign_descriptor(ME, "d" * 201, False, "", 0, 0, bytes(16), b"", "239.255.1.1", 1, 0)
    with pytest.raises(WireError, match="counter"):
        wire.sign_member(ME, OPEN.gid, "Ann", wire.MAX_MEMBER_COUNTER + 1, True)


def raw(version, type_code, sender, body, key=KEY, sealed=None):
    """A hand-made datagram, signed by ME (so only its content is wrong)."""
    data = msgpack.packb([version, type_code, sender, key, body, sealed], use_bin_type=True)
    return data if type_code in (wire.MsgType.DATA, wire.MsgType.DATA_BATCH) else data + ME.sign(data)


@pytest.mark.parametrize(
    "data, complaint",
    [
        (b"", "empty"),
        (b"\xc1", "msgpack"),
        (raw(99, 1, PID, []), "version"),
        (raw(wire.VERSION, 99, PID, []), "unknown message type"),
        (raw(wire.VERSION, 1, PID, ["g", 1, None, 0, "n", "t"]), "7 fields"),
        (raw(wire.VERSION, 1, PID, ["g", "1", None, 0, "n", "t", SIG]), "seqno"),
        (raw(wire.VERSION, 1, PID, ["g", 1, ["p"], 0, "n", "t", SIG]), "parent"),
        (raw(wire.VERSION, 1, 5, ["g", 1, None, 0, "n", "t", SIG]), "sender"),
        (raw(wire.VERSION, 1, PID, ["g", 1, None, 0, "n", "t", b"short"]), "sig"),
        (raw(wire.VERSION, 8, PID, ["g", "p", [[5, 3]]]), "ascending"),
        (raw(wire.VERSION, 8, PID, ["g", "p", [[1, 3], [2, 4]]]), "disjoint"),
        (raw(wire.VERSION, 1, PID, ["g", 1, None, 0, "n", "t", SIG]) + b"\x00", "unexpected bytes"),
        (raw(wire.VERSION, 2, PID, ["n"])[:-1], "signature"),
        (raw(wire.VERSION, 2, PID, ["n"], key=b"k" * 31), "public_key"),
        (msgpack.packb({"v": 1}), "msgpack"),
        (b"\x00" * (wire.MAX_DATAGRAM + 1), "exceeds"),
        (raw(wire.VERSION, 1, PID, ["g", 1, None, -5, "n", "t", SIG]), "sent_at"),
        (raw(True, 1, PID, ["g", 1, None, 0, "n", "t", SIG]), "version"),
        (raw(wire.VERSION, 1, PID, ["g", 1, None, 0, "n", "t", SIG]), "bad signature"),
    ],
)
def test_malformed_datagrams_raise_wire_error(data, complaint):
    with pytest.raises(WireError, match=complaint):
        decode(data)


def test_truncated_datagrams_raise_wire_error():
    data = encode(ME, SAMPLES[3])
    for cut in range(len(data)):
        with pytest.raises(WireError):
            decode(data[:cut])


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_wire_error(data):
    try:
        decode(data)
    except WireError:
        pass


json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=20)
    | st.binary(max_size=10),
    lambda children: st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 3), st.integers(-1, 12), st.just(PID) | json_like, json_like, st.booleans())
def test_structured_garbage_only_ever_raises_wire_error(version, type_code, sender, body, signed):
    data = msgpack.packb([version, type_code, sender, KEY, body, None], use_bin_type=True)
    try:
        envelope = decode(data + ME.sign(data) if signed else data)
    except WireError:
        return
    # Only a well-formed message from ME can get through, and it re-encodes to an equal one.
    assert envelope.sender == PID
    assert decode(encode(ME, envelope.message)).message == envelope.message


@pytest.mark.parametrize("pid", ["a" * 32, "short", "p" * 64])
def test_sent_by_recognises_the_sender_without_decoding(pid):
    class Named:  # sent_by reads only the sender id
        public_key = KEY

        def __init__(self, pid):
            self.pid = pid

        def sign(self, data):
            return SIG

    data = encode(Named(pid), Adv("n"))
    assert wire.sent_by(data, pid.encode())
    assert not wire.sent_by(data, pid[:-1].encode() + b"x")
    assert not wire.sent_by(encode(Named("other"), Adv("n")), pid.encode())


def test_a_group_address_and_an_endpoint_are_never_equal():
    from m2mc.middleware.addresses import Endpoint, GroupAddress
    assert GroupAddress("239.1.2.3", 47477) != Endpoint("239.1.2.3", 47477)
    assert len({GroupAddress("239.1.2.3", 47477), Endpoint("239.1.2.3", 47477)}) == 2
    assert str(Endpoint("10.0.0.2", 5000)) == "10.0.0.2:5000"
