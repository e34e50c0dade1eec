"""One joined group's protocol core, without I/O: ordering, loss repair, heartbeats and MSP.

Driven like aioquic's connection: user calls (``compose``, ``start_sync``),
``receive(sender, message, now)`` for the group channel's datagrams and
``handle_timer(now)``; drained by ``datagrams_to_send()``, then ``deliveries()`` (which
refuses to run while composed messages wait to be signed by the former) and ``events()``,
and ``get_timer()``.  It reads stored messages through ``fetch``
(the SQLite store in the app, a dict in tests) and never touches a socket or
a clock.

:class:`GroupChannel` is a facade over one layer per concern (after JGroups' stack), each in
its own module and each handling only its own messages:

- ``receiving``: DATA in, deliveries out, through the group's S_b orderer;
- ``loss``: which seqnos of each sender are known to exist and lack, and when to ask;
- ``repair``: NAKs sent and answered (SRM/NORM/PGM-style suppression and a line of responders);
- ``sync``: MSP requests, answers and the requester's phases (a table);
- ``budgets``: what answering may cost, per requester and for this peer;
- ``evidence``: equivocation (two signed versions of one mid), resolved alike everywhere;
- ``pacing``: this peer's messages signed in frame-sized batches, paced on loss reports;
- ``heartbeats``: who is heard (members only, strangers in a bounded table) and this peer's
  heartbeats after it sends.

What the layers keep about each sender is one record (``senders.SenderState``); what they
share is ``group.GroupState``.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterable

from .. import rules, wire
from ..crypto import Identity
from ..events import SyncProgress
from ..mop import DEFAULT_MAX_HELD_BYTES
from ..types import ChatMessage, Mid, UsageError, check_unicode
from .budgets import ANSWER_RATE, SYNC_PACE, AnswerBudgets
from .evidence import EVIDENCE_ROUNDS, MAX_CONFLICTS, Evidence
from .group import (ANSWER_SLOT, CHUNK_BYTES, HELD_OVERHEAD, MAX_SENDERS, Conflict, Event, Fetch, GapReported, GroupState,
                    MemberCheck, Replaced)
from .heartbeats import HEARTBEAT_FIRST, HEARTBEAT_MAX, MAX_STRANGERS, Heartbeats, Presence
from .loss import NAK_DELAY, LossDetector
from .pacing import FRAME_PAYLOAD, PACE_CEILING, PACE_FLOOR, Pacer
from .receiving import Receiver
from .repair import NAK_MAX_RANGES, NAK_MAX_SEQNOS, NAK_RETRY, NAK_TRIES, REPEAT_WINDOW, NakRepair
from .senders import REQUESTER_BYTES, REQUESTER_MESSAGES
from .sync import MAX_SYNC_ANSWERS, SYNC_RETRY, Msp

__all__ = [
    "ANSWER_RATE", "ANSWER_SLOT", "CHUNK_BYTES", "EVIDENCE_ROUNDS", "FRAME_PAYLOAD", "HEARTBEAT_FIRST", "HEARTBEAT_MAX",
    "HELD_OVERHEAD", "MAX_CONFLICTS", "MAX_SENDERS", "MAX_STRANGERS", "MAX_SYNC_ANSWERS", "NAK_DELAY", "NAK_MAX_RANGES",
    "NAK_MAX_SEQNOS", "NAK_RETRY", "NAK_TRIES", "PACE_CEILING", "PACE_FLOOR", "REPEAT_WINDOW", "REQUESTER_BYTES",
    "REQUESTER_MESSAGES", "SYNC_PACE", "SYNC_RETRY", "Conflict", "Event", "Fetch", "GapReported", "GroupChannel",
    "MemberCheck", "Replaced", "SyncProgress",
]


class GroupChannel:
    def __init__(
        self,
        gid: str,
        identity: Identity,
        next_seqno: int = 1,
        fetch: Fetch | None = None,
        rng: random.Random | None = None,
        max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
        max_held: int = 100_000,
        is_member: MemberCheck | None = None,
        members: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        """``is_member(pid)``: whether ``pid`` is a current member (this peer always is);
        ``members()``: the current members' pids, which order the responders.  Without
        them, every signer counts as a member (the behaviour before membership checks)."""
        self.gid = gid
        self.identity = identity
        self.pid = identity.pid
        self.next_seqno = next_seqno
        state = self._state = GroupState(gid, identity, fetch, rng, max_held, max_held_bytes, is_member, members)
        self.stats = state.stats
        loss = self._loss = LossDetector(state)
        evidence = self._evidence = Evidence(state)
        receiver = self._receiver = Receiver(state, loss, evidence)
        budgets = AnswerBudgets(state)
        pacer = self._pacer = Pacer(state, next_seqno)
        self._repair = NakRepair(state, loss, receiver, pacer, budgets)
        self._sync = Msp(state, loss, receiver, budgets)
        self._presence = Presence(state, loss)
        self._heartbeats = Heartbeats(state)

    @property
    def orderer(self) -> Any:
        """The group's S_b orderer (an SbOrderer: the compiled one or its Python twin)."""
        return self._state.orderer

    @orderer.setter
    def orderer(self, orderer: Any) -> None:
        self._state.orderer = orderer

    @property
    def group_size(self) -> int:
        """How many members the group has (spreads the first NAKs of a large group)."""
        return self._state.group_size

    @group_size.setter
    def group_size(self, size: int) -> None:
        self._state.group_size = size

    # -- restore and user calls ----------------------------------------------------

    def restore(self, mids: Iterable[Mid]) -> None:
        """Mark messages already in the store as delivered."""
        for mid in mids:
            self.orderer.mark_delivered(mid)
            self._loss.note_received(mid[0], mid[1])

    def restore_conflicts(self, conflicts: Iterable[tuple[wire.StoredMessage, wire.StoredMessage]]) -> None:
        """Equivocations learnt before (``(kept, other)`` from the store): counted, and kept to."""
        self._evidence.restore(conflicts)

    def compose(self, name: str, text: str, parent: Mid | None, now: float, wall: float | None = None) -> wire.Data:
        """A new DATA message from this peer: delivered here now, signed and sent by datagrams_to_send().

        ``now`` is the deadline clock; ``wall`` (``now`` if not given) stamps ``sent_at``."""
        if len(text) > wire.MAX_TEXT:
            raise UsageError(f"text too long: {len(text)} characters, limit is {wire.MAX_TEXT}")
        if not text.strip():
            raise UsageError("text is empty")
        check_unicode(text, "text")
        if parent is not None and not self.orderer.is_delivered(parent):
            raise rules.bad_parent(self.gid, parent)
        state = self._state
        state.wall = now if wall is None else wall
        data = wire.Data(self.gid, self.next_seqno, parent, int(state.wall * 1000), name, text, b"")
        self.next_seqno += 1
        self._pacer.unsigned.append(data)  # signed with the rest of this burst in datagrams_to_send()
        self._receiver.on_data(self.pid, data.seqno, data.parent, data.name, data.text, data.sent_at, now,
                               b"", self.identity.public_key)
        self._heartbeats.sent(now)
        return data

    def retract(self, mids: Iterable[Mid]) -> list[Mid]:
        """Take back this peer's newest messages, composed but never sent (they could not be
        stored): their seqnos are free again.  Returns the mids taken back."""
        retracted = []
        for mid in sorted((m for m in mids if m[0] == self.pid), key=lambda m: -m[1]):
            if mid[1] != self.next_seqno - 1 or not self.orderer.forget_delivered(mid):
                break  # only the newest can go back, or seqnos would be reused out of order
            self._state.senders.discard_received(self.pid, mid[1])
            self.next_seqno -= 1
            retracted.append(mid)
        return retracted

    def start_sync(self, now: float, wall: float | None = None) -> None:
        """MSP: ask the group for what this peer missed (on join and on return); see ``Msp.start``."""
        self._sync.start(now, wall)

    def member_joined(self, pid: str, now: float) -> None:
        """``pid`` is a member now: ask for whatever it sent while it was taken for a stranger."""
        self._presence.member_joined(pid, now)

    @property
    def pending(self) -> int:
        return self.orderer.pending

    @property
    def syncing(self) -> bool:
        return self._sync.syncing

    @property
    def rate(self) -> float | None:
        """The paced send rate in messages per second, or None when not paced."""
        return self._pacer.rate

    def missing(self, sender: str) -> list[tuple[int, int]]:
        """Seqno ranges of ``sender`` known to exist and not received (nor given up on)."""
        return self._loss.missing(sender)

    # -- network input ---------------------------------------------------------------

    def receive(self, sender: str, message: wire.Message, now: float, public_key: bytes = b"",
                wall: float | None = None) -> bool:
        """One verified datagram of this group (``public_key``: the sender's, from the envelope).

        ``now`` is the deadline clock; ``wall`` (``now`` if not given) stamps ``received_at``.
        Returns whether it was a member's DATA that held a message not seen before: fresh
        evidence that its sender is there (a replay holds none; presence and reach move only on such)."""
        state = self._state
        state.wall = now if wall is None else wall
        if getattr(message, "gid", self.gid) != self.gid:
            state.stats["foreign_dropped"] += 1
            return False
        if not self._presence.admit(sender, message, now):
            return False
        if isinstance(message, wire.DataBatch):
            on_data = self._receiver.on_data
            duplicates = state.orderer.duplicates
            for (seqno, parent, sent_at, name, text), proof in zip(message.items, message.proofs):
                on_data(sender, seqno, parent, name, text, sent_at, now, proof, public_key)
            return state.orderer.duplicates - duplicates < len(message.items)
        elif isinstance(message, wire.Data):
            duplicates = state.orderer.duplicates
            self._receiver.on_data(sender, message.seqno, message.parent, message.name, message.text,
                                   message.sent_at, now, message.sig, public_key)
            return state.orderer.duplicates == duplicates
        elif isinstance(message, wire.Repair):
            self._repair.on_repair(sender, message, now)
            if self._sync.answers:
                for stored in message.messages:
                    self._sync.discard(stored.sender, stored.seqno)
            if len(message.messages) > 1:
                self._evidence.on_repair(message, now)
        elif isinstance(message, wire.Nak):
            if sender != self.pid:
                self._repair.on_nak(sender, message, now)
        elif isinstance(message, wire.Heartbeat):
            self._presence.on_heartbeat(sender, message, now)
        elif isinstance(message, wire.SyncReq):
            if sender != self.pid:
                self._sync.on_request(sender, message, now)
        elif isinstance(message, wire.SyncResp):
            if sender != self.pid:
                self._sync.on_response(sender, message, now)
        return False

    # -- timers ------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        self._heartbeats.arm()
        deadlines = [d for d in (self._heartbeats.at, self._sync.retry_at, self._pacer.next_release())
                     if d is not None]
        deadlines.extend(self._repair.next_answer())
        due = self._loss.next_nak()
        if due is not None:
            held = self._sync.naks_held_until
            deadlines.append(due if held is None else max(due, held))
        deadlines.extend(answer.next_at for answer in self._sync.answers.values())
        evidence = self._evidence.next_due()
        if evidence is not None:
            deadlines.append(evidence)
        return min(deadlines) if deadlines else None

    def handle_timer(self, now: float) -> None:
        self._heartbeats.arm()
        held = self._sync.naks_held(now)
        if self._loss.naks_due and not held:
            self._repair.send_naks(now)
        if self._repair.answering:
            self._repair.send_repairs(now)
        if self._sync.answers:
            self._sync.send_answers(now)
        if self._evidence.evidence_at:
            self._evidence.send(now)
        self._sync.on_timer(now)
        self._heartbeats.on_timer(now, self._pacer.released_seqno)

    # -- output --------------------------------------------------------------------------------

    def datagrams_to_send(self, now: float | None = None) -> list[wire.Message]:
        """What to transmit by ``now``; this peer's new messages go out in batches, one signature each,
        paced when members reported loss of them (without ``now``: everything, unpaced)."""
        self._heartbeats.arm()
        self._pacer.sign()
        state = self._state
        out, state.outbox = self._pacer.release(now) + state.outbox, []
        return out

    def deliveries(self) -> list[ChatMessage]:
        """Messages delivered since the last call.  This peer's own messages get their proofs
        when :meth:`datagrams_to_send` signs them, so it comes first: delivered unsigned, they
        would be stored without a signature and could not be relayed."""
        if self._pacer.unsigned:
            raise UsageError("deliveries() before datagrams_to_send(): the messages composed are not signed yet")
        state = self._state
        out, state.deliveries = state.deliveries, []
        return out

    def events(self) -> list[Event]:
        out, self._state.events = self._state.events, []
        return out
