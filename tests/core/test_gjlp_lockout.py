"""Nobody is locked out unheard (issue 26, item 3), in-process: the member caps give way to
whoever is heard on the group's channel, left records do not count, and a joiner that no
member acknowledges is told."""

import random

import pytest

from m2mc.middleware import crypto, gjlp, wire
from m2mc.middleware.gjlp import ACK_TIMEOUT, Gjlp, JoinUnacknowledged, MemberGaveWay, MemberJoined
from m2mc.middleware.memory_store import MemoryStore
from tests.testbed.peer_sim import PeerLan

ANN, NEW, EVE = (crypto.Identity.generate() for _ in range(3))
CAP = 10  # MAX_MEMBERS for these tests: the rules do not depend on its size


def descriptor():
    return wire.sign_descriptor(ANN, "Open house", False, "", 0, 0, bytes(16), b"", "239.255.1.2", 47477, 1_000)


def info(d, *records):
    return wire.GroupsInfo((wire.GroupInfo(d.gid, d, tuple(records)),))


def joined_peer():
    """A peer in ANN's open group (ANN's record known), its outbox and events drained."""
    me = crypto.Identity.generate()
    p = Gjlp(me, "Me", random.Random(1))
    d = descriptor()
    p.receive(ANN.pid, info(d, wire.sign_member(ANN, d.gid, "Ann", 1, True)), 1.0)
    p.join(d.gid, 2.0)
    p.datagrams_to_send()
    p.events()
    return me, p, d


def fill(p, d, count):
    """``count`` fresh keys' JOINs (a stranger's flood): their owners never speak."""
    ghosts = [crypto.Identity.generate() for _ in range(count)]
    for ghost in ghosts:
        p.receive(ghost.pid, wire.Join(wire.sign_member(ghost, d.gid, "ghost", 1, True)), 3.0)
    return ghosts


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(gjlp, "MAX_MEMBERS", CAP)
    monkeypatch.setattr(gjlp, "MAX_LEFT", CAP - 2)


def test_a_full_group_makes_room_for_a_newcomer_it_hears(small_cap):
    me, p, d = joined_peer()
    ghosts = fill(p, d, CAP - 2)
    record = p.groups[d.gid]
    assert record.joined_count() == CAP
    p.heard(d.gid, ANN.pid)
    p.events()
    # The newcomer's JOIN comes first: refused (the cap is full), kept until it is heard.
    p.receive(NEW.pid, wire.Join(wire.sign_member(NEW, d.gid, "New", 1, True)), 4.0)
    assert not record.is_current(NEW.pid) and p.member_records_refused == 1
    p.heard(d.gid, NEW.pid)  # its sync request, heartbeat or message on the group's channel
    assert record.is_current(NEW.pid) and record.joined_count() == CAP
    # The most recent unheard record gave way; the earlier members and this peer stay.
    assert not record.is_current(ghosts[-1].pid) and record.is_current(ANN.pid) and record.is_current(me.pid)
    assert [type(e) for e in p.events()] == [MemberGaveWay, MemberJoined] and p.member_records_given_way == 1
    # Heard first, record second (a relayed record, say): admitted at once.
    later = crypto.Identity.generate()
    p.heard(d.gid, later.pid)
    p.receive(ANN.pid, info(d, wire.sign_member(later, d.gid, "Later", 1, True)), 5.0)
    assert record.is_current(later.pid) and not record.is_current(ghosts[-2].pid)
    # An unheard newcomer never pushes anyone out, and heard records never give way.
    for ghost in ghosts[:-2]:
        p.heard(d.gid, ghost.pid)
    p.receive(EVE.pid, wire.Join(wire.sign_member(EVE, d.gid, "Eve", 1, True)), 6.0)
    p.heard(d.gid, crypto.Identity.generate().pid)
    last = crypto.Identity.generate()
    p.heard(d.gid, last.pid)
    p.receive(last.pid, wire.Join(wire.sign_member(last, d.gid, "Last", 1, True)), 6.0)
    assert not record.is_current(EVE.pid) and not record.is_current(last.pid)
    assert record.joined_count() == CAP and p.member_records_refused == 3


