"""NAK repair (after SRM/NORM/PGM): asking for what loss.py found missing, and answering others.

A NAK goes out after a random back-off and leaves out what another member asked for within
``NAK_RETRY``.  One member answers: the original sender at once, the others in turns of
``ANSWER_SLOT`` in an order drawn from a hash of the request and their pid (random but the same
on every member), so the next in line hears the first one's REPAIR and drops what it carried,
before each chunk.  What was repaired within ``REPAIR_HOLDOFF`` is not repaired again (what was
NAKed or repaired lately ages entry by entry, in ``RECENT_SLICES`` slices).  One REPAIR per
request, neither sent twice nor held to merge: at 200 members and 5 % loss that is 1.48 NAKs
and 1.40 repairs per lost message, where a second copy gives 1.1 NAKs but 2.05 repairs and
merging costs more of both (resources/docs/protocol.md, "Repair at scale", issue 34).  A NAK
costs O(ranges): it is intersected with what we hold as ranges.  Requests retry with exponential back-off up to
``NAK_RETRY_MAX``, which starts again whenever some of what was asked for arrived, and give up
after ``NAK_TRIES`` without it: the gap is reported (the held replies stay held, visible as
waiting).  NAK state exists only for members and for senders whose messages we hold.
"""

from __future__ import annotations

from .. import wire
from ..rangeset import RangeSet
from .budgets import SYNC_PACE, AnswerBudgets
from .group import ANSWER_SLOT, GapReported, GroupState, approx_size, first_chunk, rank_key
from .loss import LossDetector
from .pacing import Pacer
from .receiving import Receiver
from .recent import RecentRanges
from .senders import RepairAnswer, SenderState

NAK_RETRY = 0.25  # then retry after this, doubling per try,
NAK_RETRY_MAX = 1.0  # up to this: at 20 % loss, 36 % of NAK -> REPAIR round trips fail, and four
# failing in a row cost 7.75 s with no cap (2.75 s with it); a gap is reported after NAK_TRIES,
NAK_TRIES = 32  # about 31 s without progress, as long as eight doubling tries took
NAK_MAX_SEQNOS = 5_000  # seqnos asked for, or answered, per NAK
NAK_MAX_RANGES = 500  # ranges asked for, or answered, per NAK: a NAK costs O(ranges)
RESPONDERS = 2  # members in line for a NAK (after the sender); 4-fold more each time it is asked again,
REPEAT_LEVELS = 3  # and every member who holds it from the 4th time
REPEAT_WINDOW = 5.0  # a NAK for what was asked for within this long is asked again (s)
SENDER_ALIVE = 10.0  # a member heard from within this long answers NAKs for its messages itself (s)
ANSWER_YIELD = 0.1  # a responder that hears another one's REPAIR or SYNC_RESP defers this long (s)
REPAIR_HOLDOFF = 0.05  # seqnos repaired within this long are not repaired again for a NAK (s)
REPAIR_PACE = 0.004  # between two chunks of one repair answer (s)


