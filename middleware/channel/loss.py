"""Loss detection: which seqnos of each sender are known to exist and lack, and when to ask.

Seqnos count per sender, so a gap in what was received from a sender is a loss; so is a parent
that held replies wait for, and a seqno above the last one received that a heartbeat or a sync
request announces.  A suspected sender gets a NAK timer after a random back-off (repair.py sends
the NAK).  Replies the orderer evicted from its hold store are gaps again, but not asked for
until their parent is delivered.
"""

from __future__ import annotations

from ..rangeset import RangeSet
from ..types import Mid
from .group import GroupState
from .senders import SenderState, discard

NAK_DELAY = (0.005, 0.030)  # first NAK after this random back-off (s)...
NAK_SPREAD = 0.001  # ...or up to this much per member, when longer: of all the members that lost a
# message, the first asks about as soon as in a small group, and the next one has heard it
# (the more members, the more of them lost it)
# Evicted messages remembered (by mid and parent) so they are asked for again once their
# parent is delivered; past this, the oldest become ordinary gaps, which NAKs and MSP fetch.
MAX_EVICTED_REMEMBERED = 100_000


class LossDetector:
    __slots__ = ("state", "naks_due", "_evicted_for", "_evicted_remembered")

    def __init__(self, state: GroupState) -> None:
        self.state = state
        # The senders whose ``nak_at`` is set, in the order their timers were armed.
        self.naks_due: dict[str, SenderState] = {}
        # Held messages the orderer evicted: parent -> evicted replies, oldest first.
        self._evicted_for: dict[Mid, list[Mid]] = {}
        self._evicted_remembered = 0

    def note_received(self, sender: str, seqno: int) -> None:
        state = self.state
        record = state.senders.of(sender)
        seen = record.received
        if seen is None:
            seen = state.senders.start_receiving(record)
        seen.add(seqno)

    def note_highest(self, sender: str, seqno: int, now: float) -> None:
        # NAK state only for members and for senders whose messages we hold (a left member's):
        # parents and digests naming invented pids cost nothing.
        state = self.state
        record = state.senders.get(sender)
        if (record is None or record.received is None) and not state.is_member(sender):
            return
        if record is None:
            record = state.senders.of(sender)
        if seqno > record.highest:
            record.highest = seqno
        received = record.received
        if received is None or seqno not in received:
            self.suspect(sender, now)

    def suspect(self, sender: str, now: float) -> None:
        if sender == self.state.pid or sender in self.naks_due:
            return
        low, high = NAK_DELAY
        self.arm(self.state.senders.of(sender), now + self.state.rng.uniform(low, max(high, NAK_SPREAD * self.state.group_size)))

    def arm(self, record: SenderState, at: float) -> None:
        record.nak_at = at
        self.naks_due.setdefault(record.pid, record)

    def disarm(self, record: SenderState) -> None:
        record.nak_at = None
        del self.naks_due[record.pid]

    def next_nak(self) -> float | None:
        return min(record.nak_at for record in self.naks_due.values()
                   if record.nak_at is not None) if self.naks_due else None

    def missing(self, sender: str) -> list[tuple[int, int]]:
        """Seqno ranges of ``sender`` known to exist and not received (nor given up on)."""
        record = self.state.senders.get(sender)
        if record is None or not record.highest:
            return []
        seen = record.received or RangeSet()
        abandoned, deferred = record.abandoned, record.deferred
        if abandoned or deferred:
            seen = RangeSet.from_ranges(seen.ranges() + (abandoned.ranges() if abandoned else [])
                                        + (deferred.ranges() if deferred else []))
        return seen.gaps(record.highest)

    # -- evicted replies ----------------------------------------------------------------

    def on_evicted(self, evicted: list[tuple[Mid, Mid]], now: float) -> None:
        """Evicted from the hold store: a gap again, asked for once its parent is delivered."""
        senders = self.state.senders
        for mid, parent in evicted:
            sender, seqno = mid
            senders.discard_received(sender, seqno)
            record = senders.of(sender)
            if record.deferred is None:
                record.deferred = RangeSet()
            record.deferred.add(seqno)
            self._evicted_for.setdefault(parent, []).append(mid)
            self._evicted_remembered += 1
        while self._evicted_remembered > MAX_EVICTED_REMEMBERED:
            oldest = next(iter(self._evicted_for))
            self._release_evicted(self._evicted_for.pop(oldest), now)

    def ask_again_for_evicted(self, released: list, now: float) -> None:
        """Delivered parents: their evicted replies are asked for now."""
        if not self._evicted_for:
            return
        for mid, _, _ in released:
            children = self._evicted_for.pop(mid, None)
            if children is not None:
                self._release_evicted(children, now)

    def _release_evicted(self, mids: list[Mid], now: float) -> None:
        """Stop deferring evicted messages: they are gaps that NAKs ask for."""
        self._evicted_remembered -= len(mids)
        senders = self.state.senders
        for sender, seqno in mids:
            record = senders.of(sender)
            record.deferred = discard(record.deferred, seqno)
            if sender != self.state.pid:  # a new request, not a retry of an old one: ask soon, tries afresh
                record.nak_tries = 0
                record.nak_progress = None
                at = now + self.state.rng.uniform(*NAK_DELAY)
                self.arm(record, at if record.nak_at is None else min(record.nak_at, at))
