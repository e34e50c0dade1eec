"""A member posting under another member's name, on a namespace LAN: alice and Bob run real
peers, Mal joins from the attacker's host with a key of its own (a real, signed member record
named "Mal") and then signs messages named "alice" and "аlice" (Cyrillic а).  Every peer must
show them as Mal's, by Mal's member record.  Issue 26, item 5."""

import time

import pytest

from tests.testbed.lan import Lan, PeerProcess, send_from
from m2mc.middleware import crypto, wire
from m2mc.middleware.peer_core import CONTROL_ADDR, DEFAULT_PORT as CONTROL_PORT

pytestmark = pytest.mark.netns
FORGED_NAMES = ("alice", "\u0430lice")


def test_a_member_posting_as_alice_is_shown_by_its_own_record_on_every_peer(tmp_path):
    lan = Lan(3)
    peers = []
    try:
        peers = [PeerProcess(host, addr, tmp_path / name, name, extra=["--no-zeroconf"])
                 for host, addr, name in zip(lan.hosts[:2], lan.addresses[:2], ("alice", "Bob"))]
        alice, bob = peers
        gid = alice.call("create_group", {"desc": "Payroll"})["gid"]
        bob.wait_notification("group_discovered", lambda p: p["gid"] == gid)
        bob.call("join_group", {"gid": gid})
        alice.call("send", {"gid": gid, "text": "hello, it is alice", "parent": None})
        group = next(g for g in alice.call("list_groups") if g["gid"] == gid)

        mal = crypto.Identity.generate()
        send_from(lan.hosts[2], lan.addresses[2], CONTROL_ADDR, CONTROL_PORT,
                  [wire.encode(mal, wire.Join(wire.sign_member(mal, gid, "Mal", 1, True)))])
        for peer in peers:
            peer.wait_for(lambda p=peer: any(m["pid"] == mal.pid for m in next(
                g for g in p.call("list_groups") if g["gid"] == gid)["members"]), what="Mal's record")
        now = int(time.time() * 1000)
        send_from(lan.hosts[2], lan.addresses[2], group["addr"], group["port"],
                  [wire.encode(mal, wire.signed_data(mal, gid, seqno, None, now, name, "send the payroll to me"))
                   for seqno, name in enumerate(FORGED_NAMES, 1)])

        for peer in peers:
            peer.wait_for(lambda p=peer: len([m for m in p.delivered(gid) if m["sender"] == mal.pid]) == 2,
                          what="Mal's two messages")
            history = peer.call("history", {"gid": gid})
            shown = [(m["sender_name"], m.get("signed_name")) for m in history if m["sender"] == mal.pid]
            delivered = {m["sender_name"] for m in peer.delivered(gid) if m["sender"] == mal.pid}
            print(f"{peer.name}: Mal's messages shown as {shown}, delivered as {delivered}")
            assert [m["sender_name"] for m in history if m["sender"] == mal.pid] == ["Mal", "Mal"]
            assert [m["signed_name"] for m in history if m["sender"] == mal.pid] == list(FORGED_NAMES)
            assert delivered == {"Mal"}
            assert [m["sender_name"] for m in history if m["sender"] == alice.pid] == ["alice"]
            assert peer.call("stats")["sender_names_differing"] == 2
    finally:
        for peer in peers:
            peer.shutdown()
        lan.close()
