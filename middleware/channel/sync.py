"""MSP (thesis ch. 6): synchronization on join and on return, as requester and as responder.

A SYNC_REQ carries the requester's digest (per-sender seqno ranges, O(senders + gaps)).  Each
member works out what the requester lacks (the thesis's MIR), waits a random back-off, and
streams it in paced chunks of at most ``CHUNK_BYTES``; a member that sees another one answering
the same request removes what was sent from its MIR and yields while that one is active (the
thesis's suppression), and stale requests are dropped (the PSSIT).  What the requester holds and
a member lacks is asked for with NAKs, so synchronization goes both ways.  The requester's own
NAKs wait only while answers are expected (``SYNC_ANSWER_WAIT`` after the request and after each
answer that announces more): members that have nothing to send stay silent, so a sync nobody
answers must not hold NAKs until its retry.  At most ``MAX_SYNC_ANSWERS`` answers are open at once.
"""

from __future__ import annotations

import enum
from typing import Iterable, cast

from .. import wire
from ..events import SyncProgress
from ..rangeset import RangeSet
from ..types import Mid
from .budgets import SYNC_PACE, AnswerBudgets
from .group import ANSWER_SLOT, GroupState, approx_size, first_chunk, rank_key
from .loss import LossDetector
from .receiving import Receiver

MAX_SYNC_ANSWERS = 4  # sync answers streamed at once; further requests wait for a retry
SYNC_YIELD = 0.5  # how long to defer to another responder that is answering (s)
SYNC_RETRY = 1.0
SYNC_TRIES = 3
# NAKs wait for a sync's answers (which carry the same messages) this long after the request and
# after each answer that announces more (s).  Members answer only with what the requester lacks, so
# a request that nobody answers means nothing was missing (or it was lost: the retry covers that),
# and NAKs must not wait for the retry.  The first answer comes within ANSWER_SLOT per member
# before it in the line, and the next chunk SYNC_PACE later.
SYNC_ANSWER_WAIT = 0.2


class Phase(enum.Enum):
    """Where this peer's own sync stands."""

    IDLE = "idle"  # not syncing
    ASKED = "asked"  # a request went out; no answer announcing more since
    RECEIVING = "receiving"  # answers announce more to come


class Step(enum.Enum):
    """What moves this peer's own sync on."""

    ASK = "ask"  # a request went out (the first or a retry)
    MORE = "more"  # an answer to us announced more to come
    ALL = "all"  # an answer to us announced that nothing more comes
    STOP = "stop"  # the retry came with nothing (or no more) heard: done


# The requester's phases, every (phase, step) pair listed.  An answer that announces more after
# the sync ended does not start it again (IDLE, MORE): it only holds our NAKs a moment.
PHASES: dict[tuple[Phase, Step], Phase] = {
    (Phase.IDLE, Step.ASK): Phase.ASKED,
    (Phase.IDLE, Step.MORE): Phase.IDLE,
    (Phase.IDLE, Step.ALL): Phase.IDLE,
    (Phase.IDLE, Step.STOP): Phase.IDLE,
    (Phase.ASKED, Step.ASK): Phase.ASKED,
    (Phase.ASKED, Step.MORE): Phase.RECEIVING,
    (Phase.ASKED, Step.ALL): Phase.IDLE,
    (Phase.ASKED, Step.STOP): Phase.IDLE,
    (Phase.RECEIVING, Step.ASK): Phase.ASKED,
    (Phase.RECEIVING, Step.MORE): Phase.RECEIVING,
    (Phase.RECEIVING, Step.ALL): Phase.IDLE,
    (Phase.RECEIVING, Step.STOP): Phase.IDLE,
}


def _send_order(mid: Mid) -> tuple[int, str]:
    return mid[1], mid[0]


