"""GJLP core: signed descriptors and members' own records decide; forgeries, replays and floods change nothing."""

import random

import pytest

from m2mc.middleware import crypto, gjlp, wire
from m2mc.middleware.gjlp import (ANSWER_INTERVAL, MAX_MEMBERS, Gjlp, GroupSeen, MemberJoined, MemberLeft, MemberUpdated,
                             group_address)

ANN, BOB, EVE = (crypto.Identity.generate() for _ in range(3))


def descriptor(creator=ANN, desc="Lunch", addr="239.255.1.2", port=47477, key=None, created_at=1_000):
    if key is None:
        return wire.sign_descriptor(creator, desc, False, "", 0, 0, bytes(16), b"", addr, port, created_at)
    return wire.sign_descriptor(creator, desc, True, crypto.ARGON2ID, 3, 2**28, bytes(16), crypto.key_check(key),
                                addr, port, created_at)


def info(d, *records, gid=None):
    return wire.GroupsInfo((wire.GroupInfo(gid or d.gid, d, tuple(records)),))


def peer(identity=None, **kwargs):
    return Gjlp(identity or crypto.Identity.generate(), "Me", random.Random(1), **kwargs)


def members(p, gid):
    record = p.groups[gid]
    return sorted(m.name for m in record.current()), sorted(m.name for m in record.left())


def test_the_gid_is_the_hash_of_the_signed_descriptor():
    d = descriptor()
    assert wire.verify_descriptor(d) and len(d.gid) == wire.GID_CHARS
    assert descriptor(created_at=1_001).gid != d.gid and descriptor(addr="239.255.1.3").gid != d.gid
    assert descriptor(creator=EVE).gid != d.gid  # nobody else can make this gid: it hashes the creator's key


def test_descriptors_that_do_not_verify_or_hash_to_their_gid_are_dropped_and_counted():
    p = peer()
    d = descriptor()
    tampered = wire.GroupDescriptor(*(getattr(d, n) for n, _ in wire.GroupDescriptor.FIELDS[:-1]), bytes(64))
    p.receive(EVE.pid, info(tampered), 1.0)
    p.receive(EVE.pid, info(descriptor(creator=EVE), gid=d.gid), 1.0)  # EVE's own group under ANN's gid
    assert p.groups == {} and p.descriptors_rejected == 2
    on_control = descriptor(addr="239.255.77.77")
    p.receive(EVE.pid, info(on_control), 1.0)
    assert p.groups == {} and p.descriptors_rejected == 3


def test_a_verified_group_never_changes_its_fixed_fields():
    p = peer()
    d = descriptor(key=bytes(32))
    p.receive(ANN.pid, info(d), 1.0)
    assert p.groups[d.gid].private and p.groups[d.gid].addr == "239.255.1.2"
    # Another address, port or a public flag under the same gid: the gid no longer matches.
    for other in (descriptor(addr="239.255.9.9", key=bytes(32)), descriptor(port=5000, key=bytes(32)), descriptor()):
        p.receive(EVE.pid, info(other, gid=d.gid), 2.0)
    record = p.groups[d.gid]
    assert (record.addr, record.port, record.private, record.descriptor) == ("239.255.1.2", 47477, True, d)
    assert p.descriptor_conflicts == 3


def test_membership_changes_only_by_the_members_own_signed_record():
    p = peer()
    d = descriptor()
    ann_in = wire.sign_member(ANN, d.gid, "Ann", 1, True)
    bob_in = wire.sign_member(BOB, d.gid, "Bob", 1, True)
    p.receive(ANN.pid, info(d, ann_in, bob_in), 1.0)
    assert members(p, d.gid) == (["Ann", "Bob"], [])
    # EVE signs "Bob left" with Bob's key in the record and her own signature; and a huge counter.
    forged = wire.sign_member(EVE, d.gid, "Bob", 2**31 - 1, False)
    forged = wire.MemberRecord(forged.gid, BOB.public_key, "Bob", forged.counter, False, b"", forged.signature, BOB.pid)
    p.receive(EVE.pid, wire.Leave(forged), 2.0)
    p.receive(EVE.pid, info(d, forged), 2.0)
    assert members(p, d.gid) == (["Ann", "Bob"], []) and p.member_records_rejected == 2
    # Bob's own leave counts; a replay of his old join after it changes nothing.
    p.receive(BOB.pid, wire.Leave(wire.sign_member(BOB, d.gid, "Bob", 2, False)), 3.0)
    assert members(p, d.gid) == (["Ann"], ["Bob"])
    p.receive(EVE.pid, wire.Join(bob_in), 4.0)
    p.receive(EVE.pid, info(d, bob_in), 4.0)
    assert members(p, d.gid) == (["Ann"], ["Bob"]) and p.member_records_stale == 2
    # A record sent as the other type (a join record in a LEAVE) is refused.
    p.receive(BOB.pid, wire.Leave(wire.sign_member(BOB, d.gid, "Bob", 3, True)), 5.0)
    assert members(p, d.gid) == (["Ann"], ["Bob"])


