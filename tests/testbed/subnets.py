"""Test support: two namespace LANs joined by a router that forwards unicast and no multicast, with
real m2mc-peers on each, in one open group (tests/lan/test_lan_subnets.py).

Each peer is told the other subnet's addresses (as invites would); its own subnet it finds by
multicast.  :meth:`Subnets.capture` records what enters the router, to count what crosses.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from tests.testbed.capture import Capture, Datagram
from tests.testbed.lan import Lan, PeerProcess
from tests.testbed.netns import Router
from tests.testbed.relay_lan import form_group, group_size


class Subnets:
    def __init__(self, tmp: Path, per_side: int, timeout: float = 30) -> None:
        self.sides = (Lan(per_side), Lan(per_side))
        self.router: Router | None = None
        self.peers: list[PeerProcess] = []
        try:
            self.router = Router(*self.sides)
            hosts = [(side, i) for side in range(2) for i in range(per_side)]
            slots: list[PeerProcess | None] = [None] * len(hosts)
            errors: list[BaseException] = []

            def start(n: int) -> None:
                side, i = hosts[n]
                lan = self.sides[side]
                try:
                    slots[n] = PeerProcess(lan.hosts[i], lan.addresses[i], tmp / f"s{side}p{i}", f"s{side}p{i}",
                                           extra=["--no-zeroconf"])
                except BaseException as exc:  # reported below, after every start has ended
                    errors.append(exc)

            threads = [threading.Thread(target=start, args=(n,)) for n in range(len(hosts))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            self.peers = [p for p in slots if p is not None]
            if errors:
                raise errors[0]
            self.side_of = {peer.pid: side for peer, (side, _) in zip(self.peers, hosts)}
            for peer, (side, _) in zip(self.peers, hosts):
                for other in self.sides[1 - side].addresses:
                    peer.request("add_peer", {"address": other, "wait": 0})  # answered as probed, not proven
            self.gid = form_group(self.peers, "Two floors", timeout)
        except BaseException:
            self.close()
            raise

    def members(self, peer: PeerProcess) -> int:
        return group_size(peer, self.gid)

    def side(self, side: int) -> list[PeerProcess]:
        return [p for p in self.peers if self.side_of[p.pid] == side]

    def capture(self, path: Path) -> Capture:
        """What enters the router from either side while it runs (each crossing datagram once)."""
        assert self.router is not None
        return Capture(SimpleNamespace(hub=self.router.name), path)

    def crossing(self, datagram: Datagram) -> int | None:
        """The side a unicast datagram seen at the router crosses to (None: it stays, or is not unicast)."""
        if not datagram.unicast:
            return None
        subnets = [lan.subnet + "." for lan in self.sides]
        to = next((i for i, s in enumerate(subnets) if datagram.destination[0].startswith(s)), None)
        start = next((i for i, s in enumerate(subnets) if datagram.source[0].startswith(s)), None)
        return to if to is not None and start is not None and to != start else None

    def close(self) -> None:
        for peer in self.peers:
            if peer.proc.poll() is None:
                try:
                    peer.shutdown(timeout=5)
                except Exception:
                    peer.kill()
        if self.router is not None:
            self.router.close()
        for lan in self.sides:
            lan.close()
