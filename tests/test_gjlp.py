"""GJLP core: merge rules, rejoin epochs, and jittered, suppressed answers (hand-driven clock)."""

import random

from middleware import wire
from middleware.gjlp import Gjlp, GroupSeen, MemberJoined, MemberLeft, group_address


def info(gid="g1", members=(), left=()):
    return wire.GroupInfo(gid, "Lunch", "239.255.1.2", 47477, False, tuple(members), tuple(left))


def test_a_left_member_overrides_a_current_one_at_the_same_epoch():
    peer = Gjlp("me", "Me")
    peer.receive("a", wire.GroupsInfo((info(members=[("a", "Ann", 1), ("b", "Bob", 1)]),)), now=1.0)
    assert isinstance(peer.events()[0], GroupSeen)
    peer.receive("c", wire.GroupsInfo((info(members=[("a", "Ann", 1)], left=[("b", "Bob", 1)]),)), now=2.0)
    assert [type(e) for e in peer.events()] == [MemberLeft]
    # A stale answer that still lists Bob as current does not bring him back.
    peer.receive("a", wire.GroupsInfo((info(members=[("a", "Ann", 1), ("b", "Bob", 1)]),)), now=3.0)
    record = peer.groups["g1"]
    assert [m.pid for m in record.current()] == ["a"] and [m.pid for m in record.left()] == ["b"]
    assert peer.events() == []


def test_a_member_who_left_can_come_back_with_a_higher_epoch():
    peer = Gjlp("me", "Me")
    peer.receive("a", wire.GroupsInfo((info(members=[("a", "Ann", 1)], left=[("b", "Bob", 1)]),)), now=1.0)
    peer.events()
    peer.receive("b", wire.Join("g1", "Bob", 2), now=2.0)
    assert peer.events() == [MemberJoined("g1", peer.groups["g1"].current()[1])]
    assert {m.pid for m in peer.groups["g1"].current()} == {"a", "b"}
    peer.receive("b", wire.Leave("g1", "Bob", 2), now=3.0)
    assert isinstance(peer.events()[0], MemberLeft)


def test_join_and_leave_are_announced_and_counted():
    peer = Gjlp("me", "Me")
    peer.receive("a", wire.GroupsInfo((info(members=[("a", "Ann", 1)]),)), now=1.0)
    peer.join("g1", now=2.0)
    peer.leave("g1", now=3.0)
    peer.join("g1", now=4.0)
    sent = peer.datagrams_to_send()
    assert sent == [wire.Join("g1", "Me", 1), wire.Leave("g1", "Me", 1), wire.Join("g1", "Me", 2)]
    assert peer.is_member("g1")


def test_answers_wait_a_random_jitter_and_are_suppressed_by_an_equal_answer():
    rng = random.Random(4)
    peer = Gjlp("me", "Me", rng, answer_delay=(0.02, 0.25))
    record = peer.create_group("g1", "Lunch", "239.255.1.2", 47477, now=0.0)
    peer.datagrams_to_send()
    peer.receive("newcomer", wire.Adv("New"), now=10.0)
    deadline = peer.get_timer()
    assert 10.02 <= deadline <= 10.25
    peer.handle_timer(deadline - 0.001)
    assert peer.datagrams_to_send() == []  # not yet
    # Another member answers first with the same facts: ours is dropped.
    peer.receive("other", wire.GroupsInfo((record.to_wire(),)), now=deadline - 0.0005)
    assert peer.get_timer() is None and peer.answers_suppressed == 1
    peer.handle_timer(deadline + 1)
    assert peer.datagrams_to_send() == []


def test_an_answer_that_knows_less_does_not_suppress_ours():
    peer = Gjlp("me", "Me", random.Random(1))
    peer.create_group("g1", "Lunch", "239.255.1.2", 47477, now=0.0)
    peer.datagrams_to_send()
    peer.receive("newcomer", wire.Adv("New"), now=1.0)
    partial = wire.GroupInfo("g1", "Lunch", "239.255.1.2", 47477, False, (), ())
    peer.receive("other", wire.GroupsInfo((partial,)), now=1.01)
    peer.handle_timer(peer.get_timer())
    (answer,) = peer.datagrams_to_send()
    assert answer.groups[0].members == (("me", "Me", 1),)


def test_group_addresses_are_stable_distinct_and_never_the_control_channel():
    addresses = {group_address(f"gid-{i}") for i in range(500)}
    assert len(addresses) > 490
    assert group_address("x") == group_address("x")
    assert all(a.startswith("239.255.") and a != "239.255.77.77" for a in addresses)
