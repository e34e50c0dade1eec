"""Edits, deletes, reactions, pins and the topic between m2mc-peer processes on a namespace LAN.

Kernel-level 20 % loss on every host (iptables in each namespace), a forged
edit sent by a member that bypasses its own peer's checks, and a member that
comes back after missing operations (MSP).
"""

import shutil
import sys
import threading
import time

import pytest

from tests.testbed.lan import Lan, PeerProcess

pytestmark = pytest.mark.netns

FORGER = """
import asyncio, sys, time
from m2mc.middleware.chatops import encode
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.types import parse_mid

data_dir, iface, gid, target = sys.argv[1:5]

async def main():
    manager = GroupManager(Config(data_dir=data_dir, iface=iface, zeroconf=False))
    await manager.start()
    # a member's own channel, past the peer's author check: signed by Eve, editing Ann's message
    manager.channels[gid].compose(manager.name, encode("edit", None, 10**6, "forged by Eve"), parse_mid(target),
                                  time.time())
    manager.core.joined[gid].seqno_to_save = True
    manager.flush()
    await asyncio.sleep(4)  # long enough to answer NAKs for it
    await manager.close()

asyncio.run(main())
"""


@pytest.fixture
def lan4():
    if shutil.which("iptables") is None:
        pytest.fail("iptables is missing: run packaging/system-deps.sh (make setup does)")
    lan = Lan(4)
    yield lan
    lan.close()


def state(peer, gid):
    """What a member shows: every message's text and operations' effects, the topic."""
    history = peer.call("history", {"gid": gid}, timeout=30)
    topic = next(g for g in peer.call("list_groups") if g["gid"] == gid)["topic"]
    return ({m["mid"]: (m["text"], m["edited"], m["deleted"], m["reactions"], m["pinned"]) for m in history}, topic)


def converged(peers, gid):
    states = [state(p, gid) for p in peers]
    return states if all(s == states[0] for s in states) else None


def test_operations_converge_at_20_percent_loss_forged_edit_rejected_returning_member_catches_up(lan4, tmp_path):
    names = ("Ann", "Bob", "Cat", "Eve")
    peers = [PeerProcess(h, a, tmp_path / n, n) for h, a, n in zip(lan4.hosts, lan4.addresses, names)]
    ann, bob, cat, eve = peers
    three = [ann, bob, cat]
    try:
        gid = ann.call("create_group", {"desc": "Operations"})["gid"]
        for peer in peers[1:]:
            peer.wait_notification("group_discovered", lambda p: p["gid"] == gid)
            peer.call("join_group", {"gid": gid})
        for peer in peers:
            peer.wait_for(lambda p=peer: len(next(g for g in p.call("list_groups") if g["gid"] == gid)["members"]) == 4,
                          what="all members")
        plans = ann.call("send", {"gid": gid, "text": "Plans for Friday?", "parent": None})["mid"]
        typo = ann.call("send", {"gid": gid, "text": "Lunch at 12:30, canteen", "parent": plans})["mid"]
        oops = ann.call("send", {"gid": gid, "text": "wrong group, sorry", "parent": None})["mid"]
        idea = bob.call("send", {"gid": gid, "text": "Bowling after?", "parent": plans})["mid"]
        for peer in peers:
            peer.wait_for(lambda p=peer: len(p.delivered(gid)) >= 4, what="the four messages")

        # -- errors are clear ---------------------------------------------------------------
        with pytest.raises(AssertionError, match="not the author"):
            bob.call("edit", {"gid": gid, "mid": typo, "text": "mine now"})
        with pytest.raises(AssertionError, match="unknown message"):
            bob.call("react", {"gid": gid, "mid": f"{ann.pid}:999", "emoji": "👍", "on": True})
        with pytest.raises(AssertionError, match="text too long"):
            ann.call("edit", {"gid": gid, "mid": typo, "text": "x" * 9000})

        # -- three members at once, at 20 % loss on every host ---------------------------------
        for i in range(4):
            lan4.set_loss(i, 0.2)

        def operate(peer, k):
            for n in range(6):
                peer.call("set_topic", {"gid": gid, "text": f"{peer.name}'s topic {n}"})
                peer.call("pin", {"gid": gid, "mid": [plans, idea][(n + k) % 2], "on": (n + k) % 3 != 0})
                peer.call("react", {"gid": gid, "mid": plans, "emoji": "👍🎉❤"[n % 3], "on": n % 4 != 3})
            if peer is ann:
                peer.call("edit", {"gid": gid, "mid": typo, "text": "Lunch at 13:00, canteen"})
                peer.call("delete", {"gid": gid, "mid": oops})

        threads = [threading.Thread(target=operate, args=(p, k)) for k, p in enumerate(three)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sent = time.monotonic()
        final = ann.wait_for(lambda: converged(peers, gid), timeout=10, what="all four members in one state")
        elapsed = time.monotonic() - sent
        texts, topic = final[0]
        print(f"operations at 20% loss: {time.monotonic() - started:.1f} s from the first, "
              f"all converged {elapsed:.1f} s after the last was sent")
        assert texts[typo][:3] == ("Lunch at 13:00, canteen", 1, False)
        assert texts[oops][:3] == ("", 0, True)
        assert topic.endswith("topic 5")
        assert any(t[3] for t in texts.values())  # reactions made it
        assert set(texts) == {plans, typo, oops, idea}  # operations never show as messages
        updated = [n for n in bob.notifications if n.get("method") == "updated"]
        assert any(n["params"]["mid"] == typo and n["params"]["edited"] == 1 for n in updated)
        assert any(n.get("method") == "topic_changed" for n in cat.notifications)
        assert sum(p.call("stats")["naks_sent"] for p in peers) > 0  # the loss was real, and repaired
        for i in range(4):
            lan4.set_loss(i, 0.0)

        # -- a forged edit of Ann's message, by Eve ----------------------------------------------
        eve.shutdown()
        forger = lan4.run(3, [sys.executable, "-c", FORGER, str(tmp_path / "Eve"), lan4.addresses[3], gid, typo])
        assert forger.wait(timeout=30) == 0
        for peer in three:
            peer.wait_for(lambda p=peer: p.call("stats")["operations_rejected"] >= 1, what="the forged edit rejected")
            assert state(peer, gid)[0][typo][0] == "Lunch at 13:00, canteen"

        # -- Cat misses operations and catches up through MSP -------------------------------------
        lan4.set_link(2, False)
        time.sleep(0.6)
        ann.call("edit", {"gid": gid, "mid": typo, "text": "Lunch at 13:15"})
        bob.call("set_topic", {"gid": gid, "text": "Friday: lunch 13:15, bowling"})
        bob.call("react", {"gid": gid, "mid": typo, "emoji": "👍", "on": True})
        ann.call("pin", {"gid": gid, "mid": typo, "on": True})
        ann.wait_for(lambda: converged([ann, bob], gid), what="Ann and Bob agree")
        assert state(cat, gid) != state(ann, gid)
        lan4.set_link(2, True)
        cat.wait_for(lambda: state(cat, gid) == state(ann, gid), timeout=20, what="Cat caught up")
        texts, topic = state(cat, gid)
        assert topic == "Friday: lunch 13:15, bowling" and texts[typo][0] == "Lunch at 13:15" and texts[typo][4]
    finally:
        for peer in peers:
            if peer.proc.poll() is None:
                peer.shutdown()
