"""Seeded discrete-event simulation of a group chat over a broadcast network.

Every process runs one ordering policy.  The simulator owns time and the
network: it sends the workload's messages (a reply only after its writer has
read the parent), carries data and control packets with the profile's transit
times, fires policy timers, and records when every copy of every message was
received and delivered.  Policies never read a clock; ``now`` is passed in.

Data transit times come from the workload, so every policy sees the same
network for the chat itself; control packets (order messages, acks, null
messages) draw from a stream seeded by the seed and the policy's name.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Protocol

from .network import Transit
from .workload import Workload

_SEND, _PACKET, _TIMER = 0, 1, 2


@dataclass(slots=True)
class DataBody:
    index: int
    mid: tuple[int, int]
    parent_mid: tuple[int, int] | None
    header: Any = None


@dataclass(slots=True)
class Packet:
    kind: str
    """``data`` for chat messages; policies name their control packets."""
    src: int
    body: Any
    fifo: int
    """Position in ``src``'s stream of sent packets of every kind, from 1."""


class Net:
    """What a policy at one process may do to the world: broadcast and set timers."""

    __slots__ = ("_sim", "pid")

    def __init__(self, sim: Simulation, pid: int) -> None:
        self._sim = sim
        self.pid = pid

    @property
    def now(self) -> float:
        return self._sim.now

    def broadcast(self, kind: str, body: Any) -> None:
        self._sim.broadcast_control(self.pid, kind, body)

    def set_timer(self, at_ms: float, token: Any = None) -> None:
        self._sim.schedule(max(at_ms, self._sim.now), _TIMER, self.pid, token)


@dataclass
class SimResult:
    policy: str
    workload: Workload
    send_ms: list[float]
    receipt_ms: list[list[float | None]]
    """``receipt_ms[k][r]``: first arrival of message k's data at r (None at its sender)."""
    delivery_ms: list[list[float | None]]
    logs: list[list[int]]
    """Per process, the message indices in the order it delivered them (own messages included)."""
    sends: list[list[int]] = field(default_factory=list)
    """Per process, the indices it sent, in order."""
    events: list[list[tuple[str, int]]] = field(default_factory=list)
    """Per process, ``("send"|"deliver", index)`` in the order they happened."""
    control_packets: dict[str, int] = field(default_factory=dict)


class PolicyClass(Protocol):
    """What the simulator and the metrics use of an ordering policy's class (``ordering_study.policies``)."""

    name: str

    def __call__(self, pid: int, workload: Workload, net: Net) -> Any: ...

    def header_bytes(self, processes: int) -> int: ...

    def control_bytes(self, kind: str, processes: int) -> int: ...


class Simulation:
    def __init__(self, workload: Workload, policy_cls: PolicyClass, seed: int) -> None:
        self.workload = workload
        self.now = 0.0
        self._queue: list[tuple] = []
        self._tie = itertools.count()
        n = workload.processes
        self._control_transit = Transit(
            workload.profile,
            list(workload.receiver_scales),
            f"control/{seed}/{policy_cls.name}/{workload.profile.name}/{n}",
        )
        self._fifo = [0] * n
        self._seqno = [0] * n
        self._mids: list[tuple[int, int] | None] = [None] * len(workload.messages)
        self._readers: dict[tuple[int, int], list[int]] = {}
        self._read: set[tuple[int, int]] = set()
        m = len(workload.messages)
        self.result = SimResult(
            policy=policy_cls.name,
            workload=workload,
            send_ms=[float("nan")] * m,
            receipt_ms=[[None] * n for _ in range(m)],
            delivery_ms=[[None] * n for _ in range(m)],
            logs=[[] for _ in range(n)],
            sends=[[] for _ in range(n)],
            events=[[] for _ in range(n)],
        )
        self.nodes = [policy_cls(pid, workload, Net(self, pid)) for pid in range(n)]

    # -- plumbing --------------------------------------------------------------

    def schedule(self, at: float, kind: int, a: Any, b: Any = None) -> None:
        heapq.heappush(self._queue, (at, next(self._tie), kind, a, b))

    def broadcast_control(self, src: int, kind: str, body: Any) -> None:
        self._fifo[src] += 1
        packet = Packet(kind, src, body, self._fifo[src])
        counts = self.result.control_packets
        counts[kind] = counts.get(kind, 0) + 1
        now, queue, tie = self.now, self._queue, self._tie
        for dst, transit in enumerate(self._control_transit.broadcast(src)):
            if dst != src:
                heapq.heappush(queue, (now + transit, next(tie), _PACKET, dst, packet))

    # -- the run ---------------------------------------------------------------

    def run(self) -> SimResult:
        for msg in self.workload.messages:
            if msg.parent is None:
                self.schedule(msg.decided_ms, _SEND, msg.index)
            else:
                self._readers.setdefault((msg.parent, msg.sender), []).append(msg.index)
        queue, nodes = self._queue, self.nodes
        while queue:
            at, _, kind, a, b = heapq.heappop(queue)
            self.now = at
            if kind == _PACKET:
                packet = b
                if packet.kind == "data":
                    receipts = self.result.receipt_ms[packet.body.index]
                    if receipts[a] is None:
                        receipts[a] = at
                self._delivered(a, nodes[a].on_packet(packet, at))
            elif kind == _TIMER:
                self._delivered(a, nodes[a].on_timer(b, at))
            else:
                self._send(a)
        return self.result

    def _send(self, index: int) -> None:
        msg = self.workload.messages[index]
        src = msg.sender
        self._seqno[src] += 1
        mid = (src, self._seqno[src])
        self._mids[index] = mid
        parent_mid = None if msg.parent is None else self._mids[msg.parent]
        body = DataBody(index, mid, parent_mid)
        node = self.nodes[src]
        body.header = node.stamp(body)
        result = self.result
        result.send_ms[index] = self.now
        result.sends[src].append(index)
        result.events[src].append(("send", index))
        self._fifo[src] += 1
        packet = Packet("data", src, body, self._fifo[src])
        row = self.workload.transit_ms[index]
        for dst in range(self.workload.processes):
            if dst != src:
                self.schedule(self.now + row[dst], _PACKET, dst, packet)
        self._mark_read(index, src)
        self._delivered(src, node.on_own(body, self.now))

    def _delivered(self, pid: int, indices: list[int]) -> None:
        if not indices:
            return
        result, now = self.result, self.now
        log, events = result.logs[pid], result.events[pid]
        senders = self.workload.messages
        for index in indices:
            slot = result.delivery_ms[index]
            if slot[pid] is not None:
                raise RuntimeError(f"{result.policy}: message {index} delivered twice at {pid}")
            slot[pid] = now
            log.append(index)
            events.append(("deliver", index))
            if senders[index].sender != pid:
                self._mark_read(index, pid)

    def _mark_read(self, index: int, pid: int) -> None:
        """``pid``'s user has now read message ``index``: its answers to it get written."""
        key = (index, pid)
        if key in self._read:
            return
        self._read.add(key)
        for reply in self._readers.pop(key, ()):
            self.schedule(self.now + self.workload.messages[reply].think_ms, _SEND, reply)


def simulate(workload: Workload, policy_cls: PolicyClass, seed: int = 0) -> SimResult:
    result = Simulation(workload, policy_cls, seed).run()
    missing = sum(
        1
        for row in result.delivery_ms
        for pid, at in enumerate(row)
        if at is None
    )
    if missing:
        raise RuntimeError(f"{policy_cls.name}: {missing} copies never delivered")
    return result