def test_members_who_left_do_not_count_against_the_cap(small_cap):
    _, p, d = joined_peer()
    ghosts = fill(p, d, CAP - 2)
    for ghost in ghosts:
        p.receive(ghost.pid, wire.Leave(wire.sign_member(ghost, d.gid, "ghost", 2, False)), 4.0)
    record = p.groups[d.gid]
    assert record.joined_count() == 2 and len(record.members) == CAP
    # Newcomers nobody heard yet: room for CAP - 2 of them.
    fresh = fill(p, d, CAP - 2)
    assert all(record.is_current(f.pid) for f in fresh) and p.member_records_refused == 0
    # Left records have their own bound: an unknown pid's leave beyond it is refused, while a
    # member who leaves is always recorded (an unheard left record gives way).
    stranger = crypto.Identity.generate()
    p.receive(stranger.pid, wire.Leave(wire.sign_member(stranger, d.gid, "x", 2, False)), 5.0)
    assert stranger.pid not in record.members and p.member_records_refused == 1
    p.receive(fresh[0].pid, wire.Leave(wire.sign_member(fresh[0], d.gid, "ghost", 2, False)), 5.0)
    assert not record.members[fresh[0].pid].joined
    assert len(record.members) - record.joined_count() == CAP - 2 and p.member_records_given_way == 1


def test_a_lone_joiner_repeats_its_join_then_is_warned():
    _, p, d = joined_peer()  # joined at 2.0; ANN's peer never answers
    sent = []
    while (at := p.get_timer()) is not None:
        p.handle_timer(at)
        sent += [(at, type(m).__name__) for m in p.datagrams_to_send()]
    assert sent == [(3.0, "Join"), (3.0, "Adv"), (5.0, "Join"), (5.0, "Adv")]
    assert p.events() == [JoinUnacknowledged(d.gid, False)] and p.joins_unacknowledged == 1


def test_a_members_answer_naming_the_joiner_acknowledges_it_and_a_strangers_does_not():
    me, p, d = joined_peer()
    own = p.groups[d.gid].members[me.pid]
    p.receive(EVE.pid, info(d, own), 2.5)  # EVE is no member: her relay proves nothing
    p.handle_timer(3.0)
    assert len(p.datagrams_to_send()) == 2
    p.receive(ANN.pid, info(d, wire.sign_member(ANN, d.gid, "Ann", 1, True), own), 3.5)
    p.handle_timer(2.0 + ACK_TIMEOUT + 1)
    assert p.get_timer() is None and p.datagrams_to_send() == [] and p.events() == []


def test_a_peer_that_joins_while_nobody_is_online_gets_a_warning():
    lan = PeerLan([MemoryStore() for _ in range(3)])
    ann, bob, cat = lan.nodes
    gid = lan.create_group(ann, "Quiet room")
    lan.settle(2.0)
    lan.run(bob, lambda core: core.join(core.joinable(gid, None), None, lan.now, lan.now))
    lan.settle(ACK_TIMEOUT + 1)
    assert bob.recorder.warnings == []  # Ann answered
    lan.kill(ann)
    lan.kill(bob)
    lan.run(cat, lambda core: core.join(core.joinable(gid, None), None, lan.now, lan.now))
    lan.settle(ACK_TIMEOUT + 1)
    (warning,) = cat.recorder.warnings
    assert "no member of 'Quiet room' has acknowledged your join" in warning and "online" in warning


def test_a_member_answering_for_a_full_group_acknowledges_even_if_its_record_did_not_fit(small_cap):
    me, p, d = joined_peer()
    fill(p, d, CAP - 2)
    p.events()
    bob = crypto.Identity.generate()
    p.receive(bob.pid, info(d, wire.sign_member(bob, d.gid, "Bob", 1, True), p.groups[d.gid].members[me.pid]), 2.5)
    assert not p.groups[d.gid].is_current(bob.pid)  # refused here: the table is full of unheard records
    p.handle_timer(2.0 + ACK_TIMEOUT + 1)
    assert p.events() == [] and p.joins_unacknowledged == 0
