"""Bounded work under attack: three m2mc-peers on a namespace LAN and an attacker host that is no member.

The attacker builds validly signed datagrams with our own codec (``middleware.wire``,
``middleware.crypto``) from freshly made keys, and sends them to the group's address.
Each test measures what the members spent (bytes sent, CPU, RSS, latency of real
messages) and asserts the bound named beside it; resources/docs/security.md's attack table lists them.
"""

import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest

from tests.testbed.lan import Lan, PeerProcess
from m2mc.middleware import crypto, wire

pytestmark = pytest.mark.netns
TAP = str(Path(__file__).parents[1] / "testbed" / "udp_tap.py")

HISTORY = 1_000  # messages Ann posts before the attacks: what a repair or sync answer could carry
NON_MEMBER_NAK_BYTES = 64_000  # all members together, answering one non-member NAK
SYNC_FLOOD_REQUESTS = 300
SYNC_FLOOD_BYTES = 5_000_000  # all members together, for 300 non-member SYNC_REQs
SYNC_FLOOD_RSS = 100_000_000  # growth of each member's RSS
BIG_NAK_RANGES = 4_900  # a 54 KB NAK
BIG_NAK_CPU = 0.2  # seconds of CPU per member
FLOOD_SENDERS = 10_300  # one spam message each, past the old 10,000-sender cap
QUIET_MEMBER_HEARD_WITHIN = 10.0  # seconds, after the flood, for a member who never posted


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attacks")
    lan = Lan(4)  # host 3 is the attacker
    peers = [PeerProcess(h, a, tmp / n, n) for h, a, n in zip(lan.hosts, lan.addresses, ["Ann", "Bob", "Cat"])]
    try:
        ann = peers[0]
        gid = ann.call("create_group", {"desc": "Under attack"})["gid"]
        for peer in peers[1:]:
            peer.wait_notification("group_discovered", lambda p: p["gid"] == gid)
            peer.call("join_group", {"gid": gid})
        for peer in peers:
            peer.wait_for(lambda p=peer: len(_group_view(p, gid)["members"]) == 3, what="three members")
        for i in range(HISTORY):  # Cat never posts: the flood test needs a member nobody heard yet
            ann.call("send", {"gid": gid, "text": f"history {i} " + "x" * 200, "parent": None})
        for peer in peers:
            peer.wait_for(lambda p=peer: len(p.delivered(gid)) >= HISTORY, timeout=60, what="the history")
        view = _group_view(ann, gid)
        yield lan, peers, gid, view["addr"], view["port"]
    finally:
        for peer in peers:
            peer.shutdown()
        lan.close()


def _group_view(peer, gid):
    return next(g for g in peer.call("list_groups") if g["gid"] == gid)


def attack(lan, addr, port, datagrams, tmp_path, gap=0.0):
    """Send ``datagrams`` from the attacker host (3) to the group's address."""
    payload = tmp_path / f"attack-{time.monotonic_ns()}.bin"
    payload.write_bytes(msgpack.packb(datagrams))
    subprocess.run(["ip", "netns", "exec", lan.hosts[3], sys.executable, TAP, "send", lan.addresses[3], addr,
                    str(port), str(payload), str(gap)], check=True, timeout=120)


