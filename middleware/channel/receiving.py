"""DATA in, deliveries out: every message, this peer's own included, runs through the group's
:class:`~middleware.mop.SbOrderer`; what it releases is delivered, what it evicts is a gap again.

Messages that a member relays are taken whoever wrote them (their author's signature is
checked), up to ``MAX_SENDERS`` authors who are not members.  A mid seen again goes to the
equivocation check.
"""

from __future__ import annotations

from typing import cast

from .. import wire
from ..types import SENT_AT_EARLIEST_MS, SENT_AT_MAX_AHEAD_MS, ChatMessage, Mid
from .evidence import Evidence
from .group import MAX_SENDERS, GroupState
from .loss import LossDetector
from .senders import discard

# What the orderer releases: (mid, parent, (name, text, sent_at, sig, public_key)).
Released = list[tuple[Mid, "Mid | None", tuple[str, str, int, bytes, bytes]]]


class Receiver:
    __slots__ = ("state", "loss", "evidence")

    def __init__(self, state: GroupState, loss: LossDetector, evidence: Evidence) -> None:
        self.state = state
        self.loss = loss
        self.evidence = evidence

    def on_stored(self, stored: wire.StoredMessage, now: float) -> int:
        """A relayed message: checked against its writer's signature unless we have it already."""
        state = self.state
        mid = (stored.sender, stored.seqno)
        if not state.orderer.is_delivered(mid) and state.orderer.held_payload(mid) is None:
            if not wire.verify_stored(state.gid, stored):
                state.stats["bad_signature_dropped"] += 1
                return 0
        return self.on_data(stored.sender, stored.seqno, stored.parent, stored.name, stored.text, stored.sent_at,
                            now, stored.sig, stored.public_key)

    def on_data(self, sender: str, seqno: int, parent: Mid | None, name: str, text: str, sent_at: int,
                now: float, sig: bytes, public_key: bytes) -> int:
        """Order one (verified) message; returns how many messages it made deliverable."""
        state = self.state
        senders = state.senders
        record = senders.get(sender)
        if record is None or record.received is None:
            # Members are always taken; authors who are not (relayed or restored) up to a cap.
            if senders.receiving >= MAX_SENDERS and sender != state.pid and not state.is_member(sender):
                state.stats["foreign_dropped"] += 1
                return 0
            if record is None:
                record = senders.of(sender)
            received = senders.start_receiving(record)
        else:
            received = record.received
        orderer = state.orderer
        duplicates = orderer.duplicates
        released = cast(Released, orderer.receive((sender, seqno), parent, (name, text, sent_at, sig, public_key)))
        if orderer.duplicates != duplicates:
            self.evidence.check(wire.StoredMessage(sender, seqno, parent, sent_at, name, text, public_key, sig), now)
            return 0
        follows_previous = seqno == 1 or seqno - 1 in received
        received.add(seqno)
        if record.deferred is not None:
            record.deferred = discard(record.deferred, seqno)  # an evicted message came again
        if record.highest < seqno:
            record.highest = seqno
        loss = self.loss
        if released:
            received_at = int(state.wall * 1000)
            gid = state.gid
            state.deliveries.extend(
                ChatMessage(gid, mid, got_parent, n, t, s, received_at, 0, g, k)
                for mid, got_parent, (n, t, s, g, k) in released
            )
            latest = max(received_at, SENT_AT_EARLIEST_MS) + SENT_AT_MAX_AHEAD_MS
            for _, _, (_, _, sent_at, _, _) in released:
                if not SENT_AT_EARLIEST_MS <= sent_at <= latest:
                    state.stats["sent_at_clamped"] += 1  # shown clamped (ChatMessage.shown_at), kept as signed
            loss.ask_again_for_evicted(released, now)
            if self.evidence.conflicts:
                self.evidence.deliver_kept_versions(len(released), received_at)
        else:
            evicted = cast("list[tuple[Mid, Mid]]", orderer.take_evicted())  # only holding a message evicts others
            if evicted:
                loss.on_evicted(evicted, now)
            if parent is not None and not state.has_received(parent):
                loss.note_highest(parent[0], parent[1], now)  # a parent we never got: ask for it
        if not follows_previous:
            loss.suspect(sender, now)
        return len(released)
