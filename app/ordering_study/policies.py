"""The delivery policies compared by the study, one class per policy, one instance per process.

Common interface (the simulator drives it, passing ``now`` in):

* ``stamp(body)`` returns the ordering header of a message this process sends;
* ``on_own(body, now)`` / ``on_packet(packet, now)`` / ``on_timer(token, now)``
  return the indices of the chat messages that became deliverable, in order;
* control traffic (order messages, acks, null messages) goes out through
  ``self.net.broadcast`` and suffers the same delay and loss as data.

Header sizes count only what a policy adds to a data message for ordering,
with 4-byte integers, 8-byte message ids ``(pid, seqno)`` and 8-byte physical
timestamps.  The message's own id is left out: every policy carries it for
duplicate detection and retransmission.  Where a policy needs FIFO channels,
the 4-byte per-sender packet counter that provides them is counted.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Any, ClassVar

from ...middleware.mop import SbOrderer
from ...middleware.obg import ObgCore, Operation

from .simulator import DataBody, Net, Packet
from .workload import Workload

INT_BYTES = 4
MID_BYTES = 2 * INT_BYTES
PHYSICAL_TIME_BYTES = 8


class OrderingPolicy:
    name: ClassVar[str]
    summary: ClassVar[str]
    names_parent: ClassVar[bool] = False
    """True if the header tells a receiver which message a reply answers."""

    def __init__(self, pid: int, workload: Workload, net: Net) -> None:
        self.pid = pid
        self.n = workload.processes
        self.net = net

    @staticmethod
    def header_bytes(processes: int) -> int:
        return 0

    @staticmethod
    def control_bytes(kind: str, processes: int) -> int:
        raise ValueError(f"no control packet {kind!r}")

    def stamp(self, body: DataBody) -> Any:
        return None

    def on_own(self, body: DataBody, now: float) -> list[int]:
        return [body.index]

    def on_packet(self, packet: Packet, now: float) -> list[int]:
        return [packet.body.index]

    def on_timer(self, token: Any, now: float) -> list[int]:
        return []


class FifoInbox:
    """Hands each sender's packets over in the order that sender sent them."""

    __slots__ = ("_expected", "_early")

    def __init__(self, processes: int) -> None:
        self._expected = [1] * processes
        self._early: list[dict[int, Packet]] = [{} for _ in range(processes)]

    def accept(self, packet: Packet) -> list[Packet]:
        src = packet.src
        expected = self._expected[src]
        if packet.fifo != expected:
            if packet.fifo > expected:
                self._early[src][packet.fifo] = packet
            return []
        ready = [packet]
        expected += 1
        early = self._early[src]
        while expected in early:
            ready.append(early.pop(expected))
            expected += 1
        self._expected[src] = expected
        return ready


class ArrivalOrder(OrderingPolicy):
    name = "none"
    summary = "arrival order, no ordering at all"


class SbPolicy(OrderingPolicy):
    """The project's real S_b orderer: a reply waits only for the message it answers."""

    name = "sb"
    summary = "S_b: a reply waits only for its parent (middleware.mop.SbOrderer)"
    names_parent = True

    def __init__(self, pid: int, workload: Workload, net: Net) -> None:
        super().__init__(pid, workload, net)
        self.orderer = SbOrderer()

    @staticmethod
    def header_bytes(processes: int) -> int:
        return MID_BYTES

    def stamp(self, body: DataBody) -> Any:
        return body.parent_mid

    def on_own(self, body: DataBody, now: float) -> list[int]:
        return [index for _, _, index in self.orderer.receive(body.mid, body.header, body.index)]

    def on_packet(self, packet: Packet, now: float) -> list[int]:
        body = packet.body
        return [index for _, _, index in self.orderer.receive(body.mid, body.header, body.index)]


