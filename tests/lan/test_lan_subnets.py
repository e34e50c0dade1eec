"""Site relays on the namespace LAN (issue 46 point 3): two subnets of real m2mc-peers joined by a
router that forwards unicast and no multicast, one group.  Each subnet keeps multicast; every
message reaches every member; what crosses the router is carried by each side's two relays (the
lowest pids), at most two copies of a message each way; when a relay leaves, another takes its
place at once and nothing is lost."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from tests.testbed.subnets import Subnets

pytestmark = pytest.mark.netns

PER_SIDE = 3
MOST_COPIES = 2  # of one message, each way across the router
REPLACED_WITHIN = 5.0  # s: a relay that leaves is replaced within this


def send_round(subnets: Subnets, writers, tag: str, timeout: float) -> list[str]:
    texts = []
    for peer in writers:
        texts.append(f"{tag} from {peer.name}")
        peer.call("send", {"gid": subnets.gid, "text": texts[-1], "parent": None})
    for peer in subnets.peers:
        if peer.proc.poll() is None:
            peer.wait_for(lambda p=peer: set(texts) <= {m["text"] for m in p.delivered(subnets.gid)},
                          timeout=timeout, what=f"every {tag!r} message")
    return texts


def crossed(subnets: Subnets, capture, texts: list[str]) -> dict[tuple[str, int], Counter]:
    """For each (text, side it crossed to): the copies that crossed, by sending host."""
    out: dict[tuple[str, int], Counter] = {}
    for needle, datagram in capture.find([t.encode() for t in texts], unicast_only=True):
        to = subnets.crossing(datagram)
        if to is not None:
            out.setdefault((needle.decode(), to), Counter())[datagram.source[0]] += 1
    return out


def test_two_subnets_keep_multicast_and_two_relays_a_side_carry_each_message_across(tmp_path):
    began = time.monotonic()
    subnets = Subnets(tmp_path, PER_SIDE)
    try:
        address = {p.pid: p.iface for p in subnets.peers}
        relays = {side: {address[p.pid] for p in sorted(subnets.side(side), key=lambda p: p.pid)[:2]}
                  for side in (0, 1)}
        send_round(subnets, subnets.peers, "warm-up", timeout=15)  # each side learns who it hears by multicast
        with subnets.capture(tmp_path / "router.pcap") as capture:
            texts = send_round(subnets, subnets.peers, "hello", timeout=10)
            time.sleep(0.5)
        copies = crossed(subnets, capture, texts)
        print("copies crossing the router, by message and sending host:", copies)
        for text in texts:
            writer = next(p for p in subnets.peers if text.endswith(p.name))
            there = 1 - subnets.side_of[writer.pid]
            sent = copies.get((text, there), Counter())
            assert 1 <= sum(sent.values()) <= MOST_COPIES, (text, sent)
            assert set(sent) <= relays[1 - there], f"only {relays[1 - there]} carry {text!r} across, not {sent}"
            assert (text, 1 - there) not in copies, "nothing comes back"
        stats = [p.call("stats") for p in subnets.peers]
        assert sum(s["site_forwarded"] for s in stats) > 0 and sum(s["site_remulticast"] for s in stats) > 0

        # The first relay of side 0 leaves (its goodbye is heard at once): the next lowest pid takes its place.
        leaving = next(p for p in subnets.side(0) if p.iface == min(relays[0], key=lambda a: address_pid(subnets, a)))
        leaving.shutdown()
        left_at = time.monotonic()
        time.sleep(1.0)
        rest = [p for p in subnets.peers if p is not leaving]
        with subnets.capture(tmp_path / "after.pcap") as capture:
            later = send_round(subnets, rest, "after", timeout=REPLACED_WITHIN)
            time.sleep(0.5)
        assert time.monotonic() - left_at <= REPLACED_WITHIN + 2.0
        remaining = {address[p.pid] for p in sorted(subnets.side(0), key=lambda p: p.pid) if p is not leaving}
        copies = crossed(subnets, capture, later)
        print("after the relay left:", copies)
        for text in later:
            writer = next(p for p in rest if text.endswith(p.name))
            if subnets.side_of[writer.pid] == 0:
                sent = copies.get((text, 1), Counter())
                assert 1 <= sum(sent.values()) <= MOST_COPIES and set(sent) <= remaining, (text, sent)
    finally:
        subnets.close()
    print(f"the test took {time.monotonic() - began:.1f} s")


def address_pid(subnets: Subnets, iface: str) -> str:
    return next(p.pid for p in subnets.peers if p.iface == iface)