class NakRepair:
    __slots__ = ("state", "loss", "receiver", "pacer", "budgets", "answering")

    def __init__(self, state: GroupState, loss: LossDetector, receiver: Receiver, pacer: Pacer,
                 budgets: AnswerBudgets) -> None:
        self.state = state
        self.loss = loss
        self.receiver = receiver
        self.pacer = pacer
        self.budgets = budgets
        # The senders whose ``answer`` is set, in the order the answers were opened.
        self.answering: dict[str, SenderState] = {}

    def next_answer(self) -> list[float]:
        return [record.answer.next_at for record in self.answering.values() if record.answer is not None]

    # -- asking ---------------------------------------------------------------------------

    def send_naks(self, now: float) -> None:
        state, loss = self.state, self.loss
        for sender, record in list(loss.naks_due.items()):
            at = record.nak_at
            if at is None or at > now:
                continue
            gaps = loss.missing(sender)
            if not gaps:
                loss.disarm(record)
                record.nak_tries = 0
                continue
            outstanding = sum(b - a + 1 for a, b in gaps)
            if self._progressed(record, outstanding):
                record.nak_tries = 0  # repairs are arriving: this is not a dead end
            tries = record.nak_tries
            if tries >= NAK_TRIES:
                abandoned = record.abandoned
                if abandoned is None:
                    abandoned = record.abandoned = RangeSet()
                for a, b in gaps:
                    abandoned.add_range(a, b + 1)
                state.events.append(GapReported(state.gid, sender, tuple(gaps)))
                state.stats["gaps_reported"] += 1
                loss.disarm(record)
                continue
            asked = record.asked
            if asked is not None:
                recent = asked.intersection(gaps, NAK_MAX_RANGES, now, NAK_RETRY)
                if recent:
                    unasked = RangeSet.from_ranges(gaps)
                    for a, b in recent:
                        unasked.remove_range(a, b + 1)
                    if not unasked:  # other members asked for all of it: wait for their repairs
                        record.nak_at = asked.forgotten_at(gaps, now, NAK_RETRY) \
                            + NAK_RETRY * state.rng.uniform(0.0, 0.2)
                        continue
                    gaps = unasked.ranges()
            ranges: list[tuple[int, int]] = []
            budget = NAK_MAX_SEQNOS
            for a, b in gaps:
                if budget <= 0 or len(ranges) >= NAK_MAX_RANGES:
                    break
                b = min(b, a + budget - 1)
                ranges.append((a, b))
                budget -= b - a + 1
            state.outbox.append(wire.Nak(state.gid, sender, tuple(ranges)))
            state.stats["naks_sent"] += 1
            record.nak_progress = (outstanding, tuple(ranges))
            record.nak_tries = tries + 1
            retry = min(NAK_RETRY * 2 ** min(tries, 8), NAK_RETRY_MAX)
            record.nak_at = now + retry * state.rng.uniform(0.9, 1.1)

    @staticmethod
    def _progressed(record: SenderState, outstanding: int) -> bool:
        """Whether repairs came since the last NAK for the sender: fewer seqnos are missing, or some
        that it asked for arrived.  The second counts while the sender is still sending: new losses
        then outweigh what the repairs fill, and the back-off must not grow as if nobody answered."""
        last = record.nak_progress
        if last is None:
            return False
        before, asked = last
        received = record.received
        return outstanding < before or received is not None and bool(received.intersection(asked, 1))

    # -- answering --------------------------------------------------------------------------

    def on_nak(self, requester: str, nak: wire.Nak, now: float) -> None:
        state = self.state
        target = nak.target
        self.pacer.on_nak(nak, now)
        record = state.senders.get(target)
        if (record is None or record.received is None) and not state.is_member(target):
            return  # nobody we hold messages of, nor a member: no state for it
        if record is None:
            record = state.senders.of(target)
        ranges = nak.ranges[:NAK_MAX_RANGES]
        # Someone else asked: our own NAK leaves this out until the repair had time to come.
        asked = record.asked
        if asked is None:
            asked = record.asked = RecentRanges()
        for first, last in ranges:
            asked.add_range(first, min(last, first + NAK_MAX_SEQNOS) + 1, now, NAK_RETRY)
        # How often this was asked for lately: each time, the line of responders grows 4-fold.
        levels = record.requested
        if levels is None:
            levels = record.requested = [RecentRanges() for _ in range(REPEAT_LEVELS)]
        repeats = 0
        for level in reversed(range(REPEAT_LEVELS)):
            seen = levels[level]
            if seen.intersection(ranges, 1, now, REPEAT_WINDOW):
                repeats = max(repeats, level + 1)
            below = levels[level - 1].intersection(ranges, NAK_MAX_RANGES, now, REPEAT_WINDOW) if level \
                else ranges
            for first, last in below:
                seen.add_range(first, min(last, first + NAK_MAX_SEQNOS) + 1, now, REPEAT_WINDOW)
        # What we hold of it, as ranges (O(ranges), however many seqnos they span), less what
        # was repaired a moment ago, within the requester's budget.
        budget = self.budgets.of(requester, now)
        allowed = min(NAK_MAX_SEQNOS, int(budget.messages))
        wanted, count = RangeSet(), 0
        for first, last in state.orderer.delivered_set(target).intersection(ranges, NAK_MAX_RANGES):
            if last - first + 1 > allowed - count:
                state.stats["requests_over_budget"] += 1
                last = first + allowed - count - 1
                if last < first:
                    break
            wanted.add_range(first, last + 1)
            count += last - first + 1
        repaired = record.repaired
        if repaired is not None and wanted:
            for first, last in repaired.intersection(wanted.ranges(), NAK_MAX_RANGES, now, REPAIR_HOLDOFF):
                wanted.remove_range(first, last + 1)
        if not wanted:
            return
        budget.messages -= len(wanted)
        answer = record.answer
        if answer is None:
            if target == state.pid:
                delay = state.rng.uniform(0, 0.002)  # the sender always has it: answer first
            else:  # after the sender (if it is a member), in the line drawn for this request
                if now - record.heard_at < SENDER_ALIVE:
                    # The sender is there and answers; asked again, the request most likely lost
                    # its repair somewhere: the line steps in the time after.
                    if repeats < 2:
                        return
                    repeats -= 2
                rank = state.rank(rank_key(requester, target, ranges), (requester, target))
                if repeats < REPEAT_LEVELS and rank >= RESPONDERS << 2 * repeats:
                    return
                delay = ANSWER_SLOT * (rank + state.is_member(target)) + state.rng.uniform(0.001, 0.002)
            answer = record.answer = RepairAnswer(now + delay, requester)
            self.answering[target] = record
        answer.requester = requester
        for first, last in wanted.ranges():
            answer.wanted.add_range(first, last + 1)

    def on_repair(self, responder: str, repair: wire.Repair, now: float) -> None:
        senders = self.state.senders
        for stored in repair.messages:
            self.receiver.on_stored(stored, now)
            record = senders.of(stored.sender)
            self._cancel_answer(record, stored.seqno)
            recent = record.repaired
            if recent is None:
                recent = record.repaired = RecentRanges()
            recent.add(stored.seqno, now, REPAIR_HOLDOFF)
        if responder != self.state.pid:
            # Another member is answering: let it go on, and drop what it carries as it comes.
            for sender in {stored.sender for stored in repair.messages}:
                answer = self.answering[sender].answer if sender in self.answering else None
                if answer is not None:
                    answer.next_at = max(answer.next_at, now + ANSWER_YIELD)

    def _cancel_answer(self, record: SenderState, seqno: int) -> None:
        answer = record.answer
        if answer is not None:
            answer.wanted.discard(seqno)
            if not answer.wanted:
                self._close(record)

    def _close(self, record: SenderState) -> None:
        record.answer = None
        del self.answering[record.pid]

    def send_repairs(self, now: float) -> None:
        """One chunk per due answer: what others repaired meanwhile has been dropped from it."""
        state = self.state
        for sender, record in list(self.answering.items()):
            answer = record.answer
            if answer is None or answer.next_at > now:
                continue
            budget = self.budgets.of(answer.requester, now)
            granted = self.budgets.take(now, 400) if budget.bytes > 0 else 0
            seqnos = answer.wanted.first(granted)
            messages = state.fetch(state.gid, [(sender, s) for s in seqnos]) if seqnos else []
            chunk = first_chunk(messages)
            if seqnos:  # what did not fit the chunk stays wanted; what we lack (normally nothing) goes
                answer.wanted.remove_range(seqnos[0], seqnos[-1] + 1)
                for message in messages[len(chunk):]:
                    answer.wanted.add(message.seqno)
            if chunk:
                state.outbox.append(wire.Repair(state.gid, tuple(chunk)))
                state.stats["repairs_sent"] += len(chunk)
                budget.bytes -= sum(approx_size(m) for m in chunk)
                recent = record.repaired
                if recent is None:
                    recent = record.repaired = RecentRanges()
                for message in chunk:
                    recent.add(message.seqno, now, REPAIR_HOLDOFF)
            if answer.wanted:
                answer.next_at = now + (REPAIR_PACE if granted else SYNC_PACE)
            else:
                self._close(record)