class ObgPolicy(OrderingPolicy):
    """Object-based ordering: S_b for chat messages, ``middleware.obg.ObgCore`` for operations.

    An operation waits only for the message it acts on and the operation it
    saw last on the same object; on a chat-only trace this is exactly S_b.
    """

    name = "obg"
    summary = "OBG: an operation waits only for its message and the last one on its object"
    names_parent = True

    def __init__(self, pid: int, workload: Workload, net: Net) -> None:
        super().__init__(pid, workload, net)
        self.messages = workload.messages
        self.orderer = SbOrderer()
        # The study numbers its processes 0..n-1, and ObgCore only hashes and orders pids: the ints stand
        # in for the middleware's str pids, so mids here are (int, int) where ObgCore's types say (str, int).
        self.obg: Any = ObgCore(self.orderer.is_delivered, max_held=len(workload.messages) + 1)
        self._index: dict[tuple[int, int], int] = {}

    @staticmethod
    def header_bytes(processes: int) -> int:
        return 2 * MID_BYTES + INT_BYTES  # an operation's message, the operation it saw, its counter

    def stamp(self, body: DataBody) -> Any:
        msg = self.messages[body.index]
        if not msg.op:
            return body.parent_mid
        seen, counter = self.obg.stamp(msg.op, body.parent_mid, self.pid, msg.emoji)
        return (body.parent_mid, seen, counter)

    def on_own(self, body: DataBody, now: float) -> list[int]:
        return self._receive(body)

    def on_packet(self, packet: Packet, now: float) -> list[int]:
        return self._receive(packet.body)

    def _receive(self, body: DataBody) -> list[int]:
        msg = self.messages[body.index]
        index = self._index
        if not msg.op:
            delivered = []
            for mid, _, k in self.orderer.receive(body.mid, body.header, body.index):
                delivered.append(k)
                delivered.extend(index[op.op_id] for op in self.obg.message_delivered(mid))
            return delivered
        target, seen, counter = body.header
        index[body.mid] = body.index
        op_mid: Any = body.mid  # (int, int): see __init__
        op = Operation(op_mid, msg.op, target, seen, counter, text=msg.text, emoji=msg.emoji)
        return [index[done.op_id] for done in self.obg.receive(op)]


class CausalPolicy(OrderingPolicy):
    """Birman-Schiper-Stephenson causal broadcast with vector clocks.

    Deliver m from P_j at P_i when V_m[j] = V_i[j] + 1 and V_m[k] <= V_i[k] for
    every k != j.  A held message is filed under the one clock entry it waits
    for, so a delivery re-examines only the messages it can unblock.
    """

    name = "causal"
    summary = "causal order, BSS vector clocks"

    def __init__(self, pid: int, workload: Workload, net: Net) -> None:
        super().__init__(pid, workload, net)
        self.clock = [0] * self.n
        self._waiting: dict[tuple[int, int], list[tuple[int, tuple[int, ...], int]]] = {}

    @staticmethod
    def header_bytes(processes: int) -> int:
        return processes * INT_BYTES

    def stamp(self, body: DataBody) -> Any:
        self.clock[self.pid] += 1
        return tuple(self.clock)

    def on_own(self, body: DataBody, now: float) -> list[int]:
        return [body.index]

    def on_packet(self, packet: Packet, now: float) -> list[int]:
        delivered: list[int] = []
        clock, waiting = self.clock, self._waiting
        todo = [(packet.src, packet.body.header, packet.body.index)]
        while todo:
            item = todo.pop()
            j, stamp, index = item
            if stamp[j] != clock[j] + 1:
                if stamp[j] > clock[j]:  # else a duplicate
                    waiting.setdefault((j, stamp[j] - 1), []).append(item)
                continue
            for k, needed in enumerate(stamp):
                if needed > clock[k] and k != j:
                    waiting.setdefault((k, needed), []).append(item)
                    break
            else:
                clock[j] += 1
                delivered.append(index)
                woken = waiting.pop((j, clock[j]), None)
                if woken:
                    todo.extend(woken)
        return delivered


