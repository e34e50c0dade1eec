"""The data path of one joined group, without I/O: seqnos out, S_b order in.

A ``GroupChannel`` numbers this peer's messages (per sender per group, so a
gap in a sender's seqnos means a lost message), and runs every DATA message,
its own included, through the group's :class:`~middleware.mop.SbOrderer`.
"""

from __future__ import annotations

from . import wire
from .mop import SbOrderer
from .types import ChatMessage, Mid, UsageError


class GroupChannel:
    def __init__(self, gid: str, pid: str, next_seqno: int = 1, max_held: int = 100_000) -> None:
        self.gid = gid
        self.pid = pid
        self.next_seqno = next_seqno
        self.orderer = SbOrderer(max_held=max_held)
        self.foreign_dropped = 0

    def restore(self, mids: list[Mid]) -> None:
        """Mark messages already in the store as delivered."""
        for mid in mids:
            self.orderer.mark_delivered(mid)

    def compose(self, name: str, text: str, parent: Mid | None, now_ms: int) -> wire.Data:
        """A new DATA message from this peer (the caller persists ``next_seqno``)."""
        if len(text) > wire.MAX_TEXT:
            raise UsageError(f"text too long: {len(text)} characters, limit is {wire.MAX_TEXT}")
        if not text.strip():
            raise UsageError("text is empty")
        if parent is not None and not self.orderer.is_delivered(parent):
            raise UsageError(f"bad parent: message {parent[0]}:{parent[1]} is not in group {self.gid}")
        data = wire.Data(self.gid, self.next_seqno, parent, now_ms, name, text)
        self.next_seqno += 1
        return data

    def receive(self, sender: str, data: wire.Data, now_ms: int) -> list[ChatMessage]:
        """Order one DATA message; return the chat messages that became deliverable."""
        if data.gid != self.gid:
            self.foreign_dropped += 1
            return []
        mid = (sender, data.seqno)
        released = self.orderer.receive(mid, data.parent, (data.name, data.text, data.sent_at))
        return [
            ChatMessage(self.gid, got_mid, got_parent, name, text, sent_at, now_ms)
            for got_mid, got_parent, (name, text, sent_at) in released
        ]

    @property
    def pending(self) -> int:
        return self.orderer.pending
