"""Direct-message crypto: the X25519 key in signed member records, and sealing for one recipient.

Sealed messages open only for their recipient, only from a known sender's signature, and
show an onlooker neither party nor the text; their sizes leak only a bucket; records made
before direct-message keys stay valid, and a peer re-signs its own at start."""

import os
import random

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m2mc.middleware import crypto, gjlp, wire
from m2mc.middleware.crypto import DIRECT_BUCKETS, MAX_DIRECT_BODY, open_direct, seal_direct
from m2mc.middleware.gjlp import Gjlp
from m2mc.middleware.manager import Config, GroupManager

ANN, BOB, EVE = (crypto.Identity.generate() for _ in range(3))
KEYS = {i.pid: (i.public_key, i.direct_public) for i in (ANN, BOB, EVE)}


def old_record(identity, gid, name, counter, joined=True):
    """A member record as peers signed it before direct-message keys: 7 fields, no ``dh``."""
    unsigned = wire.MemberRecord(gid, identity.public_key, name, counter, joined, b"", bytes(64))
    return wire.MemberRecord(gid, identity.public_key, name, counter, joined, b"",
                             identity.sign(unsigned.signing_bytes()), identity.pid)


def descriptor(creator=ANN, desc="Lunch"):
    return wire.sign_descriptor(creator, desc, False, "", 0, 0, bytes(16), b"", "239.255.1.2", 47477, 1_000)


# -- the key -----------------------------------------------------------------------------


def test_the_direct_key_is_derived_from_the_seed_and_separate_from_the_signing_key():
    again = crypto.Identity.from_bytes(ANN.private_bytes())
    assert again.direct_public == ANN.direct_public and len(ANN.direct_public) == 32
    assert ANN.direct_public != BOB.direct_public
    # Not the birational map of the Ed25519 key (libsodium's ed25519_pk_to_curve25519): a key of its own.
    import nacl.bindings
    assert ANN.direct_public != nacl.bindings.crypto_sign_ed25519_pk_to_curve25519(ANN.public_key)


def test_member_records_carry_the_signed_dh_key():
    record = wire.sign_member(ANN, "g" * 26, "Ann", 1, True)
    assert record.dh == ANN.direct_public and wire.verify_member(record)
    decoded = wire.decode(wire.encode(ANN, wire.Join(record))).message.record
    assert decoded == record and wire.verify_member(decoded)
    swapped = wire._member_record(wire._to_wire(record)[:-1] + [EVE.direct_public], "m")
    assert not wire.verify_member(swapped)  # another key under Ann's signature: refused
    stripped = wire._member_record(wire._to_wire(record)[:-1], "m")
    assert not wire.verify_member(stripped)  # the key cannot be taken off either


def test_old_records_without_dh_keep_their_shape_and_stay_valid():
    old = old_record(ANN, "g" * 26, "Ann", 3)
    assert len(wire._to_wire(old)) == 7  # what peers of this wire version read
    decoded = wire.decode(wire.encode(ANN, wire.Join(old))).message.record
    assert decoded.dh == b"" and wire.verify_member(decoded)
    for bad in ([*wire._to_wire(old), b"short"], [*wire._to_wire(old), ANN.direct_public, b"x"]):
        with pytest.raises(wire.WireError):
            wire._member_record(bad, "m")


def test_direct_keys_come_from_records_in_joined_groups_only():
    me = Gjlp(crypto.Identity.generate(), "Me", random.Random(1))
    joined, outside = descriptor(), descriptor(desc="Elsewhere")
    for d in (joined, outside):
        me.receive(ANN.pid, wire.GroupsInfo((wire.GroupInfo(d.gid, d, ()),)), 1.0)
    me.join(joined.gid, 2.0)
    me.receive(BOB.pid, wire.Join(wire.sign_member(BOB, outside.gid, "Bob", 1, True)), 3.0)
    assert me.direct_keys(BOB.pid) is None  # a record in a group this peer is not in
    me.receive(ANN.pid, wire.Join(old_record(ANN, joined.gid, "Ann", 1)), 3.0)
    assert me.direct_keys(ANN.pid) is None  # an old record: no key to message with
    me.receive(ANN.pid, wire.Join(wire.sign_member(ANN, joined.gid, "Ann", 2, True)), 4.0)
    assert me.direct_keys(ANN.pid) == (ANN.public_key, ANN.direct_public)
    me.receive(BOB.pid, wire.Join(wire.sign_member(BOB, joined.gid, "Bob", 1, True)), 5.0)
    assert me.direct_keys(BOB.pid) == (BOB.public_key, BOB.direct_public)
    assert me.direct_keys(EVE.pid) is None
    # A member who left the only group shared is no current member: its left record (which carries its
    # key too, and the higher counter) gives no key, so it neither writes to nor is written to by this peer.
    me.receive(BOB.pid, wire.Leave(wire.sign_member(BOB, joined.gid, "Bob", 2, False)), 6.0)
    assert me.direct_keys(BOB.pid) is None
    me.receive(BOB.pid, wire.Join(wire.sign_member(BOB, joined.gid, "Bob", 3, True)), 7.0)
    assert me.direct_keys(BOB.pid) == (BOB.public_key, BOB.direct_public)  # back: a member again
    me.leave(joined.gid, 8.0)
    assert me.direct_keys(BOB.pid) is None and me.direct_keys(ANN.pid) is None  # this peer left