class SequencerPolicy(OrderingPolicy):
    """Total order by a fixed sequencer (process 0).

    Data goes to everyone directly; the sequencer numbers messages in the order
    it receives them and broadcasts small ``(gseq, message)`` order packets.
    Each process delivers in gseq order once it has both the data and its
    number.  (The seed's simple solution routes the data through the
    sequencer; this variant yields the same order with one hop less.)
    """

    name = "total_sequencer"
    summary = "total order, fixed sequencer broadcasting order numbers"
    SEQUENCER = 0

    def __init__(self, pid: int, workload: Workload, net: Net) -> None:
        super().__init__(pid, workload, net)
        self._have: set[int] = set()
        self._order: dict[int, int] = {}
        self._next_delivery = 1
        self._next_number = 1

    @staticmethod
    def control_bytes(kind: str, processes: int) -> int:
        if kind != "order":
            raise ValueError(f"no control packet {kind!r}")
        return INT_BYTES + MID_BYTES

    def on_own(self, body: DataBody, now: float) -> list[int]:
        return self._arrived(body.index)

    def on_packet(self, packet: Packet, now: float) -> list[int]:
        if packet.kind == "data":
            return self._arrived(packet.body.index)
        gseq, index = packet.body
        self._order[gseq] = index
        return self._drain()

    def _arrived(self, index: int) -> list[int]:
        self._have.add(index)
        if self.pid == self.SEQUENCER:
            gseq = self._next_number
            self._next_number += 1
            self._order[gseq] = index
            self.net.broadcast("order", (gseq, index))
        return self._drain()

    def _drain(self) -> list[int]:
        delivered = []
        order, have = self._order, self._have
        while (index := order.get(self._next_delivery)) is not None and index in have:
            del order[self._next_delivery]
            have.discard(index)
            self._next_delivery += 1
            delivered.append(index)
        return delivered


class LamportPolicy(OrderingPolicy):
    """Total order by Lamport timestamps with acknowledgements from every process.

    Each process keeps a queue ordered by ``(timestamp, pid)`` and acks every
    message to everyone; the head is delivered once acked by every process.
    Channels are made FIFO (``FifoInbox``), which the algorithm needs.  The
    data packet stands for its sender's own ack: FIFO would deliver that ack
    right behind it anyway.
    """

    name = "total_lamport"
    summary = "total order, Lamport timestamps + acks from all"

    def __init__(self, pid: int, workload: Workload, net: Net) -> None:
        super().__init__(pid, workload, net)
        self.clock = 0
        self._inbox = FifoInbox(self.n)
        self._queue: list[tuple[int, int, int]] = []
        self._acks: defaultdict[int, int] = defaultdict(int)

    @staticmethod
    def header_bytes(processes: int) -> int:
        return 2 * INT_BYTES  # timestamp + FIFO counter

    @staticmethod
    def control_bytes(kind: str, processes: int) -> int:
        if kind != "ack":
            raise ValueError(f"no control packet {kind!r}")
        return MID_BYTES + 2 * INT_BYTES  # acked id + timestamp + FIFO counter

    def stamp(self, body: DataBody) -> Any:
        self.clock += 1
        return self.clock

    def on_own(self, body: DataBody, now: float) -> list[int]:
        heapq.heappush(self._queue, (body.header, self.pid, body.index))
        self._acks[body.index] += 1
        return self._drain()

    def on_packet(self, packet: Packet, now: float) -> list[int]:
        for ready in self._inbox.accept(packet):
            if ready.kind == "data":
                body = ready.body
                self.clock = max(self.clock, body.header)
                heapq.heappush(self._queue, (body.header, ready.src, body.index))
                self._acks[body.index] += 2  # the sender's (its data) and ours
                self.clock += 1
                self.net.broadcast("ack", (body.index, self.clock))
            else:
                index, timestamp = ready.body
                self.clock = max(self.clock, timestamp)
                self._acks[index] += 1
        return self._drain()

    def _drain(self) -> list[int]:
        delivered = []
        queue, acks, n = self._queue, self._acks, self.n
        while queue and acks[queue[0][2]] == n:
            index = heapq.heappop(queue)[2]
            del acks[index]
            delivered.append(index)
        return delivered