class SyncAnswer:
    """One MSP request this peer may answer: the thesis's MIR.

    Sent oldest seqnos first (across senders), which approximates the order the
    messages were written in, so few of them wait for a parent at the requester.
    """

    __slots__ = ("requester", "sync_seqno", "missing", "_queue", "next_at", "started")

    def __init__(self, requester: str, sync_seqno: int, missing: set[Mid], start_at: float) -> None:
        self.requester = requester
        self.sync_seqno = sync_seqno
        self.missing = missing
        self._queue = sorted(missing, key=_send_order, reverse=True)
        self.next_at = start_at
        self.started = False

    def discard(self, sender: str, seqno: int) -> None:
        self.missing.discard((sender, seqno))

    def take(self, limit: int) -> list[Mid]:
        picked: list[Mid] = []
        while self._queue and len(picked) < limit:
            mid = self._queue.pop()
            if mid in self.missing:
                self.missing.discard(mid)
                picked.append(mid)
        return picked

    def put_back(self, mids: Iterable[Mid]) -> None:
        """Return taken mids to the queue (what did not fit the chunk)."""
        returned = sorted(mids, key=_send_order, reverse=True)
        self.missing.update(returned)
        queue = self._queue
        if queue and returned and _send_order(queue[-1]) < _send_order(returned[0]):
            queue += returned
            queue.sort(key=_send_order, reverse=True)
        else:
            # They were taken from the end of the queue, so they go back there, still in
            # order: no sort of the whole queue every chunk (100,000 mids, every 8 ms).
            queue += returned

    def count(self) -> int:
        return len(self.missing)


