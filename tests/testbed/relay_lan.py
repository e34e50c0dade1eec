"""Test support: real m2mc-peers on a namespace LAN whose hosts all drop multicast, in one open
group, for the relay trees (tests/lan/test_lan_relay.py and ``app.bench.relay --lan``).

``fanout=True`` starts the peers with the relay tree switched off (``relay_link.RELAY_MIN_MEMBERS``
set past any group), so the same run measures today's copy from each writer to each member.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.testbed.lan import Lan, PeerProcess

FANOUT_PEER = ("import sys; from m2mc.middleware import relay_link; relay_link.RELAY_MIN_MEMBERS = 10**9; "
               "from m2mc.app.peer import main; sys.exit(main())")


def iptables(lan: Lan, index: int, *rule: str) -> None:
    subprocess.run(["ip", "netns", "exec", lan.hosts[index], "iptables", *rule], check=True, capture_output=True)


def drop_multicast(lan: Lan, index: int) -> None:
    """As a switch that filters multicast would: nothing to or from 224.0.0.0/4 (mDNS included)."""
    iptables(lan, index, "-A", "OUTPUT", "-d", "224.0.0.0/4", "-j", "DROP")
    iptables(lan, index, "-A", "INPUT", "-d", "224.0.0.0/4", "-j", "DROP")


def group_size(peer: PeerProcess, gid: str) -> int:
    """How many members ``peer`` counts in group ``gid`` (0 while it is not in it)."""
    return next((len(g["members"]) for g in peer.call("list_groups") if g["gid"] == gid), 0)


def form_group(peers: list[PeerProcess], desc: str, timeout: float) -> str:
    """The first peer creates a group, each other joins it once discovered, and all count every
    member within ``timeout``; returns the group's id."""
    gid = peers[0].call("create_group", {"desc": desc})["gid"]
    deadline = time.monotonic() + timeout
    waiting = list(peers[1:])
    while waiting:
        assert time.monotonic() < deadline, f"{[p.name for p in waiting]} never saw the group"
        for peer in list(waiting):
            if any(n["method"] == "group_discovered" and n["params"]["gid"] == gid for n in list(peer.notifications)):
                peer.call("join_group", {"gid": gid})
                waiting.remove(peer)
        time.sleep(0.1)
    for peer in peers:
        peer.wait_for(lambda p=peer: group_size(p, gid) == len(peers), timeout=max(1.0, deadline - time.monotonic()),
                      what=f"{len(peers)} members")
    return gid


class ArrivalPeer(PeerProcess):
    """A PeerProcess that notes when each delivered message's notification was read (test clock)."""

    def start(self) -> None:
        self.arrived: dict[str, float] = {}
        super().start()

    def on_delivered(self, params: dict) -> None:
        self.arrived.setdefault(params["text"], time.time())


class RelayLan:
    """``peers`` m2mc-peers (and ``spare`` hosts more, for an attacker), multicast dropped on every
    host, each told the others' addresses (as invites would), all in one open group."""

    def __init__(self, tmp: Path, peers: int, spare: int = 0, fanout: bool = False, timeout: float = 60) -> None:
        self.lan = Lan(peers + spare)
        self.peers: list[ArrivalPeer] = []
        try:
            for i in range(peers + spare):
                drop_multicast(self.lan, i)
            program = [sys.executable, "-c", FANOUT_PEER] if fanout else None
            slots: list[ArrivalPeer | None] = [None] * peers
            errors: list[BaseException] = []

            def start(i: int) -> None:
                try:
                    slots[i] = ArrivalPeer(self.lan.hosts[i], self.lan.addresses[i], tmp / f"p{i}", f"p{i}",
                                           extra=["--no-zeroconf"], program=program)
                except BaseException as exc:  # reported below, after every start has ended
                    errors.append(exc)

            threads = [threading.Thread(target=start, args=(i,)) for i in range(peers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            self.peers = [p for p in slots if p is not None]
            if errors:
                raise errors[0]
            for peer in self.peers:
                for other in self.lan.addresses[:peers]:
                    if other != peer.iface:
                        peer.request("add_peer", {"address": other, "wait": 0})  # answered as probed, not proven
            self.gid = form_group(self.peers, "Relayed", timeout)
        except BaseException:
            self.close()
            raise

    def members(self, peer: PeerProcess) -> int:
        return group_size(peer, self.gid)

    def wait_relaying(self, timeout: float = 30) -> None:
        """Until every peer relays with all the others (its tree is on)."""
        want = len(self.peers) - 1
        for peer in self.peers:
            peer.wait_for(lambda p=peer: p.call("stats")["relay_members"] >= want, timeout=timeout,
                          what=f"relaying with {want}")

    def stats(self) -> list[dict]:
        return [peer.call("stats") for peer in self.peers]

    def close(self) -> None:
        for peer in self.peers:
            if peer.proc.poll() is None:
                try:
                    peer.shutdown(timeout=5)
                except Exception:
                    peer.kill()
        self.lan.close()


def sends(peers: list[PeerProcess], gid: str, writers: int, rate: float, seconds: float, tag: str) -> list[str]:
    """``rate`` messages a second in all for ``seconds``, from the first ``writers`` peers in turn
    (each text carries the test clock it was sent at); returns the texts."""
    texts: list[str] = []
    count = int(rate * seconds)
    start = time.time()
    for i in range(count):
        at = start + i / rate
        pause = at - time.time()
        if pause > 0:
            time.sleep(pause)
        text = f"{tag} {i} {time.time():.6f}"
        peer = peers[i % writers]
        # Not waiting for the answer: a loaded machine's round trip would set the rate, not ``rate``.
        peer.send_raw(json.dumps({"jsonrpc": "2.0", "id": next(peer._ids), "method": "send",
                                  "params": {"gid": gid, "text": text, "parent": None}}).encode())
        texts.append(text)
    return texts


def latencies(peers: list[ArrivalPeer], texts: list[str], writers: int) -> list[float]:
    """Seconds from each send to its delivery at each peer but its writer (as far as delivered)."""
    out = []
    for index, peer in enumerate(peers):
        for text in texts:
            _, i, sent = text.rsplit(" ", 2)
            arrived = peer.arrived.get(text)
            if arrived is not None and int(i) % writers != index:
                out.append(arrived - float(sent))
    return out