class LinearClockPolicy(OrderingPolicy):
    """Delivery in linear (Lamport) clock order, the seed's DelCond.

    The head of the ``(LT, pid)``-ordered buffer is delivered once every other
    process has been heard from (FIFO) with a larger ``(LT, pid)``, so no
    smaller one can still come.  A process that received data and then stayed
    silent for ``null_after_ms`` sends a null message, as the object-based seed
    does after a quiet period, so silence cannot block the group.

    The seed stamps with LT and then increments and on receipt takes
    ``max(LT, m.LT)``; that lets a reply carry its parent's LT.  This class
    increments before stamping, which keeps ``m1 -> m2  =>  m1.LT < m2.LT``.
    """

    name = "linear_clock"
    summary = "linear clock order, null messages after silence"

    def __init__(self, pid: int, workload: Workload, net: Net) -> None:
        super().__init__(pid, workload, net)
        self.clock = 0
        self.null_after_ms = workload.profile.null_after_ms
        self._inbox = FifoInbox(self.n)
        self._queue: list[tuple[int, int, int]] = []
        self._heard: list[tuple[float, int]] = [(-1, -1)] * self.n
        self._heard[pid] = (float("inf"), pid)  # our own future messages come after anything we hold
        self._owe_null = False
        self._timer_set = False
        self._checked_head: tuple[int, int, int] | None = None
        self._checked_upto = 0

    @staticmethod
    def header_bytes(processes: int) -> int:
        return 2 * INT_BYTES  # LT + FIFO counter

    @staticmethod
    def control_bytes(kind: str, processes: int) -> int:
        if kind != "null":
            raise ValueError(f"no control packet {kind!r}")
        return 2 * INT_BYTES

    def stamp(self, body: DataBody) -> Any:
        self.clock += 1
        self._owe_null = False
        return self.clock

    def on_own(self, body: DataBody, now: float) -> list[int]:
        heapq.heappush(self._queue, (body.header, self.pid, body.index))
        return self._drain()

    def on_packet(self, packet: Packet, now: float) -> list[int]:
        for ready in self._inbox.accept(packet):
            if ready.kind == "data":
                lt = ready.body.header
                heapq.heappush(self._queue, (lt, ready.src, ready.body.index))
                self._owe_null = True
            else:
                lt = ready.body
            self.clock = max(self.clock, lt)
            self._heard[ready.src] = (lt, ready.src)
        if self._owe_null and not self._timer_set:
            self._timer_set = True
            self.net.set_timer(now + self.null_after_ms)
        return self._drain()

    def on_timer(self, token: Any, now: float) -> list[int]:
        self._timer_set = False
        if self._owe_null:
            self._owe_null = False
            self.clock += 1
            self.net.broadcast("null", self.clock)
        return []

    def _drain(self) -> list[int]:
        delivered: list[int] = []
        queue, heard, n = self._queue, self._heard, self.n
        while queue:
            head = queue[0]
            if head != self._checked_head:
                self._checked_head, self._checked_upto = head, 0
            key = (head[0], head[1])
            # heard[] only grows, so peers already past this head need no second look
            for peer in range(self._checked_upto, n):
                if peer != head[1] and heard[peer] <= key:
                    self._checked_upto = peer
                    return delivered
            heapq.heappop(queue)
            delivered.append(head[2])
        return delivered