def joined_peer():
    """A peer that joined ANN's open group: (its identity, the peer, the descriptor)."""
    me = crypto.Identity.generate()
    p = peer(me)
    d = descriptor()
    p.receive(ANN.pid, info(d), 1.0)
    p.join(d.gid, 2.0)
    assert p.datagrams_to_send()[0].record.counter == 1
    return me, p, d


def test_nobody_changes_this_peers_own_entry_and_a_lost_change_is_resigned_above():
    me, p, d = joined_peer()
    forged = wire.sign_member(EVE, d.gid, "Me", 50, False)
    p.receive(EVE.pid, wire.Leave(wire.MemberRecord(d.gid, me.public_key, "Me", 50, False, b"", forged.signature,
                                                    me.pid)), 3.0)
    assert p.is_member(d.gid) and p.member_records_rejected == 1
    # A record this peer really signed, newer than its own (its store lost the change):
    # it keeps its own state and re-signs it above.
    p.receive(ANN.pid, info(d, wire.sign_member(me, d.gid, "Me", 7, False)), 4.0)
    assert p.is_member(d.gid)
    (again,) = p.datagrams_to_send()
    assert isinstance(again, wire.Join) and again.record.counter == 8 and again.record.joined


def test_a_member_flood_is_capped_and_invented_records_change_nothing():
    p = peer()
    d = descriptor()
    p.receive(ANN.pid, info(d, wire.sign_member(ANN, d.gid, "Ann", 1, True)), 1.0)
    p.events()
    invented = [wire.MemberRecord(d.gid, crypto.Identity.generate().public_key, f"fake{i}", 1, True, b"", bytes(64))
                for i in range(50)]
    invented = [wire._member_record(wire._to_wire(r), "m") for r in invented]
    p.receive(EVE.pid, info(d, *invented), 2.0)
    assert members(p, d.gid) == (["Ann"], []) and p.member_records_rejected == 50 and p.events() == []
    # Self-signed records of fresh keys are real joins of an open group, but only MAX_MEMBERS are kept.
    keys = [crypto.Identity.generate() for _ in range(MAX_MEMBERS + 5)]
    for start in range(0, len(keys), 200):
        p.receive(EVE.pid, info(d, *(wire.sign_member(k, d.gid, "x", 1, True) for k in keys[start:start + 200])), 3.0)
    assert len(p.groups[d.gid].members) == MAX_MEMBERS and p.member_records_refused == 6


def test_private_group_members_check_the_key_proof_of_each_record():
    key = bytes(range(32))
    d = descriptor(key=key)
    p = peer()
    # As an outsider it cannot check key proofs; on joining, the keyless records go.
    p.receive(ANN.pid, info(d, wire.sign_member(ANN, d.gid, "Ann", 1, True, key),
                            wire.sign_member(EVE, d.gid, "Sybil", 1, True, bytes(32))), 1.0)
    assert members(p, d.gid) == (["Ann", "Sybil"], [])
    p.join(d.gid, 2.0, key)
    assert members(p, d.gid) == (["Ann", "Me"], []) and p.member_records_rejected == 1
    with_key = wire.sign_member(BOB, d.gid, "Bob", 1, True, key)
    guessed = wire.sign_member(EVE, d.gid, "Eve", 1, True, bytes(32))
    no_proof = wire.sign_member(crypto.Identity.generate(), d.gid, "Nemo", 1, True)
    p.receive(EVE.pid, info(d, with_key, guessed, no_proof), 3.0)
    assert members(p, d.gid) == (["Ann", "Bob", "Me"], []) and p.member_records_rejected == 3


def test_a_zeroconf_sighting_is_not_joinable_until_its_descriptor_is_fetched_and_verified():
    p = peer()
    d = descriptor(key=bytes(32))
    p.note_zeroconf(d.gid, "Lunch (claims to be open)", False, 3, now=10.0)
    assert not p.groups[d.gid].verified and not p.groups[d.gid].view(p.pid).verified
    with pytest.raises(ValueError):
        p.join(d.gid, 10.0)
    p.handle_timer(p.get_timer())
    assert p.datagrams_to_send() == [wire.Adv("Me", (d.gid,))]
    p.receive(ANN.pid, info(d), 11.0)
    record = p.groups[d.gid]
    assert record.verified and record.private and record.desc == "Lunch" and "zeroconf" in record.sources
    assert GroupSeen(d.gid, False) in p.events()