class Msp:
    __slots__ = ("state", "loss", "receiver", "budgets", "phase", "_seqno", "retry_at", "naks_held_until",
                 "_tries", "_received", "_expected", "_remaining", "answers")

    def __init__(self, state: GroupState, loss: LossDetector, receiver: Receiver, budgets: AnswerBudgets) -> None:
        self.state = state
        self.loss = loss
        self.receiver = receiver
        self.budgets = budgets
        # As requester.
        self.phase = Phase.IDLE
        self._seqno = 0
        self.retry_at: float | None = None
        self.naks_held_until: float | None = None  # while a sync's answers are expected
        self._tries = 0
        self._received = 0
        self._expected = 0
        self._remaining: dict[str, int] = {}  # what each responder to this sync announced
        # As responder: the open answers (the PSSIT, each requester's latest request, is in its record).
        self.answers: dict[tuple[str, int], SyncAnswer] = {}

    def _step(self, step: Step) -> None:
        self.phase = PHASES[self.phase, step]

    @property
    def syncing(self) -> bool:
        return self.phase is not Phase.IDLE

    # -- as requester ------------------------------------------------------------------------

    def start(self, now: float, wall: float | None = None) -> None:
        """Ask the group for what this peer missed (on join and on return).

        ``wall`` (seconds since the epoch), given when the channel opens, starts the request
        numbers at the wall clock's milliseconds: the members remember each requester's latest
        number to drop stale copies, and a restarted peer counting again from 1 would be
        dropped until its retries ran out."""
        # A new sync: its retries and progress start again (a lost request on return is asked
        # again, however many requests went before).
        self._tries = self._received = self._expected = 0
        self._remaining = {}
        self._request(now, wall)

    def _request(self, now: float, wall: float | None = None) -> None:
        state = self.state
        self._seqno = max(self._seqno + 1, 0 if wall is None else int(wall * 1000))
        self._step(Step.ASK)
        self._tries += 1
        self.retry_at = now + SYNC_RETRY
        self.naks_held_until = now + SYNC_ANSWER_WAIT
        digest = tuple(
            (record.pid, tuple(record.received.ranges()))
            for record in sorted(state.senders.by_pid.values(), key=lambda record: record.pid)
            if record.received
        )[: wire.MAX_ITEMS]
        state.outbox.append(wire.SyncReq(state.gid, self._seqno, digest))

    def naks_held(self, now: float) -> bool:
        """Whether our NAKs wait for the answers to our sync (they carry the same messages)."""
        if self.naks_held_until is not None and self.naks_held_until <= now:
            self.naks_held_until = None
        return self.naks_held_until is not None

    def on_timer(self, now: float) -> None:
        if self.retry_at is not None and self.retry_at <= now:
            if self._tries < SYNC_TRIES and self._received == 0:
                self._request(now)
            else:  # nobody (else) has anything for us, or the answers stopped: done
                self._step(Step.STOP)
                self.retry_at = None
                self.naks_held_until = None

    def on_response(self, responder: str, response: wire.SyncResp, now: float) -> None:
        state = self.state
        for stored in response.messages:
            self.receiver.on_stored(stored, now)
        mine = response.requester == state.pid and response.sync_seqno <= self._seqno
        answer = self.answers.get((response.requester, response.sync_seqno))
        if answer is not None:
            for stored in response.messages:
                answer.discard(stored.sender, stored.seqno)
            # Another member is answering: let it go on.  When two started at once,
            # the lower pid goes on and the other yields, so they do not both stop.
            if not answer.started or responder < state.pid:
                answer.next_at = max(answer.next_at, now + SYNC_YIELD)
        if mine:
            self._received += len(response.messages)
            self._remaining[responder] = response.remaining
            self._expected = min(wire.MAX_SYNC_REMAINING, max(  # a count the UI's integers can carry
                self._expected, self._received + sum(self._remaining.values())))
            self.retry_at = now + SYNC_RETRY  # answers flow: do not ask again yet
            self._tries = 0
            state.events.append(SyncProgress(state.gid, self._received, self._expected))
            if not any(self._remaining.values()):
                self._step(Step.ALL)
                self.retry_at = None
                self.naks_held_until = None
            else:
                self._step(Step.MORE)
                self.naks_held_until = now + SYNC_ANSWER_WAIT

    # -- as responder ------------------------------------------------------------------------

    def on_request(self, requester: str, request: wire.SyncReq, now: float) -> None:
        state = self.state
        record = state.senders.of(requester)
        if request.sync_seqno <= record.latest_request:
            return  # stale or repeated (the PSSIT)
        for key in [k for k in self.answers if k[0] == requester]:
            del self.answers[key]  # a newer request replaces the older one
        if len(self.answers) >= MAX_SYNC_ANSWERS:
            state.stats["sync_requests_refused"] += 1  # busy: the requester asks again
            return
        record.latest_request = request.sync_seqno
        theirs = {pid: RangeSet.from_ranges(ranges) for pid, ranges in request.digest}
        missing: set[Mid] = set()
        delivered = cast("Iterable[tuple[str, RangeSet]]", state.orderer.delivered_sets())
        for pid, seen in delivered:
            other = theirs.get(pid)
            missing.update((pid, s) for s in seen if other is None or s not in other)
        # The other way round: what the requester holds and we lack, we ask for.
        for pid, ranges in request.digest:
            if ranges:
                self.loss.note_highest(pid, ranges[-1][1], now)
        if missing:
            rank = state.rank(rank_key(requester, request.sync_seqno), (requester,))
            start = now + ANSWER_SLOT * rank + state.rng.uniform(0.005, 0.007)
            self.answers[(requester, request.sync_seqno)] = SyncAnswer(requester, request.sync_seqno, missing, start)

    def discard(self, sender: str, seqno: int) -> None:
        """Someone repaired ``(sender, seqno)``: no answer of ours needs to carry it."""
        for answer in self.answers.values():
            answer.discard(sender, seqno)

    def send_answers(self, now: float) -> None:
        state = self.state
        for key, answer in list(self.answers.items()):
            if answer.next_at > now:
                continue
            requester_budget = self.budgets.of(answer.requester, now)
            allowed = min(400, int(requester_budget.messages)) if requester_budget.bytes > 0 else 0
            budget = self.budgets.take(now, allowed)
            if budget == 0:
                answer.next_at = now + SYNC_PACE
                continue
            messages = state.fetch(state.gid, answer.take(budget))
            chunk = first_chunk(messages)
            answer.put_back((m.sender, m.seqno) for m in messages[len(chunk):])
            remaining = min(answer.count(), wire.MAX_SYNC_REMAINING)
            answer.started = True
            if chunk:
                state.outbox.append(wire.SyncResp(state.gid, answer.requester, answer.sync_seqno, remaining,
                                                  tuple(chunk)))
                state.stats["sync_messages_sent"] += len(chunk)
                requester_budget.messages -= len(chunk)
                requester_budget.bytes -= sum(approx_size(m) for m in chunk)
            if remaining:
                answer.next_at = now + SYNC_PACE
            else:
                del self.answers[key]
