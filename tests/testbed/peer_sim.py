"""Test support: whole peers (PeerCore and its store) on a simulated lossy LAN with a hand-driven clock.

Like ``tests/testbed/sim.py`` one level up: each peer is a :class:`PeerCore` with its own
store (memory or SQLite), datagrams cross a :class:`FaultInjector`, and the
clock only moves when a test steps it.  A peer runs each input as the asyncio
adapter does: the input, then ``PeerCore.turn`` (persisted), then its datagrams
(transmit), then its events (notify).  :meth:`PeerLan.run` can kill a peer between those
steps; :meth:`PeerLan.restart` starts it again from what its store kept.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from typing import Callable

from m2mc.middleware import crypto
from m2mc.middleware.addresses import Arrival, Endpoint, GroupAddress, Via
from m2mc.middleware.peer_core import CONTROL_ADDR, Datagram, PeerCore
from m2mc.middleware.store_api import PeerStore
from m2mc.middleware.events import (DirectDelivered, DirectStatusChanged, Event, MessagesDelivered, MessagesUpdated,
                                    WarningRaised)
from m2mc.middleware.types import ChatMessage, DirectMessage, Mid
from tests.testbed.faults import FaultInjector
from tests.testbed.stores import after_crash

# Where a run can kill the peer: after the commit, before the datagrams go out;
# after they went out, before the listener hears.
BEFORE_TRANSMIT = "before transmit"
BEFORE_NOTIFY = "before notify"


class Recorder:
    """What the user of a peer was shown, kept across its restarts."""

    def __init__(self) -> None:
        self.shown: list[ChatMessage] = []
        self.updated: list[ChatMessage] = []  # messages shown again, as operations changed them
        self.warnings: list[str] = []
        self.direct: list[DirectMessage] = []  # direct messages shown, own included
        self.statuses: list[DirectStatusChanged] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, DirectDelivered):
            self.direct += event.messages
        elif isinstance(event, DirectStatusChanged):
            self.statuses.append(event)
        elif isinstance(event, MessagesDelivered):
            self.shown += event.messages
        elif isinstance(event, MessagesUpdated):
            self.updated += event.messages
        elif isinstance(event, WarningRaised):
            self.warnings.append(event.text)


class SimNode:
    def __init__(self, lan: PeerLan, store: PeerStore, name: str, seed: int, endpoint: Endpoint | None = None) -> None:
        self.lan = lan
        self.store = store
        self.name = name
        self.seed = seed
        self.endpoint = endpoint  # where unicast reaches it (PeerLan(unicast=True))
        self.recorder = Recorder()
        self.starts = 0
        self.core: PeerCore | None = None
        self.start()

    def start(self) -> None:
        self.starts += 1
        self.core = PeerCore(self.store, self.lan.now, self.name,
                             rng=random.Random(self.seed * 1_000 + self.starts))
        if self.endpoint is not None:
            self.core.reach.own = {self.endpoint}
        self.core.warn_conflicts_held()
        self.core.advertise()

    @property
    def up(self) -> bool:
        return self.core is not None

    @property
    def pid(self) -> str:
        return self.store.identity().pid

    def history(self, gid: str) -> list[ChatMessage]:
        return self.store.history(gid)


class PeerLan:
    MAX_STEPS = 50_000  # per step_until: far past what a test's conversation needs
    def __init__(self, stores: list[PeerStore], faults: FaultInjector | None = None, seed: int = 1,
                 unicast: bool = False) -> None:
        """``unicast``: each peer has an endpoint (10.77.0.<n>:47477) that datagrams to it reach, and
        every datagram arrives with its sender's endpoint as source (else unicast goes nowhere)."""
        self.now = 1_000.0
        self.faults = faults or FaultInjector(rng=random.Random(seed))
        self.unicast = unicast
        # (sender index, receiver index) -> extra one-way delay (s), or None: the link is cut
        self.links: dict[tuple[int, int], float | None] = {}
        self.nodes = [SimNode(self, store, f"peer{i}", seed * 100 + i,
                              Endpoint(f"10.77.0.{i + 1}", 47477) if unicast else None)
                      for i, store in enumerate(stores)]
        # (arrival, tie, node index, datagram, sender's endpoint)
        self._queue: list[tuple[float, int, int, Datagram, Endpoint | None]] = []
        self._tie = itertools.count()
        self.sent: Counter[str] = Counter()  # datagrams sent, by destination kind
        self.sent_by: Counter[str] = Counter()  # datagrams sent, by peer name
        for node in self.nodes:
            self.run(node, lambda core: None)

    # -- running a peer as the adapter does -------------------------------------------

    def run(self, node: SimNode, action: Callable[[PeerCore], object], crash: str | None = None) -> object:
        """``action`` on the node's core, then persist, transmit and notify, unless the node is
        killed at ``crash`` (its process state is gone, its store keeps what was committed)."""
        core = node.core
        assert core is not None, f"{node.name} is down"
        result = action(core)
        turn = core.turn(self.now)  # persisted
        if crash == BEFORE_TRANSMIT:
            self.kill(node)
            return result
        self.transmit(node, turn.datagrams)
        if crash == BEFORE_NOTIFY:
            self.kill(node)
            return result
        for event in turn.events:
            node.recorder(event)
        return result

    def transmit(self, sender: SimNode, datagrams: list[Datagram]) -> None:
        source = self.nodes.index(sender)
        for datagram in datagrams:
            destination = datagram.destination
            if self.unicast and isinstance(destination, Endpoint):
                self.sent["unicast"] += 1
                self.sent_by[sender.name] += 1
                for index, node in enumerate(self.nodes):
                    if node.endpoint == destination:
                        self._send(source, index, datagram)
                continue
            # Multicast reaches everyone here, so nobody needs the broadcasts.
            if not isinstance(destination, GroupAddress):
                self.sent["not multicast"] += 1
                continue
            self.sent["control" if destination.host == CONTROL_ADDR else "group"] += 1
            self.sent_by[sender.name] += 1
            for index, node in enumerate(self.nodes):
                if node is not sender:
                    self._send(source, index, datagram)

    def _send(self, source: int, index: int, datagram: Datagram) -> None:
        extra = self.links.get((source, index), 0.0)
        if extra is None:
            return
        for at in self.faults.arrivals(self.now):
            heapq.heappush(self._queue, (at + extra, next(self._tie), index, datagram, self.nodes[source].endpoint))

    def kill(self, node: SimNode) -> None:
        """The process dies: everything not committed is gone, datagrams in flight still arrive."""
        node.core = None
        node.store = after_crash(node.store)

    def restart(self, node: SimNode) -> None:
        node.start()
        self.run(node, lambda core: None)

    # -- the clock ------------------------------------------------------------------------

    def step_until(self, until: float) -> None:
        """Deliver datagrams and fire timers in time order up to ``until``."""
        for _ in range(self.MAX_STEPS):
            timers = [(core.get_timer(), index) for index, node in enumerate(self.nodes)
                      if (core := node.core) is not None]
            due = [(at, index) for at, index in timers if at is not None]
            next_timer = min(due) if due else None
            next_arrival = self._queue[0][0] if self._queue else None
            first = min(t for t in (next_arrival, next_timer[0] if next_timer else None) if t is not None) \
                if next_arrival is not None or next_timer is not None else None
            if first is None or first > until:
                self.now = max(self.now, until)
                return
            self.now = max(self.now, first)
            if next_arrival is not None and next_arrival == first:
                _, _, index, datagram, source = heapq.heappop(self._queue)
                node = self.nodes[index]
                if node.core is None:
                    continue  # a dead peer hears nothing
                destination = datagram.destination
                if isinstance(destination, Endpoint):
                    arrival = Arrival(source, Via.UNICAST)
                else:
                    arrival = Arrival(source, Via.CONTROL if destination.host == CONTROL_ADDR else Via.MULTICAST)
                self.run(node, lambda core: core.receive(datagram.data, arrival, self.now, self.now))
            else:
                assert next_timer is not None
                self.run(self.nodes[next_timer[1]], lambda core: core.handle_timer(self.now))
        raise AssertionError(f"no rest after {self.MAX_STEPS} steps: a timer or a datagram storm never ends")

    def settle(self, seconds: float) -> None:
        self.step_until(self.now + seconds)

    # -- what tests do --------------------------------------------------------------------

    def create_group(self, node: SimNode, desc: str = "sim") -> str:
        return str(self.run(node, lambda core: core.create_group(desc, crypto.new_salt(), None, self.now)))

    def join_all(self, gid: str) -> None:
        """Every other peer learns of the group over GJLP and joins it; the members learn of each other."""
        self.settle(2.0)
        for node in self.nodes:
            core = node.core
            assert core is not None
            record = core.joinable(gid, None)
            if record is not None:
                self.run(node, lambda core: core.join(record, None, self.now, self.now))
        self.settle(5.0)

    def join_until_all(self, gid: str, rounds: int, size: int | None = None) -> None:
        """For up to ``rounds`` simulated seconds, each peer that has not verified the group's record
        advertises (asking for it) and each that has joins, until every peer is a member (and counts
        ``size`` current members, when given): for lossy LANs where one round of :meth:`join_all`
        may not reach everyone."""
        for _ in range(rounds):
            for node in self.nodes:
                groups = node.core.gjlp.groups
                if gid not in groups or not groups[gid].verified:
                    self.run(node, lambda core: core.advertise())
                elif not node.core.gjlp.is_member(gid):
                    record = node.core.joinable(gid, None)
                    self.run(node, lambda core: core.join(record, None, self.now, self.now))
            self.settle(1.0)
            if all(node.core.gjlp.is_member(gid) and (size is None or len(node.core.gjlp.groups[gid].current()) == size)
                   for node in self.nodes):
                return

    def send(self, node: SimNode, gid: str, text: str, parent: Mid | None = None, crash: str | None = None) -> Mid:
        mid = self.run(node, lambda core: core.send(gid, text, parent, self.now, self.now), crash)
        assert isinstance(mid, tuple)
        return mid