def test_rename_and_join_leave_counters():
    p = peer()
    d = descriptor()
    p.receive(ANN.pid, info(d), 1.0)
    p.join(d.gid, 2.0)
    p.leave(d.gid, 3.0)
    p.join(d.gid, 4.0)
    assert p.rename("Me Too") == [d.gid]
    sent = p.datagrams_to_send()
    assert [(type(m).__name__, m.record.counter, m.record.name) for m in sent] == [
        ("Join", 1, "Me"), ("Leave", 2, "Me"), ("Join", 3, "Me"), ("Join", 4, "Me Too")]
    assert all(wire.verify_member(m.record) for m in sent)
    other = peer()
    other.receive(ANN.pid, info(d), 1.0)
    for message in sent:
        other.receive(p.pid, message, 5.0)
    assert members(other, d.gid) == (["Me Too"], [])
    assert [type(e) for e in other.events()] == [GroupSeen, MemberJoined, MemberLeft, MemberJoined, MemberUpdated]


def test_answers_wait_a_random_jitter_and_are_suppressed_by_an_equal_answer():
    p = peer(answer_delay=(0.02, 0.25))
    record = p.create_group(descriptor(creator=p.identity), now=0.0)
    p.datagrams_to_send()
    p.receive("newcomer", wire.Adv("New"), now=10.0)
    deadline = p.get_timer()
    assert 10.02 <= deadline <= 10.25
    p.handle_timer(deadline - 0.001)
    assert p.datagrams_to_send() == []
    p.receive("other", wire.GroupsInfo(tuple(record.to_wire())), now=deadline - 0.0005)
    assert p.get_timer() is None and p.answers_suppressed == 1
    # An ADV naming other gids only is not answered.
    p.receive("newcomer", wire.Adv("New", ("x" * 26,)), now=11.0)
    assert p.get_timer() is None


def test_a_large_group_is_answered_in_datagrams_under_the_limit():
    p = peer()
    d = descriptor(creator=p.identity)
    record = p.create_group(d, now=0.0)
    for i in range(MAX_MEMBERS - 1):
        r = wire.sign_member(crypto.Identity.generate(), d.gid, "n" * 64, 1, True)
        record.members[r.pid] = r
    p.datagrams_to_send()
    p.receive("newcomer", wire.Adv("New"), now=1.0)
    p.handle_timer(5.0)
    answers = p.datagrams_to_send()
    encoded = [wire.encode(p.identity, m) for m in answers]
    assert all(len(data) <= wire.MAX_DATAGRAM for data in encoded)
    assert sum(len(g.members) for m in answers for g in m.groups) == MAX_MEMBERS


def test_group_addresses_are_stable_distinct_and_never_the_control_channel():
    addresses = {group_address(f"gid-{i}") for i in range(500)}
    assert len(addresses) > 490
    assert group_address("x") == group_address("x")
    assert all(a.startswith("239.255.") and a != "239.255.77.77" for a in addresses)


def test_a_flood_of_advertisements_is_answered_once_per_interval():
    p = peer()
    p.create_group(descriptor(creator=p.identity), now=0.0)
    p.datagrams_to_send()
    answers, now = 0, 10.0
    while now < 10.0 + 4 * ANSWER_INTERVAL:
        p.receive(EVE.pid, wire.Adv("Eve"), now)
        if p.get_timer() is not None and p.get_timer() <= now:
            p.handle_timer(now)
        answers += len(p.datagrams_to_send())
        now += 0.05
    assert answers <= 4 + 1  # one per interval, not one per ADV (160 ADVs)


def test_records_of_groups_this_peer_is_not_in_have_a_global_budget(monkeypatch):
    monkeypatch.setattr(gjlp, "MAX_OUTSIDE_RECORDS", 30)
    p = peer()
    groups = [descriptor(desc=f"g{i}") for i in range(4)]
    for d in groups:
        p.receive(EVE.pid, info(d, *(wire.sign_member(crypto.Identity.generate(), d.gid, "x", 1, True)
                                     for _ in range(10))), 1.0)
    # The fourth group takes its fair share (30 // 4) from the fullest: a flood elsewhere
    # cannot leave a new group at 0 members (on the old code it got none: 10 refused).
    assert sum(len(r.members) for r in p.groups.values()) == 30
    sizes = [len(p.groups[d.gid].members) for d in groups]
    assert sizes[3] == 7 and min(sizes) == 7, sizes
    assert p.member_records_refused == 3 and p.member_records_given_way == 7
    # Joining one makes its records this peer's own business: room again for the others.
    p.join(groups[0].gid, 2.0)
    p.receive(EVE.pid, info(groups[3], wire.sign_member(BOB, groups[3].gid, "Bob", 1, True)), 3.0)
    assert BOB.pid in p.groups[groups[3].gid].members


def test_this_peers_own_counter_never_passes_the_limit():
    me, p, d = joined_peer()
    # Even a record this peer signed at the limit (a store from elsewhere) leaves it as it is.
    p.receive(ANN.pid, info(d, wire.sign_member(me, d.gid, "Me", wire.MAX_MEMBER_COUNTER, False)), 3.0)
    assert p.is_member(d.gid) and p.datagrams_to_send() == []
    p.groups[d.gid].members[me.pid] = wire.sign_member(me, d.gid, "Me", wire.MAX_MEMBER_COUNTER, True)
    with pytest.raises(ValueError, match="no more"):
        p.leave(d.gid, 4.0)
