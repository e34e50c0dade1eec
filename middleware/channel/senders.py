"""What one group's channel keeps about each sender: one record per pid, shared by the layers.

Each layer owns some fields of the record (the comments say which); a field that is None or 0
holds nothing.  Records exist only for members and for authors whose messages we hold or
repair, so the table is bounded by the membership and ``MAX_SENDERS`` (hostile pids stay in
the presence layer's bounded strangers table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..rangeset import RangeSet
from .recent import RecentRanges

# Per requester, per second (a burst of one second's worth): what one member can make us send.
REQUESTER_MESSAGES = 20_000
REQUESTER_BYTES = 10_000_000


class RequesterBudget:
    """A token bucket per requester, in messages and bytes (a burst of one second's worth)."""

    __slots__ = ("messages", "bytes", "at")

    def __init__(self, now: float) -> None:
        self.messages, self.bytes, self.at = float(REQUESTER_MESSAGES), float(REQUESTER_BYTES), now

    def refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.at)
        self.at = max(self.at, now)
        self.messages = min(REQUESTER_MESSAGES, self.messages + elapsed * REQUESTER_MESSAGES)
        self.bytes = min(REQUESTER_BYTES, self.bytes + elapsed * REQUESTER_BYTES)


class RepairAnswer:
    """The seqnos of one sender that this peer will repair, sent a chunk at a time."""

    __slots__ = ("wanted", "next_at", "requester")

    def __init__(self, next_at: float, requester: str) -> None:
        self.wanted = RangeSet()
        self.next_at = next_at
        self.requester = requester


@dataclass(slots=True)
class SenderState:
    """Everything this peer keeps about one sender's messages and requests."""

    pid: str
    # Loss detection (receiving.py, loss.py): everything received (delivered or held), the
    # highest seqno known to exist, what was given up on, and evicted seqnos not asked for
    # until their parent is delivered.  ``received`` is None until something was received.
    received: RangeSet | None = None
    highest: int = 0
    abandoned: RangeSet | None = None
    deferred: RangeSet | None = None
    # NAK repair, asking (loss.py, repair.py): when to (re)ask, how often we asked, and how many
    # seqnos were missing and which were asked for at the last NAK.
    nak_at: float | None = None
    nak_tries: int = 0
    nak_progress: tuple[int, tuple[tuple[int, int], ...]] | None = None
    # NAK repair, answering (repair.py): what other members NAKed lately, what was asked for
    # 1, 2, 3 times within REPEAT_WINDOW, what this peer will repair, what was repaired lately.
    asked: RecentRanges | None = None
    requested: list[RecentRanges] | None = None
    answer: RepairAnswer | None = None
    repaired: RecentRanges | None = None
    # As a requester (budgets.py, sync.py): what it may make us send, and its latest sync
    # request (the thesis's PSSIT).
    budget: RequesterBudget | None = None
    latest_request: int = 0
    # Presence (heartbeats.py): when a datagram of this member came last.
    heard_at: float = field(default=-math.inf)


class Senders:
    """The records by pid, with the counts the bounds need."""

    __slots__ = ("by_pid", "receiving", "budgets")

    def __init__(self) -> None:
        self.by_pid: dict[str, SenderState] = {}
        self.receiving = 0  # records whose ``received`` is set: the MAX_SENDERS bound counts these
        self.budgets = 0  # records whose ``budget`` is set

    def get(self, pid: str) -> SenderState | None:
        return self.by_pid.get(pid)

    def of(self, pid: str) -> SenderState:
        """The record of ``pid``, made if new."""
        record = self.by_pid.get(pid)
        if record is None:
            record = self.by_pid[pid] = SenderState(pid)
        return record

    def received(self, pid: str) -> RangeSet | None:
        record = self.by_pid.get(pid)
        return None if record is None else record.received

    def start_receiving(self, record: SenderState) -> RangeSet:
        received = record.received = RangeSet()
        self.receiving += 1
        return received

    def discard_received(self, pid: str, seqno: int) -> None:
        """Take ``seqno`` out of what was received from ``pid`` (an emptied set goes)."""
        record = self.by_pid.get(pid)
        if record is None:
            return
        received = record.received
        if received is not None and _discard(received, seqno):
            record.received = None
            self.receiving -= 1


def _discard(values: RangeSet, value: int) -> bool:
    """Remove ``value`` from ``values``, if there; returns whether ``values`` is empty now."""
    if value in values:
        end = values.take_run(value)
        values.add_range(value + 1, end)
        return not values
    return False


def discard(values: RangeSet | None, value: int) -> RangeSet | None:
    """``values`` without ``value``: None once emptied."""
    if values is not None and _discard(values, value):
        return None
    return values
