"""Reliability on a namespace LAN: kernel-level random loss, a host cut off, and kill -9."""

import random
import shutil
import time

import pytest

from tests.testbed.lan import Lan, PeerProcess

pytestmark = pytest.mark.netns


@pytest.fixture
def lan3():
    if shutil.which("iptables") is None:
        pytest.fail("iptables is missing: run packaging/system-deps.sh (make setup does)")
    lan = Lan(3)
    yield lan
    lan.close()


def start_group(lan, tmp_path, names=("Ann", "Bob", "Cat")):
    peers = [PeerProcess(h, a, tmp_path / n, n) for h, a, n in zip(lan.hosts, lan.addresses, names)]
    gid = peers[0].call("create_group", {"desc": "Reliability"})["gid"]
    for peer in peers[1:]:
        peer.wait_notification("group_discovered", lambda p: p["gid"] == gid)
        peer.call("join_group", {"gid": gid})
    for peer in peers:
        peer.wait_for(lambda p=peer: len(next(g for g in p.call("list_groups") if g["gid"] == gid)["members"])
                      == len(peers), what="all members")
    return peers, gid


def post_thread_mix(peers, gid, count, rng, start=0):
    """``count`` messages from the peers in turn, most answering one the poster has seen."""
    mids = []
    for i in range(count):
        peer = peers[(start + i) % len(peers)]
        seen = peer.delivered(gid, last=20)
        parent = rng.choice(seen)["mid"] if seen and rng.random() < 0.7 else None
        mids.append(peer.call("send", {"gid": gid, "text": f"m{start + i}", "parent": parent})["mid"])
    return mids


def assert_complete_and_ordered(peer, gid, expected_mids):
    history = peer.call("history", {"gid": gid}, timeout=30)
    got = [m["mid"] for m in history]
    assert len(got) == len(set(got)), f"{peer.name}: duplicates in history"
    assert set(got) == set(expected_mids), f"{peer.name}: {len(set(expected_mids) - set(got))} missing"
    position = {mid: i for i, mid in enumerate(got)}
    assert all(m["parent"] is None or position[m["parent"]] < position[m["mid"]] for m in history)
    delivered = [m["mid"] for m in peer.delivered(gid)]
    assert len(delivered) == len(set(delivered)), f"{peer.name}: delivered a message twice"


def wait_all(peers, gid, count, timeout):
    for peer in peers:
        peer.wait_for(lambda p=peer: len(p.delivered(gid)) >= count, timeout=timeout,
                      what=f"{count} messages (has {len(peer.delivered(gid))})")


def test_1000_messages_at_20_percent_loss_on_every_host(lan3, tmp_path):
    peers, gid = start_group(lan3, tmp_path)
    try:
        for i in range(3):
            lan3.set_loss(i, 0.2)
        start = time.monotonic()
        mids = post_thread_mix(peers, gid, 1000, random.Random(1))
        wait_all(peers, gid, 1000, timeout=60)
        elapsed = time.monotonic() - start
        for peer in peers:
            assert_complete_and_ordered(peer, gid, mids)
        stats = [p.call("stats") for p in peers]
        assert sum(s["naks_sent"] for s in stats) > 0
        print(f"1000 messages at 20% loss on 3 hosts: complete everywhere in {elapsed:.1f} s")
    finally:
        for peer in peers:
            peer.shutdown()


def test_cut_off_host_catches_up_both_ways(lan3, tmp_path):
    peers, gid = start_group(lan3, tmp_path)
    ann, bob, cat = peers
    try:
        rng = random.Random(2)
        before = post_thread_mix(peers, gid, 30, rng)
        wait_all(peers, gid, 30, timeout=20)
        lan3.set_link(2, False)
        time.sleep(0.6)  # Cat's peer notices the link is gone
        during = post_thread_mix([ann, bob], gid, 5000, rng, start=30)
        away = [cat.call("send", {"gid": gid, "text": f"cat alone {i}", "parent": None})["mid"] for i in range(50)]
        start = time.monotonic()
        lan3.set_link(2, True)
        wait_all(peers, gid, 5080, timeout=90)
        elapsed = time.monotonic() - start
        for peer in peers:
            assert_complete_and_ordered(peer, gid, before + during + away)
        print(f"host back after 5,000 messages: synchronized both ways in {elapsed:.1f} s")
    finally:
        for peer in peers:
            peer.shutdown()


def test_kill_9_mid_stream_loses_nothing(lan3, tmp_path):
    peers, gid = start_group(lan3, tmp_path)
    ann, bob, cat = peers
    try:
        rng = random.Random(3)
        first = post_thread_mix(peers, gid, 200, rng)
        bob_own = [m["mid"] for m in bob.call("history", {"gid": gid}) if m["sender"] == bob.pid]
        assert bob_own
        more = post_thread_mix([ann, cat], gid, 100, rng, start=200)
        bob.kill()  # kill -9, mid-stream
        more += post_thread_mix([ann, cat], gid, 300, rng, start=300)
        bob = PeerProcess(lan3.hosts[1], lan3.addresses[1], tmp_path / "Bob", "Bob")
        peers = [ann, bob, cat]
        bob.wait_for(lambda: len(bob.call("history", {"gid": gid})) >= 600, timeout=60, what="resync after restart")
        assert_complete_and_ordered(bob, gid, first + more)
        history = bob.call("history", {"gid": gid})
        assert [m["mid"] for m in history if m["sender"] == bob.pid] == bob_own
        # Seqnos continue after the crash: no reuse.
        new = bob.call("send", {"gid": gid, "text": "back", "parent": None})["mid"]
        assert int(new.rsplit(":", 1)[1]) == max(int(m.rsplit(":", 1)[1]) for m in bob_own) + 1
        wait_all([ann, cat], gid, 601, timeout=20)
    finally:
        for peer in peers:
            peer.shutdown()
