"""A laptop's day on the namespace LAN (tests/testbed/roaming.py): m2mc-peers started without
``--iface``; Bob's host gets a new address, moves to a second interface, loses its interface and
gets it back, brings a VPN tunnel up and down, and sleeps for a minute.  After each change
messages flow both ways again within the bound, nothing written meanwhile is lost, and Bob's
``network`` notifications went through the states a user must see."""

import time

import pytest

from tests.testbed.roaming import RoamingLan

pytestmark = pytest.mark.netns

FLOW_BOUND = 10.0  # seconds from the new network being usable to messages flowing both ways (the maximum)


def settled_states(lan: RoamingLan, since: int, last: str = "connected", timeout: float = 5.0) -> list[str]:
    """Bob's network states from notification ``since`` on, once the last is ``last`` (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        states = lan.network_states(since)
        if states and states[-1] == last or time.monotonic() > deadline:
            return states
        time.sleep(0.05)


def roam(lan: RoamingLan, kind: str, sleep_seconds: float = 60.0) -> tuple[float, list[str]]:
    before = lan.network_count()
    usable = lan.change(kind, sleep_seconds)
    took = lan.time_to_flow(usable, timeout=FLOW_BOUND + 5)
    print(f"{kind}: messages flow both ways {took} s after the change")
    assert took is not None and took <= FLOW_BOUND, f"{kind}: took {took} s ({lan.bob.stderr_tail()})"
    assert lan.nothing_lost() == [], kind
    return took, settled_states(lan, before) if kind not in ("tunnel", "sleep") else lan.network_states(before)


@pytest.fixture
def day(tmp_path):
    lan = RoamingLan(tmp_path)
    yield lan
    lan.close()


def test_a_new_address_another_interface_and_wi_fi_off_and_on_each_reconnect_and_say_so(day):
    assert day.bob.call("network")["state"] == "connected"
    assert day.bob.call("network")["address"] == day.lan.addresses[1], "no --iface: the LAN interface is chosen"

    _, states = roam(day, "address")
    assert states == ["reconnecting", "connected"], states
    assert day.bob.call("network")["address"] == day.bob_address

    _, states = roam(day, "interface")  # dock to Wi-Fi: the second interface is used once the first is gone
    assert states == ["reconnecting", "connected"], states
    assert day.bob.call("network")["interface"] == day.bob_dev

    _, states = roam(day, "recreate")  # Wi-Fi off and on: offline while it is gone, told why
    assert "offline" in states and states[-2:] == ["reconnecting", "connected"], states
    offline = [n["params"] for n in day.bob.notifications if n["method"] == "network" and n["params"]["state"] == "offline"]
    assert "gone" in offline[-1]["reason"] or "no network" in offline[-1]["reason"], offline[-1]
    stats = day.bob.call("stats")
    assert stats["send_failures"], "sends refused while the interface was gone are counted"


def test_a_vpn_tunnel_coming_and_going_changes_nothing_the_user_sees(day):
    address = day.bob.call("network")["address"]
    _, states = roam(day, "tunnel")
    assert states == [], f"the tunnel moved the peer or changed its state: {states}"
    assert day.bob.call("network") == {"state": "connected", "interface": day.bob_dev, "address": address, "reason": ""}


def test_after_a_minute_asleep_presence_is_right_within_5_s_and_everything_written_meanwhile_arrives(day):
    _, states = roam(day, "sleep", sleep_seconds=60.0)
    woke = time.monotonic()
    bob_pid = day.bob.call("whoami")["pid"]
    everyone_online = day.bob.wait_for(lambda: set(day.presence(day.bob).values()) == {"online"}, timeout=5,
                                       what="everyone online at Bob")
    day.ann.wait_for(lambda: day.presence(day.ann)[bob_pid] == "online", timeout=5, what="Bob online at Ann")
    print(f"presence right {time.monotonic() - woke:.2f} s after waking")
    assert everyone_online and "woke: resynchronising every group" in day.bob.stderr_path.read_text()
    assert states == [], states


def test_where_multicast_is_filtered_unicast_reach_follows_a_new_address(tmp_path):
    lan = RoamingLan(tmp_path, multicast=False)
    try:
        _, states = roam(lan, "address")
        assert states == ["reconnecting", "connected"], states
        bob_pid = lan.bob.call("whoami")["pid"]
        endpoints = {row["pid"]: row["endpoints"] for row in lan.ann.call("peers")}
        assert endpoints[bob_pid] == [f"{lan.bob_address}:47477"], endpoints[bob_pid]
        _, states = roam(lan, "interface")
        assert states == ["reconnecting", "connected"], states
    finally:
        lan.close()