class PhysicalLinearPolicy(OrderingPolicy):
    """The seed's rules combining physical time (accuracy lambda) and linear time (delay delta).

    ``precedes`` is the seed's relation; pairs it calls concurrent are not
    ordered.  A message is delivered once every buffered message preceding it
    has been, and once no unseen predecessor can still arrive on the seed's
    synchronous network: a message stamped PT reaches everyone by local time
    PT + 2*lambda + delta, so with delta > 2*lambda (predecessors are stamped
    before PT - 2*lambda) the wait ends at PT + delta, and with delta <= 2*lambda
    (ordered by LT within 2*lambda + delta either way) at PT + 4*lambda + 2*delta.
    A packet later than the bound is delivered when it comes: the rules
    assume it cannot happen.
    """

    name = "physical_linear"
    summary = "physical + linear clock rules (lambda, delta)"

    def __init__(self, pid: int, workload: Workload, net: Net) -> None:
        super().__init__(pid, workload, net)
        profile = workload.profile
        self.offset = workload.clock_offsets_ms[pid]
        self.lam = profile.clock_error_ms
        self.delta = profile.delay_bound_ms
        self.wait = self.delta if self.delta > 2 * self.lam else 4 * self.lam + 2 * self.delta
        self.clock = 0
        self._pending: list[tuple[float, int, int, float]] = []  # (PT, LT, index, local deadline)

    @staticmethod
    def header_bytes(processes: int) -> int:
        return PHYSICAL_TIME_BYTES + INT_BYTES

    def precedes(self, a: tuple, b: tuple) -> bool:
        """Seed rule: does message ``a`` ``|->`` message ``b``?  Both are ``(PT, LT, ...)``."""
        lam, delta = self.lam, self.delta
        gap = b[0] - a[0]
        if abs(gap) > 2 * lam + delta:
            return gap > 0
        if delta <= 2 * lam:
            return a[1] < b[1]
        return gap > 2 * lam and a[1] < b[1]

    def stamp(self, body: DataBody) -> Any:
        self.clock += 1
        return (self.net.now + self.offset, self.clock)

    def on_own(self, body: DataBody, now: float) -> list[int]:
        return self._arrived(body.header, body.index, now)

    def on_packet(self, packet: Packet, now: float) -> list[int]:
        return self._arrived(packet.body.header, packet.body.index, now)

    def on_timer(self, token: Any, now: float) -> list[int]:
        return self._drain(now)

    def _arrived(self, header: tuple[float, int], index: int, now: float) -> list[int]:
        pt, lt = header
        self.clock = max(self.clock, lt)
        deadline = pt + self.wait
        self._pending.append((pt, lt, index, deadline))
        if deadline - self.offset > now:
            self.net.set_timer(deadline - self.offset)
        return self._drain(now)

    def _drain(self, now: float) -> list[int]:
        local = now + self.offset
        delivered = []
        pending = self._pending
        progress = True
        while progress and pending:
            progress = False
            for message in pending:
                if message[3] > local:
                    continue
                if any(other is not message and self.precedes(other, message) for other in pending):
                    continue
                pending.remove(message)
                delivered.append(message[2])
                progress = True
                break
            if not progress and pending and all(m[3] <= local for m in pending):
                # only a cycle in the seed's relation can stall here: break it by physical time
                first = min(pending)
                pending.remove(first)
                delivered.append(first[2])
                progress = True
        return delivered


POLICIES: dict[str, type[OrderingPolicy]] = {
    cls.name: cls
    for cls in (
        SbPolicy,
        CausalPolicy,
        SequencerPolicy,
        LamportPolicy,
        LinearClockPolicy,
        PhysicalLinearPolicy,
        ArrivalOrder,
    )
}

OPS_POLICIES: dict[str, type[OrderingPolicy]] = {
    cls.name: cls for cls in (ObgPolicy, CausalPolicy, SequencerPolicy, LamportPolicy, ArrivalOrder)
}
"""The policies of the operations scenario: OBG against causal order, total orders and none."""
