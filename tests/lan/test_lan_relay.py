"""Relay trees on a namespace LAN: 11 real m2mc-peers in one group, multicast dropped on every
host, and an attacker host.  Nothing is lost and each host sends few copies of a message; a relay
that sleeps (relays nothing) is routed around within 5 s; one that relays garbage is shut out;
and a stranger still gets nothing from a member, the tree's GRAFT included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.store import Store
from tests.testbed.relay_lan import RelayLan, latencies, sends

pytestmark = pytest.mark.netns

PEERS = 11
COPIES_A_HOST = 4  # the bound: each host sends at most 4 copies of a message on average
ROUTED_AROUND = 5.0  # s: a relay that relays nothing is routed around within this

SEND_AND_LISTEN = """
import json, socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((sys.argv[1], 47477))
target = (sys.argv[2], 47477)
for hexed in json.loads(sys.stdin.read()):
    sock.sendto(bytes.fromhex(hexed), target)
sock.settimeout(0.2)
got, end = [], time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    try:
        got.append(sock.recv(65536).hex())
    except socket.timeout:
        pass
print(json.dumps(got))
"""


def from_attacker(lan: RelayLan, target: str, datagrams: list[bytes], listen: float = 2.0) -> list[bytes]:
    """Send ``datagrams`` from the attacker's host to ``target``'s peer; what comes back meanwhile."""
    out = subprocess.run(["ip", "netns", "exec", lan.lan.hosts[-1], sys.executable, "-c", SEND_AND_LISTEN,
                          lan.lan.addresses[-1], target, str(listen)],
                         input=json.dumps([d.hex() for d in datagrams]), capture_output=True, text=True, check=True,
                         timeout=60)
    return [bytes.fromhex(h) for h in json.loads(out.stdout)]


def test_eleven_peers_without_multicast_relay_along_the_tree_route_around_a_bad_relay_and_keep_strangers_out(tmp_path):
    began = time.monotonic()
    lan = RelayLan(tmp_path, PEERS, spare=1)
    try:
        lan.wait_relaying()
        peers, gid = lan.peers, lan.gid
        formed = time.monotonic()
        before = lan.stats()
        texts = sends(peers, gid, writers=4, rate=40, seconds=2, tag="tree")
        for peer in peers:
            peer.wait_for(lambda p=peer: set(texts) <= {m["text"] for m in p.delivered(gid)}, timeout=20,
                          what="every message")
        after = lan.stats()
        pushes = sum(a["relay_pushes_sent"] - b["relay_pushes_sent"] for a, b in zip(after, before))
        copies = sum(a["unicast_copies"] - b["unicast_copies"] for a, b in zip(after, before))
        per_host = (pushes + copies) / (len(texts) * PEERS)
        sent = sum(a["bytes_out"] - b["bytes_out"] for a, b in zip(after, before)) / (len(texts) * PEERS)
        lat = sorted(latencies(peers, texts, 4))
        print(f"formed in {formed - began:.1f} s; {len(texts)} messages, all delivered; {per_host:.2f} copies "
              f"a host a message (pushes {pushes}, other copies {copies}), {sent:.0f} B a host a message, "
              f"p50 {1000 * lat[len(lat) // 2]:.0f} ms, p99 {1000 * lat[int(0.99 * len(lat))]:.0f} ms")
        assert per_host <= COPIES_A_HOST

        # A relay that sleeps: SIGSTOP, so it relays nothing and answers nothing.
        sleeper = peers[5]
        os.kill(sleeper.proc.pid, signal.SIGSTOP)
        try:
            awake = [p for i, p in enumerate(peers) if p is not sleeper]
            texts = sends(awake, gid, writers=4, rate=20, seconds=2, tag="around")
            for peer in awake:
                peer.wait_for(lambda p=peer: set(texts) <= {m["text"] for m in p.delivered(gid)}, timeout=20,
                              what="every message with a relay asleep")
            late = max(latencies(awake, texts, 4))
            print(f"with a relay asleep: the latest delivery {late:.2f} s after its send")
            assert late <= ROUTED_AROUND
        finally:
            os.kill(sleeper.proc.pid, signal.SIGCONT)

        # A member that relays garbage: its key pushes a RELAY whose datagram fails its signature.
        victim, hostile = peers[0], peers[1]
        store = Store(hostile.data_dir / "m2mc.sqlite3")
        hostile_id = store.identity()
        store.close()
        key = hostile_id.relay_key(gid, victim.pid, _dh_of(victim, gid))
        bad = bytearray(wire.encode(hostile_id, wire.Heartbeat(gid, 1, int(time.time() * 1000))))
        bad[-1] ^= 1
        garbage = wire.encode_relay(key, wire.MsgType.RELAY, hostile_id.pid, gid, int(time.time() * 1000) + 10**6,
                                    inner=bytes(bad))
        shown = len(victim.delivered(gid))
        stranger = crypto.Identity.generate()
        graft = wire.encode_relay(stranger.relay_key(gid, victim.pid, _dh_of(victim, gid)), wire.MsgType.GRAFT,
                                  stranger.pid, gid, 1, ranges=((wire.writer_ref(peers[2].pid), 1, 4000),))
        nak = wire.encode(stranger, wire.Nak(gid, peers[2].pid, ((1, 4000),)))
        back = from_attacker(lan, victim.iface, [graft, nak])
        assert all(wire.decode(d).message.__class__ is wire.Hello for d in back if not wire.is_relay(d)), \
            "a stranger gets at most a handshake"
        assert not any(wire.is_relay(d) for d in back)
        subprocess.run(["ip", "netns", "exec", hostile.netns, sys.executable, "-c",
                        "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                        "s.sendto(bytes.fromhex(sys.argv[1]), (sys.argv[2], 47477))", garbage.hex(), victim.iface],
                       check=True, timeout=30)
        victim.wait_for(lambda: victim.call("stats")["relay_garbage"] >= 1, timeout=10, what="the garbage seen")
        assert len(victim.delivered(gid)) == shown
        print(f"whole test {time.monotonic() - began:.1f} s")
    finally:
        lan.close()


def _dh_of(peer, gid: str) -> bytes:
    """A member's direct-message key, from its own store (its record signs it)."""
    store = Store(peer.data_dir / "m2mc.sqlite3")
    try:
        return store.identity().direct_public
    finally:
        store.close()
