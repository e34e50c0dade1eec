"""Routing (middleware/routing.py): which destinations each kind of datagram gets, from values alone."""

from m2mc.middleware import routing, wire
from m2mc.middleware.addresses import Arrival, Broadcast, Endpoint, GroupAddress, Via
from m2mc.middleware.reach import Reach

CONTROL = GroupAddress("239.255.77.77", 47477)
GROUP = GroupAddress("239.255.1.2", 47478)
BOB = Endpoint("10.0.0.2", 47477)
CAT = Endpoint("10.0.0.3", 47477)
DAN = Endpoint("10.0.0.4", 47477)
GID = "g" * 32


def test_a_control_message_goes_to_the_control_address_and_a_copy_to_each_peer_multicast_misses():
    route = routing.control_route(wire.Adv("ann", gids=(GID,)), CONTROL, [BOB, CAT], 47477)
    assert route.destinations == (CONTROL, BOB, CAT)
    assert route.copies == 2 and not route.tree


def test_an_announcement_reaches_the_subnet_broadcast_too():
    route = routing.control_route(wire.Adv("ann"), CONTROL, [BOB], 47477)
    assert route.destinations == (CONTROL, BOB, Broadcast(47477))
    assert route.copies == 1
    assert routing.beacon_route([BOB], 47477).destinations == (Broadcast(47477), BOB)


def test_a_group_message_goes_to_its_address_and_to_its_members_only():
    scope = routing.group_scope(GROUP, [("bob", BOB), ("stranger", CAT)], lambda pid: pid == "bob")
    route = routing.group_route(scope, wire.Nak(GID, "bob", ((1, 2),)))
    assert route.destinations == (GROUP, BOB)
    assert route.copies == 1 and not route.tree


def test_an_active_tree_carries_chat_and_beacons_but_not_repair_requests():
    scope = routing.group_scope(GROUP, [("bob", BOB), ("cat", CAT), ("dan", DAN)], lambda pid: True,
                                tree_members={"bob", "cat"})
    beacon = routing.group_route(scope, wire.Heartbeat(GID, 3))
    assert beacon.destinations == (GROUP, DAN) and beacon.tree and beacon.copies == 1
    nak = routing.group_route(scope, wire.Nak(GID, "bob", ((1, 2),)))
    assert nak.destinations == (GROUP, BOB, CAT, DAN) and not nak.tree and nak.copies == 3


def test_relay_members_are_the_proven_current_members_heard_lately_with_a_key():
    heard = {"bob": 10.0, "cat": 10.0, "dan": -100.0}
    members = routing.relay_members(["ann", "bob", "cat", "dan", "eve"], "ann", ["bob", "cat", "dan", "fay"],
                                    lambda pid: False, heard.get, lambda pid: pid != "cat", 20.0, 30.0)
    assert members == ["bob"]  # cat has no key, dan is not heard lately, fay is not current


def test_no_tree_while_any_member_is_heard_by_multicast():
    members = routing.relay_members(["ann", "bob", "cat"], "ann", ["bob"], lambda pid: pid == "cat",
                                    lambda pid: 0.0, lambda pid: True, 0.0, 30.0)
    assert members == []
    assert routing.relay_members(["ann", "bob", "cat"], "ann", ["bob"], lambda pid: pid == "ann",
                                 lambda pid: 0.0, lambda pid: True, 0.0, 30.0) == ["bob"]  # itself does not count


def test_an_arrival_says_how_it_came_and_multicast_to_either_address_counts_as_multicast():
    assert Arrival(BOB, Via.CONTROL).multicast and Arrival(BOB, Via.MULTICAST).multicast
    assert not any(Arrival(BOB, via).multicast for via in (Via.UNICAST, Via.BROADCAST, Via.RELAYED))
    reach = Reach("ann", "Ann")
    reach.heard("bob", BOB, Via.CONTROL, 1.0)
    reach.heard("cat", CAT, Via.RELAYED, 1.0)
    assert reach.heard_by_multicast("bob", 1.5)
    assert not reach.heard_by_multicast("cat", 1.5)  # a relayed copy says nothing of the writer's multicast
