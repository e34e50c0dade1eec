"""Wire codec: round trips, limits, and hostile bytes that must only ever raise WireError."""

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from middleware import wire
from middleware.wire import (
    Adv, Data, GroupInfo, GroupsInfo, Heartbeat, Join, Leave, Nak, StoredMessage,
    Repair, SyncReq, SyncResp, WireError, decode, encode,
)

PID = "a" * 32
SAMPLES = [
    Data("g1", 1, None, 1_700_000_000_000, "Ann", "hello"),
    Data("g1", 7, ("b" * 32, 3), 1_700_000_000_001, "", "Ünïcødé ✓ reply"),
    Adv("Ann"),
    GroupsInfo((GroupInfo("g1", "Lunch", "239.77.1.2", 5007, False, (("p1", "Ann", 1),), (("p2", "Bob", 3),)),)),
    Join("g1", "Ann", 1),
    Leave("g1", "Ann", 1),
    SyncReq("g1", 2, (("p1", ((1, 10), (12, 40))), ("p2", ()))),
    SyncResp("g1", "p1", 2, 40, (StoredMessage("p2", 11, ("p1", 10), 5, "Bob", "x"),)),
    Repair("g1", (StoredMessage("p2", 12, None, 5, "Bob", "y"),)),
    Nak("g1", "p2", ((3, 5),)),
    Heartbeat((("g1", 40), ("g2", 1))),
]


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(message):
    envelope = decode(encode(PID, message))
    assert envelope.sender == PID
    assert envelope.message == message


def test_limits_are_enforced_on_encode():
    with pytest.raises(WireError, match="text"):
        encode(PID, Data("g", 1, None, 0, "n", "x" * (wire.MAX_TEXT + 1)))
    with pytest.raises(WireError, match="sender"):
        encode("p" * (wire.MAX_ID + 1), Adv("n"))
    with pytest.raises(WireError, match="seqno"):
        encode(PID, Data("g", 0, None, 0, "n", "t"))


def raw(*envelope):
    return msgpack.packb(list(envelope), use_bin_type=True)


@pytest.mark.parametrize(
    "data, complaint",
    [
        (b"", "empty"),
        (b"\xc1", "msgpack"),
        (raw(2, 1, PID, []), "version"),
        (raw(1, 99, PID, []), "unknown message type"),
        (raw(1, 1, PID, ["g", 1, None, 0, "n"]), "6 fields"),
        (raw(1, 1, PID, ["g", "1", None, 0, "n", "t"]), "seqno"),
        (raw(1, 1, PID, ["g", 1, ["p"], 0, "n", "t"]), "parent"),
        (raw(1, 1, 5, ["g", 1, None, 0, "n", "t"]), "sender"),
        (raw(1, 8, PID, ["g", "p", [[5, 3]]]), "ascending"),
        (raw(1, 8, PID, ["g", "p", [[1, 3], [2, 4]]]), "disjoint"),
        (raw(1, 1, PID, ["g", 1, None, 0, "n", "t"]) + b"\x00", "single msgpack"),
        (msgpack.packb({"v": 1}), "msgpack"),
        (b"\x00" * (wire.MAX_DATAGRAM + 1), "exceeds"),
        (raw(1, 1, PID, ["g", 1, None, -5, "n", "t"]), "sent_at"),
        (raw(True, 1, PID, ["g", 1, None, 0, "n", "t"]), "version"),
    ],
)
def test_malformed_datagrams_raise_wire_error(data, complaint):
    with pytest.raises(WireError, match=complaint):
        decode(data)


def test_truncated_datagrams_raise_wire_error():
    data = encode(PID, SAMPLES[3])
    for cut in range(len(data)):
        with pytest.raises(WireError):
            decode(data[:cut])


@settings(max_examples=2000, deadline=None)
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


@settings(max_examples=1500, deadline=None)
@given(st.integers(0, 3), st.integers(-1, 12), json_like, json_like)
def test_structured_garbage_only_ever_raises_wire_error(version, type_code, sender, body):
    try:
        envelope = decode(msgpack.packb([version, type_code, sender, body], use_bin_type=True))
    except WireError:
        return
    # Anything accepted must re-encode to an equal message.
    assert decode(encode(envelope.sender, envelope.message)) == envelope


@pytest.mark.parametrize("pid", ["a" * 32, "short", "p" * 64])
def test_sent_by_recognises_the_sender_without_decoding(pid):
    data = encode(pid, Adv("n"))
    assert wire.sent_by(data, pid.encode())
    assert not wire.sent_by(data, pid[:-1].encode() + b"x")
    assert not wire.sent_by(encode("other", Adv("n")), pid.encode())