def test_a_peer_re_signs_its_own_old_records_with_its_key_at_start(tmp_path):
    m = GroupManager(Config(tmp_path, name="Me", iface="127.0.0.1", zeroconf=False))
    gid = m.create_group("Lunch")
    own = m.gjlp.groups[gid].members[m.identity.pid]
    assert own.dh == m.identity.direct_public
    m.store.save_members(gid, [old_record(m.identity, gid, "Me", own.counter + 1)])  # as an older version stored it
    m.store.close()
    again = GroupManager(Config(tmp_path, name="Me", iface="127.0.0.1", zeroconf=False))
    resigned = again.gjlp.groups[gid].members[m.identity.pid]
    assert resigned.counter == own.counter + 2 and resigned.dh == m.identity.direct_public
    assert wire.verify_member(resigned)
    again.store.close()


# -- sealing -----------------------------------------------------------------------------


def test_round_trip():
    for body in (b"", b"hi", "héllo wörld".encode() * 40, bytes(MAX_DIRECT_BODY)):
        sealed = seal_direct(ANN, BOB.pid, BOB.direct_public, body)
        assert open_direct(BOB, sealed, KEYS.get) == (ANN.pid, body)


def test_only_the_recipient_opens_it():
    sealed = seal_direct(ANN, BOB.pid, BOB.direct_public, b"for Bob")
    assert open_direct(EVE, sealed, KEYS.get) is None
    assert open_direct(ANN, sealed, KEYS.get) is None  # not even its sender


def test_a_message_resealed_for_someone_else_is_refused():
    # Bob opens Ann's signed message and seals it, unchanged, for Eve: the signature names Bob.
    sealed = seal_direct(ANN, BOB.pid, BOB.direct_public, b"I owe you 10")
    plain = BOB._direct_box.decrypt(sealed)
    import nacl.public
    forwarded = nacl.public.SealedBox(nacl.public.PublicKey(EVE.direct_public)).encrypt(plain)
    assert open_direct(EVE, forwarded, KEYS.get) is None


def test_an_unknown_sender_or_a_lying_key_lookup_is_refused():
    sealed = seal_direct(ANN, BOB.pid, BOB.direct_public, b"hello")
    assert open_direct(BOB, sealed, lambda pid: None) is None
    assert open_direct(BOB, sealed, lambda pid: KEYS[EVE.pid]) is None  # a key that is not the pid's
    assert open_direct(BOB, sealed, KEYS.get) == (ANN.pid, b"hello")


def test_a_forged_sender_is_refused():
    # Eve seals a message that claims to be Ann's, signed with her own key.
    body = b"transfer it"
    signature = EVE.sign(crypto._direct_signing_bytes(bytes.fromhex(ANN.pid), bytes.fromhex(BOB.pid), body))
    plain = bytes.fromhex(ANN.pid) + signature + len(body).to_bytes(2, "big") + body
    import nacl.public
    sealed = nacl.public.SealedBox(nacl.public.PublicKey(BOB.direct_public)).encrypt(plain + bytes(256 - len(plain)))
    assert open_direct(BOB, sealed, KEYS.get) is None