def cpu_seconds(peer) -> float:
    fields = Path(f"/proc/{peer.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def rss_bytes(peer) -> int:
    for line in Path(f"/proc/{peer.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def sent_bytes(peers) -> int:
    return sum(peer.call("stats")["bytes_out"] for peer in peers)


def settle(peers, seconds=2.0):
    """Wait until the members are quiet: their counters stop moving."""
    time.sleep(seconds)


def test_the_peer_runs_in_the_process_we_measure(group):
    _, peers, *_ = group
    assert "m2mc-peer" in Path(f"/proc/{peers[0].proc.pid}/cmdline").read_text()


def test_a_non_member_nak_for_the_whole_history_costs_the_members_almost_nothing(group, tmp_path):
    lan, peers, gid, addr, port = group
    ann = peers[0]
    mallory = crypto.Identity.generate()
    before_strangers = sum(p.call("stats")["stranger_dropped"] for p in peers)
    before = sent_bytes(peers)
    attack(lan, addr, port, [wire.encode(mallory, wire.Nak(gid, ann.pid, ((1, HISTORY),)))], tmp_path)
    settle(peers)
    spent = sent_bytes(peers) - before
    assert spent <= NON_MEMBER_NAK_BYTES, f"members sent {spent:,} bytes for one non-member NAK"
    assert sum(p.call("stats")["stranger_dropped"] for p in peers) >= before_strangers + 3


def test_300_non_member_sync_requests_cost_little_traffic_and_memory(group, tmp_path):
    lan, peers, gid, addr, port = group
    requests = [wire.encode(crypto.Identity.generate(), wire.SyncReq(gid, 1, ()))
                for _ in range(SYNC_FLOOD_REQUESTS)]
    rss = [rss_bytes(p) for p in peers]
    before = sent_bytes(peers)
    attack(lan, addr, port, requests, tmp_path, gap=0.001)
    settle(peers, 3.0)
    spent = sent_bytes(peers) - before
    assert spent <= SYNC_FLOOD_BYTES, f"members sent {spent:,} bytes for {SYNC_FLOOD_REQUESTS} SYNC_REQs"
    for peer, start in zip(peers, rss):
        assert rss_bytes(peer) - start <= SYNC_FLOOD_RSS, f"{peer.name}: RSS grew by {rss_bytes(peer) - start:,}"


def test_a_54_kb_nak_of_4900_ranges_costs_little_cpu(group, tmp_path):
    lan, peers, gid, addr, port = group
    ann = peers[0]
    ranges = tuple((1 + i * 5_000, i * 5_000 + 4_999) for i in range(BIG_NAK_RANGES))
    datagram = wire.encode(crypto.Identity.generate(), wire.Nak(gid, ann.pid, ranges))
    assert len(datagram) > 50_000
    cpu = [cpu_seconds(p) for p in peers]
    attack(lan, addr, port, [datagram], tmp_path)
    settle(peers, 1.5)
    for peer, start in zip(peers, cpu):
        spent = cpu_seconds(peer) - start
        assert spent <= BIG_NAK_CPU, f"{peer.name}: {spent:.2f} s of CPU for one NAK"


def test_after_a_flood_of_spam_senders_a_member_who_never_posted_is_heard(group, tmp_path):
    lan, peers, gid, addr, port = group
    ann, bob, cat = peers
    assert not [m for m in ann.delivered(gid) if m["sender"] == cat.pid], "Cat must not have posted yet"
    spam = []
    for i in range(FLOOD_SENDERS):
        spammer = crypto.Identity.generate()
        spam.append(wire.encode(spammer, wire.signed_data(spammer, gid, 10**9, None, 0, "spam", f"buy {i}")))
    naks = sum(p.call("stats")["naks_sent"] for p in peers)
    attack(lan, addr, port, spam, tmp_path, gap=0.0002)
    settle(peers, 1.0)
    sent = time.monotonic()
    mid = cat.call("send", {"gid": gid, "text": "first words from Cat", "parent": None})["mid"]
    for peer in (ann, bob):
        peer.wait_for(lambda p=peer: any(m["mid"] == mid for m in p.delivered(gid)),
                      timeout=QUIET_MEMBER_HEARD_WITHIN, what="Cat's first message")
    heard = time.monotonic() - sent
    assert heard <= QUIET_MEMBER_HEARD_WITHIN
    for peer in peers:
        assert not any(m["sender_name"] == "spam" for m in peer.delivered(gid)), f"{peer.name} delivered spam"
        assert peer.call("stats")["stranger_dropped"] >= FLOOD_SENDERS // 2  # most arrived, all dropped
    assert sum(p.call("stats")["naks_sent"] for p in peers) == naks, "spam at seqno 10^9 was NAKed"
