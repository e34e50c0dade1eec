"""Lock-out (issue 26, item 3) on a namespace LAN: a stranger fills an open group's member
cap with fresh keys' JOINs, and a real newcomer must still be heard by every member."""

import time

import pytest

from tests.testbed.lan import Lan, PeerProcess, send_from
from m2mc.middleware import crypto, wire
from m2mc.middleware.gjlp import ACK_TIMEOUT, MAX_MEMBERS
from m2mc.middleware.peer_core import CONTROL_ADDR, DEFAULT_PORT

pytestmark = pytest.mark.netns

NEWCOMER_HEARD_WITHIN = 10.0  # seconds from join_group to its message delivered by every member


def group_of(peer, gid):
    return next(g for g in peer.call("list_groups") if g["gid"] == gid)


def test_999_fresh_joins_do_not_lock_a_real_newcomer_out(tmp_path):
    lan = Lan(4)
    peers = []
    try:
        peers = [PeerProcess(host, addr, tmp_path / name, name, extra=["--no-zeroconf"])
                 for host, addr, name in zip(lan.hosts, lan.addresses, ("Ann", "Bob", "New"))]
        ann, bob, new = peers
        gid = ann.call("create_group", {"desc": "Open house"})["gid"]
        for peer in (bob, new):
            peer.wait_notification("group_discovered", lambda p: p["gid"] == gid)
        bob.call("join_group", {"gid": gid})
        for peer in (ann, bob):
            peer.wait_for(lambda p=peer: len(group_of(p, gid)["members"]) == 2, what="Ann and Bob")

        # The attacker: MAX_MEMBERS - 1 fresh keys, each JOINing once (validly signed), fast.
        keys = [crypto.Identity.generate() for _ in range(MAX_MEMBERS - 1)]
        joins = [wire.encode(key, wire.Join(wire.sign_member(key, gid, f"ghost{i}", 1, True)))
                 for i, key in enumerate(keys)]
        started = time.monotonic()
        send_from(lan.hosts[3], lan.addresses[3], CONTROL_ADDR, DEFAULT_PORT, joins, pause=0.001)
        sent_in = time.monotonic() - started
        for peer in (ann, bob):
            peer.wait_for(lambda p=peer: len(group_of(p, gid)["members"]) >= MAX_MEMBERS, timeout=30,
                          what="the member table filled")

        started = time.monotonic()
        new.call("join_group", {"gid": gid})
        mid = new.call("send", {"gid": gid, "text": "hello, is anyone there?", "parent": None})["mid"]
        for peer in (ann, bob):
            peer.wait_for(lambda p=peer: any(m["mid"] == mid for m in p.delivered(gid)),
                          timeout=NEWCOMER_HEARD_WITHIN - (time.monotonic() - started), what="the newcomer's message")
        heard_in = time.monotonic() - started
        for peer in (ann, bob):
            assert new.pid in {m["pid"] for m in group_of(peer, gid)["members"]}, peer.name
        stats = {p.name: p.call("stats") for p in (ann, bob)}
        print(f"{len(joins)} fresh JOINs sent in {sent_in:.1f} s; the newcomer's message reached every member "
              f"{heard_in:.2f} s after join_group; records given way: "
              f"{ {n: s.get('member_records_given_way') for n, s in stats.items()} }")
        # Acknowledged: past ACK_TIMEOUT, the newcomer was not warned that nobody hears it.
        time.sleep(max(0.0, ACK_TIMEOUT + 0.5 - (time.monotonic() - started)))
        assert new.call("stats")["joins_unacknowledged"] == 0
        assert not [n for n in new.notifications if n["method"] == "warning"], new.notifications
    finally:
        for peer in peers:
            peer.shutdown()
        lan.close()
