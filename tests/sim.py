"""Test support: several GroupChannel cores on a simulated lossy LAN with a hand-driven clock."""

from __future__ import annotations

import heapq
import itertools
import random

from middleware import crypto, wire
from middleware.channel import GroupChannel, Replaced
from middleware.faults import FaultInjector

GID = "g-sim"


class SimPeer:
    def __init__(self, identity: crypto.Identity, rng: random.Random) -> None:
        self.identity = identity
        self.pid = identity.pid
        self.stored: dict[tuple, wire.StoredMessage] = {}
        self.order: list[tuple] = []  # delivery order of mids
        self.channel = GroupChannel(GID, identity, fetch=self.fetch, rng=rng)
        self.events: list = []

    def fetch(self, gid, mids):
        found = [self.stored[m] for m in mids if m in self.stored]
        position = {m: i for i, m in enumerate(self.order)}
        return sorted(found, key=lambda m: position[(m.sender, m.seqno)])

    def collect(self) -> None:
        for message in self.channel.deliveries():
            mid = message.mid
            assert mid not in self.stored, f"{self.pid} delivered {mid} twice"
            self.stored[mid] = wire.StoredMessage(mid[0], mid[1], message.parent, message.sent_at,
                                                  message.sender_name, message.text, message.public_key,
                                                  message.signature)
            self.order.append(mid)
        for event in self.channel.events():
            if isinstance(event, Replaced):  # as the store does: the kept version takes the old one's place
                self.stored[(event.message.sender, event.message.seqno)] = event.message
            self.events.append(event)


class SimLan:
    def __init__(self, peers: int, faults: FaultInjector | None = None, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.now = 1_000.0
        self.faults = faults or FaultInjector(rng=random.Random(seed + 1))
        self.peers = [SimPeer(crypto.Identity.generate(), random.Random(seed * 100 + i)) for i in range(peers)]
        for peer in self.peers:
            peer.channel.group_size = peers
        self.cut: set[str] = set()  # pids whose link is down
        self._queue: list = []
        self._seq = itertools.count()
        self.bytes_on_wire = 0
        self.datagrams = 0

    def transmit(self, sender: SimPeer) -> None:
        for message in sender.channel.datagrams_to_send():
            data = wire.encode(sender.identity, message)
            self.bytes_on_wire += len(data)
            self.datagrams += 1
            if sender.pid in self.cut:
                continue
            for peer in self.peers:
                if peer is sender or peer.pid in self.cut:
                    continue
                for at in self.faults.arrivals(self.now):
                    heapq.heappush(self._queue, (at, next(self._seq), peer.pid, data))

    def send(self, peer: SimPeer, text: str, parent=None):
        data = peer.channel.compose(peer.pid, text, parent, self.now)
        self.transmit(peer)  # signs the message and sends it
        peer.collect()
        return (peer.pid, data.seqno)

    def step_until(self, until: float) -> None:
        """Run datagram arrivals and timers in time order up to ``until``."""
        by_pid = {p.pid: p for p in self.peers}
        while True:
            timers = [(t, p) for p in self.peers if (t := p.channel.get_timer()) is not None]
            next_timer = min(timers, key=lambda x: x[0]) if timers else None
            next_arrival = self._queue[0][0] if self._queue else None
            candidates = [t for t in (next_arrival, next_timer[0] if next_timer else None) if t is not None]
            if not candidates or min(candidates) > until:
                self.now = max(self.now, until)
                return
            if next_arrival is not None and (next_timer is None or next_arrival <= next_timer[0]):
                at, _, pid, data = heapq.heappop(self._queue)
                self.now = max(self.now, at)
                peer = by_pid[pid]
                envelope = wire.decode(data)
                peer.channel.receive(envelope.sender, envelope.message, self.now, envelope.public_key)
            else:
                at, peer = next_timer
                self.now = max(self.now, at)
                peer.channel.handle_timer(self.now)
            peer.collect()
            self.transmit(peer)

    def settle(self, limit: float = 120.0) -> None:
        self.step_until(self.now + limit)
