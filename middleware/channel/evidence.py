"""Equivocation: two validly signed versions of one mid.

They are resolved the same way everywhere (the lowest SHA-256 of the signed bytes is kept) and
both versions are multicast as a REPAIR, in a few suppressed rounds, so every member learns of it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Iterable, cast

from .. import crypto, wire
from ..types import ChatMessage, Mid
from .group import Conflict, GroupState, Replaced

# Equivocation (two signed versions of one mid): every member keeps the version whose signed
# bytes hash lowest, and multicasts both versions (a REPAIR) so that every member learns of it:
# soon after learning of it and again at these offsets (s), unless another member's copy of
# the evidence came first.  At most MAX_CONFLICTS are remembered per group.
EVIDENCE_ROUNDS = (0.0, 2.0, 8.0, 20.0)
EVIDENCE_JITTER = 0.5
EVIDENCE_FIRST = 0.05  # the first round goes out within this (s)
MAX_CONFLICTS = 10_000


def _version_hash(gid: str, message: wire.StoredMessage) -> bytes:
    """What the equivocation rule compares: the SHA-256 of the bytes the writer signed."""
    return hashlib.sha256(crypto.message_bytes(gid, message.sender, message.seqno, message.parent,
                                               message.sent_at, message.name, message.text)).digest()


def _same_version(a: wire.StoredMessage, b: wire.StoredMessage) -> bool:
    return (a.parent, a.sent_at, a.name, a.text) == (b.parent, b.sent_at, b.name, b.text)


def _as_stored(message: ChatMessage) -> wire.StoredMessage:
    return wire.StoredMessage(message.mid[0], message.mid[1], message.parent, message.sent_at, message.sender_name,
                              message.text, message.public_key, message.signature)


def _as_delivery(gid: str, message: wire.StoredMessage, received_at: int) -> ChatMessage:
    return ChatMessage(gid, (message.sender, message.seqno), message.parent, message.name, message.text,
                       message.sent_at, received_at, 0, message.sig, message.public_key)


class Evidence:
    __slots__ = ("state", "conflicts", "evidence_at")

    def __init__(self, state: GroupState) -> None:
        self.state = state
        self.conflicts: dict[Mid, tuple[wire.StoredMessage, wire.StoredMessage]] = {}  # mid -> (kept, other)
        self.evidence_at: dict[Mid, tuple[float, int]] = {}  # mid -> (when to multicast it next, round)

    def restore(self, conflicts: Iterable[tuple[wire.StoredMessage, wire.StoredMessage]]) -> None:
        """Equivocations learnt before (``(kept, other)`` from the store): counted, and kept to."""
        for kept, other in conflicts:
            self.conflicts[(kept.sender, kept.seqno)] = (kept, other)
        self.state.stats["conflicts"] = len(self.conflicts)

    def next_due(self) -> float | None:
        return min(when for when, _ in self.evidence_at.values()) if self.evidence_at else None

    def deliver_kept_versions(self, count: int, received_at: int) -> None:
        """Of the last ``count`` deliveries, a held version that lost to another gives way to the one kept."""
        state = self.state
        deliveries = state.deliveries
        for i in range(len(deliveries) - count, len(deliveries)):
            versions = self.conflicts.get(deliveries[i].mid)
            if versions is not None:
                deliveries[i] = _as_delivery(state.gid, versions[0], received_at)

    def _current_version(self, mid: Mid) -> wire.StoredMessage | None:
        """The version of ``mid`` this peer holds or delivered, or None."""
        state = self.state
        held = state.orderer.held_payload(mid)
        if held is not None:
            parent, (name, text, sent_at, sig, public_key) = held
            return wire.StoredMessage(mid[0], mid[1], cast("Mid | None", parent), sent_at, name, text, public_key, sig)
        stored = state.fetch(state.gid, [mid])
        if stored:
            return stored[0]
        for message in reversed(state.deliveries):  # delivered since the last flush: not stored yet
            if message.mid == mid:
                return _as_stored(message)
        return None

    def check(self, incoming: wire.StoredMessage, now: float) -> None:
        """A mid seen again.  A different, validly signed version is equivocation: every
        member keeps the version whose signed bytes hash lowest, and spreads the evidence."""
        state = self.state
        mid = (incoming.sender, incoming.seqno)
        known = self.conflicts.get(mid)
        current = known[0] if known is not None else self._current_version(mid)
        if current is None or _same_version(current, incoming):
            return
        if known is not None and _same_version(known[1], incoming):
            return  # the version that lost, again
        if not wire.verify_stored(state.gid, incoming):
            state.stats["bad_signature_dropped"] += 1
            return
        if known is None and len(self.conflicts) >= MAX_CONFLICTS:
            return
        kept, other = sorted((current, incoming), key=lambda m: _version_hash(state.gid, m))
        self.conflicts[mid] = (kept, other)
        state.stats["conflicts"] = len(self.conflicts)
        state.events.append(Conflict(state.gid, mid, kept, other))
        if kept is incoming:
            self._replace(mid, kept)
        if mid not in self.evidence_at:
            self.evidence_at[mid] = (now + state.rng.uniform(0, EVIDENCE_FIRST), 0)

    def _replace(self, mid: Mid, kept: wire.StoredMessage) -> None:
        """The version kept wins over one this peer delivered (or holds: see Receiver.on_data)."""
        state = self.state
        if not state.orderer.is_delivered(mid):
            return
        for i, message in enumerate(state.deliveries):
            if message.mid == mid:
                state.deliveries[i] = _as_delivery(state.gid, kept, message.received_at)
                return
        state.events.append(Replaced(state.gid, kept))

    def on_repair(self, repair: wire.Repair, now: float) -> None:
        """Another member multicast both versions of a mid: our own copy of that evidence can wait."""
        copies = Counter((m.sender, m.seqno) for m in repair.messages)
        for mid in (mid for mid, count in copies.items() if count > 1):
            scheduled = self.evidence_at.get(mid)
            if scheduled is not None:  # this round is done by another member: skip to our next one
                self._next_round(mid, scheduled[1], now)

    def send(self, now: float) -> None:
        for mid, (when, round_) in list(self.evidence_at.items()):
            if when > now:
                continue
            kept, other = self.conflicts[mid]
            self.state.outbox.append(wire.Repair(self.state.gid, (kept, other)))
            self._next_round(mid, round_, now)

    def _next_round(self, mid: Mid, round_: int, now: float) -> None:
        if round_ + 1 >= len(EVIDENCE_ROUNDS):
            del self.evidence_at[mid]
        else:
            self.evidence_at[mid] = (now + EVIDENCE_ROUNDS[round_ + 1] - EVIDENCE_ROUNDS[round_]
                                     + self.state.rng.uniform(0, EVIDENCE_JITTER), round_ + 1)
