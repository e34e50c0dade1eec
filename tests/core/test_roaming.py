"""middleware.roaming: which address a peer follows, when it moves, and what the user is told,
with the network as values (no sockets); and netif's kinds of interface."""

import pytest

from m2mc.middleware import netif
from m2mc.middleware.events import NetworkChanged
from m2mc.middleware.netif import InterfaceInfo, interface_kind
from m2mc.middleware.reach import Reach
from m2mc.middleware.roaming import (CONNECTED, OFFLINE, OFFLINE_GRACE, RECONNECTING, SLEEP_GAP, Move, NetworkFollower,
                                     Resync)
from m2mc.middleware import wire
from m2mc.middleware.addresses import Endpoint


def lan(name="eth0", address="192.168.1.20", up=True, kind="lan", prefix=24):
    return InterfaceInfo(name, address, prefix, up, True, kind)


LO = InterfaceInfo("lo", "127.0.0.1", 8, True, False, "loopback")


def started(wanted=None, interface="eth0", address="192.168.1.20"):
    follower = NetworkFollower(wanted)
    follower.bound(interface, address, 0.0)
    follower.events()
    return follower


def states(follower):
    return [(e.state, e.reason) for e in follower.events()]


def test_a_new_address_on_the_same_interface_moves_and_says_reconnecting_then_connected():
    follower = started()
    assert follower.observe([LO, lan()], 0.5) == []
    assert follower.observe([LO, lan(address="192.168.1.77")], 1.0) == [Move("eth0", "192.168.1.77")]
    assert follower.observe([LO, lan(address="192.168.1.77")], 1.5) == [], "one move, not one a look"
    follower.bound("eth0", "192.168.1.77", 1.6)
    assert states(follower) == [(RECONNECTING, "on eth0 (192.168.1.77)"), (CONNECTED, "")]
    assert follower.view() == NetworkChanged(CONNECTED, "eth0", "192.168.1.77", "")


def test_dock_to_wi_fi_keeps_the_cable_while_both_are_up_and_moves_when_it_goes():
    follower = started()
    wifi = lan("wlan0", "192.168.1.31")
    assert follower.observe([LO, lan(), wifi], 0.5, route_source="192.168.1.31") == [], "no flapping to the route's"
    assert follower.observe([LO, lan(up=False), wifi], 1.0) == [Move("wlan0", "192.168.1.31")]
    follower.bound("wlan0", "192.168.1.31", 1.1)
    assert follower.observe([LO, wifi], 1.5) == []
    assert follower.state == CONNECTED


def test_the_default_route_s_lan_is_preferred_when_the_one_in_use_is_gone():
    follower = started()
    second, third = lan("eth1", "10.0.0.5"), lan("wlan0", "10.0.1.5")
    assert follower.observe([second, third], 0.5, route_source="10.0.1.5") == [Move("wlan0", "10.0.1.5")]


def test_interface_gone_is_reconnecting_for_the_grace_then_offline_and_its_return_rebinds():
    follower = started()
    assert follower.observe([LO], 0.5) == []
    assert follower.observe([LO], 0.5 + OFFLINE_GRACE - 0.01) == []
    assert states(follower) == [(RECONNECTING, "")]
    assert follower.observe([LO], 0.5 + OFFLINE_GRACE) == []
    assert states(follower) == [(OFFLINE, "no network")]
    # Back under the same name and address: its multicast memberships went with it, so bind afresh.
    assert follower.observe([LO, lan()], 1.0) == [Move("eth0", "192.168.1.20")]


def test_a_dhcp_renewal_s_moment_without_an_address_is_never_offline():
    follower = started()
    assert follower.observe([LO], 0.5) == [], "the old address removed, the new one not yet added"
    assert follower.observe([LO, lan(address="192.168.1.77")], 1.0) == [Move("eth0", "192.168.1.77")]
    follower.bound("eth0", "192.168.1.77", 1.1)
    assert [state for state, _ in states(follower)] == [RECONNECTING, RECONNECTING, CONNECTED]
    assert follower.observe([LO], 1.5) == [] and follower.state == RECONNECTING, "a new loss, a new grace"


def test_a_link_down_and_up_with_the_address_kept_resyncs_without_moving():
    follower = started(wanted="eth0")
    assert follower.observe([lan(up=False)], 0.5) == []
    assert follower.observe([lan(up=False)], 0.5 + OFFLINE_GRACE) == []
    assert states(follower)[-1] == (OFFLINE, "no network: eth0 is down")
    assert follower.observe([lan()], 1.0) == [Resync("network back")]
    assert states(follower) == [(CONNECTED, "")]


@pytest.mark.parametrize("name", ["tun0", "wg0", "tailscale0", "utun3", "ppp0", "docker0", "virbr0", "veth12ab",
                                  "br-5f3e", "vEthernet (WSL)"])
def test_a_vpn_tunnel_or_virtual_bridge_never_takes_the_place_of_the_lan(name):
    follower = started()
    other = InterfaceInfo(name, "10.8.0.2", 24, True, True, interface_kind(name, "10.8.0.2"))
    assert other.kind in ("tunnel", "virtual")
    assert follower.observe([LO, lan(), other], 0.5, route_source="10.8.0.2") == []
    assert follower.observe([LO, lan()], 1.0) == []
    assert states(follower) == []
    # Nor with the LAN gone: a tunnel or bridge alone is no LAN.
    assert follower.observe([LO, other], 1.5, route_source="10.8.0.2") == []
    assert follower.observe([LO, other], 1.5 + OFFLINE_GRACE, route_source="10.8.0.2") == []
    assert follower.state == OFFLINE


