"""Test support: several GroupChannel cores on a simulated lossy LAN with a hand-driven clock."""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter

from m2mc.middleware import crypto, wire
from m2mc.middleware.channel import GroupChannel, Replaced
from tests.testbed.faults import FaultInjector

GID = "g-sim"


class SimPeer:
    def __init__(self, identity: crypto.Identity, rng: random.Random, members: set[str] | None = None) -> None:
        self.identity = identity
        self.pid = identity.pid
        self.stored: dict[tuple, wire.StoredMessage] = {}
        self.order: list[tuple] = []  # delivery order of mids
        self.position: dict[tuple, int] = {}  # mid -> index in order
        # ``members``: the pids this peer knows as members (shared by the LAN's peers unless a test
        # gives one its own); None takes every signer for a member.
        self.members = members
        self.channel = GroupChannel(GID, identity, fetch=self.fetch, rng=rng,
                                    is_member=None if members is None else members.__contains__,
                                    members=None if members is None else lambda: members)
        self.events: list = []

    def fetch(self, gid, mids):
        found = [self.stored[m] for m in mids if m in self.stored]
        return sorted(found, key=lambda m: self.position[(m.sender, m.seqno)])

    def collect(self) -> None:
        for message in self.channel.deliveries():
            mid = message.mid
            assert mid not in self.stored, f"{self.pid} delivered {mid} twice"
            self.stored[mid] = wire.StoredMessage(mid[0], mid[1], message.parent, message.sent_at,
                                                  message.sender_name, message.text, message.public_key,
                                                  message.signature)
            self.position[mid] = len(self.order)
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
        # Keys from the seed: the responders' line is drawn from pids, so runs repeat exactly.
        identities = [crypto.Identity.from_bytes(self.rng.randbytes(32)) for _ in range(peers)]
        self.members = {identity.pid for identity in identities}
        self.peers = [SimPeer(identity, random.Random(seed * 100 + i), self.members)
                      for i, identity in enumerate(identities)]
        for peer in self.peers:
            peer.channel.group_size = peers
        self.cut: set[str] = set()  # pids whose link is down
        self._queue: list = []
        self._seq = itertools.count()
        self.bytes_on_wire = 0
        self.datagrams = 0
        self.by_type: Counter[str] = Counter()  # datagrams sent, by message type
        self.bytes_by_type: Counter[str] = Counter()
        self.last_control_at = self.now
        self.lost_originals: set[tuple] = set()  # messages whose first sending some peer missed
        self._timers: list = []  # (deadline, seq, pid), stale entries skipped
        self._deadline: dict[str, float | None] = {}
        self._decoded: dict[bytes, wire.Envelope] = {}
        # Slow receivers: pid -> (bytes/s it reads, bytes its socket buffer holds); past that, drops.
        self.capacity: dict[str, tuple[float, float]] = {}
        self._backlog: dict[str, tuple[float, float]] = {}  # pid -> (bytes waiting, as of when)
        self.overflow_drops = 0

    def _overflows(self, pid: str, size: int) -> bool:
        """Whether a slow receiver's socket buffer is too full to take ``size`` more bytes now."""
        rate, buffer = self.capacity[pid]
        waiting, at = self._backlog.get(pid, (0.0, self.now))
        waiting = max(0.0, waiting - (self.now - at) * rate)
        if waiting + size > buffer:
            self._backlog[pid] = (waiting, self.now)
            self.overflow_drops += 1
            return True
        self._backlog[pid] = (waiting + size, self.now)
        return False

    def transmit(self, sender: SimPeer) -> None:
        for message in sender.channel.datagrams_to_send(self.now):
            data = wire.encode(sender.identity, message)
            kind = type(message).__name__
            self.bytes_on_wire += len(data)
            self.datagrams += 1
            self.by_type[kind] += 1
            self.bytes_by_type[kind] += len(data)
            if kind != "DataBatch":
                self.last_control_at = self.now
            if sender.pid in self.cut:
                continue
            for peer in self.peers:
                if peer is sender or peer.pid in self.cut:
                    continue
                arrivals = self.faults.arrivals(self.now)
                if not arrivals and isinstance(message, wire.DataBatch):
                    self.lost_originals.update((sender.pid, item[0]) for item in message.items)
                for at in arrivals:
                    heapq.heappush(self._queue, (at, next(self._seq), peer.pid, data))
        self._arm(sender)

    def _arm(self, peer: SimPeer) -> None:
        deadline = peer.channel.get_timer()
        if deadline is not None and deadline != self._deadline.get(peer.pid):
            heapq.heappush(self._timers, (deadline, next(self._seq), peer.pid))
        self._deadline[peer.pid] = deadline

    def send(self, peer: SimPeer, text: str, parent=None):
        data = peer.channel.compose(peer.pid, text, parent, self.now)
        self.transmit(peer)  # signs the message and sends it
        peer.collect()
        return (peer.pid, data.seqno)

    def _decode(self, data: bytes) -> wire.Envelope:
        envelope = self._decoded.get(data)
        if envelope is None:  # every receiver would decode (and verify) the same bytes
            envelope = self._decoded[data] = wire.decode(data)
            if len(self._decoded) > 10_000:
                self._decoded.clear()
        return envelope

    def step_until(self, until: float) -> None:
        """Run datagram arrivals and timers in time order up to ``until``."""
        by_pid = {p.pid: p for p in self.peers}
        for peer in self.peers:  # tests may have called a channel directly
            self._arm(peer)
        timers = self._timers
        while True:
            while timers and self._deadline.get(timers[0][2]) != timers[0][0]:
                heapq.heappop(timers)  # superseded
            next_timer = timers[0][0] if timers else None
            next_arrival = self._queue[0][0] if self._queue else None
            candidates = [t for t in (next_arrival, next_timer) if t is not None]
            if not candidates or min(candidates) > until:
                self.now = max(self.now, until)
                return
            if next_arrival is not None and (next_timer is None or next_arrival <= next_timer):
                at, _, pid, data = heapq.heappop(self._queue)
                self.now = max(self.now, at)
                if pid in self.capacity and self._overflows(pid, len(data)):
                    continue
                peer = by_pid[pid]
                envelope = self._decode(data)
                peer.channel.receive(envelope.sender, envelope.message, self.now, envelope.public_key)
            else:
                at, _, pid = heapq.heappop(timers)
                self._deadline[pid] = None
                peer = by_pid[pid]
                self.now = max(self.now, at)
                peer.channel.handle_timer(self.now)
            peer.collect()
            self.transmit(peer)

    def settle(self, limit: float = 120.0) -> None:
        self.step_until(self.now + limit)
