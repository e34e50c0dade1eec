"""Heartbeats and presence: who is heard, and what this peer announces after it sends.

- **Members only** (after JGroups' NAKACK2): datagrams are taken only from members
  (``is_member``), so a stranger's DATA, NAK, SYNC_REQ or heartbeat costs a dict look-up; they
  are counted (``stranger_dropped``) and the highest seqno each stranger claimed is kept in a
  small table, so a member whose join was not heard yet is asked for its messages once it is.
- **Heartbeats**: after this peer sends, it announces its highest seqno at growing intervals
  (0.2 s doubling to 8 s) and then falls silent, so a lost last message is noticed without idle
  chatter.
"""

from __future__ import annotations

import math

from .. import wire
from .group import GroupState
from .loss import LossDetector

MAX_STRANGERS = 1_024  # non-members remembered (their highest seqno) in case their join is late
HEARTBEAT_FIRST, HEARTBEAT_MAX = 0.2, 8.0
HEARTBEAT_QUIET_AFTER = 30.0  # seconds after the last send


class Presence:
    """Who may speak in the group, and the strangers' claims kept for a late join."""

    __slots__ = ("state", "loss", "strangers")

    def __init__(self, state: GroupState, loss: LossDetector) -> None:
        self.state = state
        self.loss = loss
        # Not sender records: a bounded table that hostile pids cannot grow.
        self.strangers: dict[str, int] = {}  # non-member -> highest seqno it claimed

    def admit(self, sender: str, message: wire.Message, now: float) -> bool:
        """Whether to take a datagram of ``sender``: a member's (noted as heard) or our own."""
        state = self.state
        if sender != state.pid:
            if not state.is_member(sender):
                self._note_stranger(sender, message)
                return False
            state.senders.of(sender).heard_at = now
        return True

    def _note_stranger(self, sender: str, message: wire.Message) -> None:
        """A datagram from a non-member: dropped, but the seqno it claims is remembered (in a
        bounded table) so that, should the sender turn out to be a member, we ask for it."""
        self.state.stats["stranger_dropped"] += 1
        if isinstance(message, wire.DataBatch):
            seqno = max(item[0] for item in message.items) if message.items else 0
        elif isinstance(message, (wire.Data, wire.Heartbeat)):
            seqno = message.seqno
        else:
            return
        strangers = self.strangers
        if sender not in strangers and len(strangers) >= MAX_STRANGERS:
            del strangers[next(iter(strangers))]  # the oldest goes
        strangers[sender] = max(seqno, strangers.get(sender, 0))

    def member_joined(self, pid: str, now: float) -> None:
        """``pid`` is a member now: ask for whatever it sent while it was taken for a stranger."""
        seqno = self.strangers.pop(pid, 0)
        if seqno and self.state.is_member(pid):
            self.loss.note_highest(pid, seqno, now)

    def on_heartbeat(self, sender: str, heartbeat: wire.Heartbeat, now: float) -> None:
        if sender != self.state.pid and heartbeat.seqno:
            self.loss.note_highest(sender, heartbeat.seqno, now)


class Heartbeats:
    """This peer's own heartbeats: armed by a send, growing apart, silent after a while."""

    __slots__ = ("state", "at", "_interval", "last_send_at", "_due")

    def __init__(self, state: GroupState) -> None:
        self.state = state
        self.at: float | None = None
        self._interval = HEARTBEAT_FIRST
        self.last_send_at = -math.inf
        self._due = False  # sent since the heartbeat was last armed

    def sent(self, now: float) -> None:
        self.last_send_at = now
        self._due = True

    def arm(self) -> None:
        """The first heartbeat goes HEARTBEAT_FIRST after this peer's last message: armed here,
        once per flush or timer, rather than on every message sent."""
        if self._due:
            self._due = False
            self._interval = HEARTBEAT_FIRST
            self.at = self.last_send_at + HEARTBEAT_FIRST * self.state.rng.uniform(0.8, 1.2)

    def on_timer(self, now: float, released_seqno: int) -> None:
        if self.at is not None and self.at <= now:
            self.state.outbox.append(wire.Heartbeat(self.state.gid, released_seqno))
            self._interval = min(HEARTBEAT_MAX, self._interval * 2)
            if now - self.last_send_at > HEARTBEAT_QUIET_AFTER:
                self.at = None
            else:
                self.at = now + self._interval * self.state.rng.uniform(0.8, 1.2)