def test_a_point_to_point_interface_is_a_tunnel_whatever_its_name():
    assert interface_kind("corpvpn", "10.1.2.3", pointopoint=True) == "tunnel"
    assert interface_kind("enp3s0", "10.1.2.3") == "lan"
    assert interface_kind("lo", "127.0.0.1") == "loopback"


def test_iface_address_never_moves_and_says_when_the_address_is_gone():
    follower = started(wanted="192.168.1.20")
    assert follower.observe([lan(address="192.168.1.77")], 0.5) == []
    assert follower.observe([lan(address="192.168.1.77")], 0.5 + OFFLINE_GRACE) == []
    assert states(follower)[-1] == (OFFLINE, "address 192.168.1.20 is no longer on this computer")
    assert follower.observe([lan()], 1.0) == [Move("eth0", "192.168.1.20")]


def test_iface_name_follows_that_interface_s_address_only():
    follower = started(wanted="eth0")
    assert follower.observe([lan(address="192.168.1.20"), lan("wlan0", "192.168.1.31")], 0.5) == []
    assert follower.observe([lan(address="192.168.1.9"), lan("wlan0", "192.168.1.31")], 1.0) == [
        Move("eth0", "192.168.1.9")]


def test_started_on_loopback_with_no_lan_moves_to_the_first_lan_that_comes_up():
    follower = NetworkFollower()
    follower.bound("lo", "127.0.0.1", 0.0, usable=False)
    assert follower.state == OFFLINE
    assert follower.observe([LO], 0.5) == []
    assert follower.observe([LO, lan()], 1.0) == [Move("eth0", "192.168.1.20")]


def test_sends_refused_with_none_going_out_are_offline_until_one_goes_out():
    follower = started()
    assert follower.observe([lan()], 0.5, send_failure="Network is unreachable", sent=0) == []
    assert states(follower) == [(OFFLINE, "cannot send: Network is unreachable")]
    assert follower.observe([lan()], 1.0, sent=0) == [Resync("network back")]
    assert follower.observe([lan()], 1.5, send_failure="Network is unreachable", sent=3) == []
    assert follower.state == CONNECTED


def test_a_gap_in_the_looks_is_a_sleep_and_resyncs():
    follower = started()
    assert follower.observe([lan()], 0.5) == []
    assert follower.observe([lan()], 0.5 + SLEEP_GAP - 0.1) == []
    assert follower.observe([lan()], 0.5 + 3 * SLEEP_GAP) == [Resync("woke")]
    assert states(follower) == []


def test_a_sleep_before_the_first_look_is_a_gap_from_the_bind():
    follower = started()  # bound at 0.0
    assert follower.observe([lan()], 3 * SLEEP_GAP) == [Resync("woke")]
    assert follower.observe([lan()], 3 * SLEEP_GAP + 0.5) == []


def test_a_failed_move_is_offline_with_its_reason_and_is_tried_again():
    follower = started()
    moved = [lan(address="192.168.1.77")]
    assert follower.observe(moved, 0.5) == [Move("eth0", "192.168.1.77")]
    follower.move_failed("cannot open a UDP socket on 192.168.1.77: in use", 0.6)
    assert follower.state == OFFLINE and "in use" in follower.reason
    assert follower.observe(moved, 1.0) == [Move("eth0", "192.168.1.77")]


def test_a_moved_peer_says_hello_to_each_proven_peer_from_its_new_endpoint_and_is_proven_there():
    ann, bob = Reach("a" * 32, "Ann"), Reach("b" * 32, "Bob")
    ann_at, bob_old, bob_new = Endpoint("10.0.0.1", 47477), Endpoint("10.0.0.2", 47477), Endpoint("10.0.0.9", 47477)
    ann.own.add(ann_at)
    bob.own.add(bob_old)

    def deliver(sender, receiver, source, now):
        for hello, destination in sender.datagrams_to_send():
            if isinstance(hello, wire.Hello):
                receiver.hello(sender.pid, hello, source, now)

    ann.add(bob_old, "manual", 0.0)
    ann.handle_timer(0.0)
    for step in range(3):  # the handshake, both ways
        deliver(ann, bob, ann_at, 0.1 * step)
        deliver(bob, ann, bob_old, 0.1 * step)
    assert ann.endpoint(bob.pid) == bob_old and bob.endpoint(ann.pid) == ann_at
    bob.moved(bob_old, bob_new, 1.0)
    assert bob.own == {bob_new}
    for step in range(3):
        deliver(bob, ann, bob_new, 1.0 + 0.1 * step)
        deliver(ann, bob, ann_at, 1.0 + 0.1 * step)
    assert ann.endpoint(bob.pid) == bob_new, "Ann proved Bob's new endpoint"
    assert ann.pid_at(bob_old) is None


def test_netif_sees_this_host_s_interfaces_with_kinds_both_ways():
    for calls in (netif.LinuxNetwork(), netif.PortableNetwork(windows=False)):
        seen = calls.interfaces()
        assert any(i.kind == "loopback" for i in seen), (calls.name, seen)
        assert {(i.name, i.address) for i in seen} == set(calls.ipv4_addresses())