def test_tampering_anywhere_is_refused():
    sealed = seal_direct(ANN, BOB.pid, BOB.direct_public, b"meet at noon")
    for position in (0, 31, 32, 40, len(sealed) // 2, len(sealed) - 1):
        damaged = bytearray(sealed)
        damaged[position] ^= 0x01
        assert open_direct(BOB, bytes(damaged), KEYS.get) is None
    assert open_direct(BOB, sealed[:-1], KEYS.get) is None
    assert open_direct(BOB, sealed + b"\x00", KEYS.get) is None


def test_badly_padded_plaintexts_are_refused_though_sealed_and_signed():
    import nacl.public
    body = b"ok"
    signature = ANN.sign(crypto._direct_signing_bytes(bytes.fromhex(ANN.pid), bytes.fromhex(BOB.pid), body))
    head = bytes.fromhex(ANN.pid) + signature + len(body).to_bytes(2, "big") + body
    box = nacl.public.SealedBox(nacl.public.PublicKey(BOB.direct_public))
    assert open_direct(BOB, box.encrypt(head + bytes(256 - len(head))), KEYS.get) == (ANN.pid, body)
    for plain in (head + b"\x01" + bytes(255 - len(head)),  # something hidden in the padding
                  head + bytes(1024 - len(head)),  # a bigger bucket than the body needs
                  head[:-4] + (5000).to_bytes(2, "big") + body + bytes(256 - len(head))):  # a length past the end
        assert open_direct(BOB, box.encrypt(plain), KEYS.get) is None


@pytest.mark.parametrize("garbage", [b"", b"x" * 10, bytes(DIRECT_BUCKETS[0] + 48), "text", None, 5,
                                     bytearray(DIRECT_BUCKETS[0] + 48), bytes(70_000)])
def test_open_direct_never_raises(garbage):
    assert open_direct(BOB, garbage, KEYS.get) is None


def test_sizes_leak_only_the_bucket():
    sizes = {}
    for length in range(0, 5000, 37):
        sizes.setdefault(len(seal_direct(ANN, BOB.pid, BOB.direct_public, bytes(length))), []).append(length)
    assert set(sizes) == {bucket + crypto.DIRECT_SEAL_OVERHEAD for bucket in DIRECT_BUCKETS[:4]}
    assert len(seal_direct(ANN, BOB.pid, BOB.direct_public, bytes(MAX_DIRECT_BODY))) \
        == DIRECT_BUCKETS[-1] + crypto.DIRECT_SEAL_OVERHEAD
    with pytest.raises(ValueError):
        seal_direct(ANN, BOB.pid, BOB.direct_public, bytes(MAX_DIRECT_BODY + 1))
    assert DIRECT_BUCKETS[-1] + crypto.DIRECT_SEAL_OVERHEAD < wire.MAX_DATAGRAM - 1000  # room for an envelope


def test_sealed_bytes_show_no_pid_key_or_plaintext():
    text = "the build is broken, do not deploy"
    body = msgpack.packb([ANN.pid, BOB.pid, text])
    seen = [seal_direct(ANN, BOB.pid, BOB.direct_public, body) for _ in range(20)]
    assert len(set(seen)) == 20  # a fresh ephemeral key each time: equal messages do not look equal
    secrets = [ANN.pid.encode(), BOB.pid.encode(), bytes.fromhex(ANN.pid), bytes.fromhex(BOB.pid),
               ANN.public_key, BOB.public_key, ANN.direct_public, BOB.direct_public]
    for sealed in seen:
        for secret in secrets:
            assert secret[:8] not in sealed
        for start in range(0, len(text) - 6):
            assert text[start:start + 6].encode() not in sealed


def test_the_groups_info_size_estimate_still_bounds_records_with_their_key():
    # GROUPS_INFO answers are packed by this estimate up to gjlp.INFO_BUDGET, under MAX_DATAGRAM.
    creator = crypto.Identity.generate()
    d = wire.sign_descriptor(creator, "𝔊" * wire.MAX_DESC, True, crypto.ARGON2ID, 8, 2**30, bytes(16),
                             crypto.key_check(bytes(32)), "239.255.255.254", 65535, 2**63 - 1)
    records = tuple(wire.sign_member(crypto.Identity.generate(), d.gid, "𝔑" * wire.MAX_NAME,
                                     wire.MAX_MEMBER_COUNTER, True, bytes(32)) for _ in range(gjlp.RECORDS_PER_INFO))
    info = wire.GroupInfo(d.gid, d, records)
    assert len(msgpack.packb(wire._to_wire(info), use_bin_type=True)) <= gjlp._info_size(info)


def test_a_stranger_buys_at_most_one_open_and_one_key_look_up_per_datagram():
    looked_up = []

    def keys_of(pid):
        looked_up.append(pid)
        return KEYS.get(pid)

    for junk in (bytes(1000), os.urandom(5000), os.urandom(DIRECT_BUCKETS[-1] + 49)):
        assert open_direct(BOB, junk, keys_of) is None
    assert looked_up == []  # lengths that are no bucket's: refused before any cryptography
    for bucket in DIRECT_BUCKETS:
        assert open_direct(BOB, os.urandom(bucket + crypto.DIRECT_SEAL_OVERHEAD), keys_of) is None
    assert looked_up == []  # random bytes of the right size do not open: no look-up either
    assert open_direct(BOB, seal_direct(ANN, BOB.pid, BOB.direct_public, b"x"), keys_of) == (ANN.pid, b"x")
    assert looked_up == [ANN.pid]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600), st.integers(min_value=0, max_value=255 + 48), st.integers(min_value=1, max_value=255))
def test_open_direct_never_raises_on_damaged_messages(body, position, flip):
    sealed = bytearray(seal_direct(ANN, BOB.pid, BOB.direct_public, body))
    sealed[position % len(sealed)] ^= flip
    assert open_direct(BOB, bytes(sealed), KEYS.get) is None


def test_a_recipient_key_that_is_no_usable_x25519_key_is_a_value_error_for_the_sender():
    # A hostile member can sign a low-order point into its own record: sending to it fails cleanly.
    for key in (bytes(32), b"\x01" + bytes(31), b"short"):
        with pytest.raises(ValueError):
            seal_direct(ANN, EVE.pid, key, b"hello")
    with pytest.raises(ValueError):
        seal_direct(ANN, "not a pid", BOB.direct_public, b"hello")
