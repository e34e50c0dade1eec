"""Sending and pacing: this peer's new messages go out signed in batches, at a rate members can take.

A burst of new messages goes out in DATA_BATCH datagrams that fit one Ethernet frame, one
signature per burst.  Flow control (after PGM's and NORM's loss-driven rate control): a NAK
from a member for messages this peer sent since its last cut means a member did not receive
them, so the send rate halves (never below ``PACE_FLOOR``); while no such NAK comes it grows by
``PACE_GROWTH`` every ``PACE_STEP``, and past ``PACE_CEILING`` pacing ends.  Paced batches wait,
signed, in a queue; heartbeats announce only what went out.
"""

from __future__ import annotations

from .. import crypto, wire
from ..types import ChatMessage, Mid
from .group import GroupState, chunks

# A burst of new messages goes out in DATA_BATCH datagrams that fit one Ethernet frame
# (1,472 bytes of UDP payload), so they are never fragmented: one lost fragment would
# lose them all.  Around the messages, a batch's envelope takes at most 275 bytes (100 of
# them the burst path) plus the gid twice (when sealed).  A longer message travels alone.
FRAME_PAYLOAD = 1_472
BATCH_ENVELOPE = 275
# Flow control, in messages per second.  The floor keeps a chat-paced stream (and the
# 1,000 msg/s latency target) out of reach of pacing: only a flood is slowed.
PACE_FLOOR = 2_000
PACE_CEILING = 200_000
PACE_GROWTH = 1.25  # per PACE_STEP without a member reporting loss of what we sent lately
PACE_STEP = 0.1
PACE_BURST = 0.02  # seconds of sending at the paced rate that may go out at once


def _batch_item_size(message: wire.Data) -> int:
    """An upper bound of a message's msgpack size inside a DATA_BATCH."""
    parent = 12 + len(message.parent[0]) if message.parent else 1
    name, text = message.name, message.text
    return 25 + parent + (len(name) if name.isascii() else len(name.encode())) \
        + (len(text) if text.isascii() else len(text.encode()))


class Pacer:
    __slots__ = ("state", "unsigned", "_paced", "released_seqno", "rate", "_credit", "_credit_at", "_cut_seqno",
                 "_rate_step_at", "_recent_sends")

    def __init__(self, state: GroupState, next_seqno: int) -> None:
        self.state = state
        self.unsigned: list[wire.Data] = []  # composed since the last flush, signed as one burst
        self._paced: list[wire.DataBatch] = []  # signed batches waiting for credit
        self.released_seqno = next_seqno - 1  # highest seqno sent out
        self.rate: float | None = None  # messages per second (None: not paced)
        self._credit = 0.0
        self._credit_at = 0.0
        self._cut_seqno = 0  # a loss report above this seqno cuts the rate again
        self._rate_step_at = 0.0
        self._recent_sends: list[tuple[float, int]] = []  # (when, messages) over the last second

    @property
    def waiting(self) -> bool:
        """Whether signed batches wait for credit."""
        return bool(self._paced)

    def sign(self) -> None:
        """Sign what was composed since the last call, in batches of one burst each, and give the
        deliveries of those messages their proofs."""
        if not self.unsigned:
            return
        state = self.state
        signed: list[wire.DataBatch] = []
        proofs: dict[Mid, bytes] = {}
        budget = FRAME_PAYLOAD - BATCH_ENVELOPE - 2 * len(state.gid)
        batches = list(chunks(self.unsigned, _batch_item_size, budget, crypto.MAX_BATCH))
        for start in range(0, len(batches), crypto.MAX_BURST):
            burst = batches[start:start + crypto.MAX_BURST]
            for chunk, batch in zip(burst, wire.sign_burst(state.identity, burst)):
                signed.append(batch)
                proofs.update(((state.pid, data.seqno), proof) for data, proof in zip(chunk, batch.proofs))
        self.unsigned = []
        state.deliveries = [
            ChatMessage(m.gid, m.mid, m.parent, m.sender_name, m.text, m.sent_at, m.received_at, m.order,
                        proofs[m.mid], m.public_key) if m.mid in proofs else m
            for m in state.deliveries
        ]
        self._paced += signed

    def on_nak(self, nak: wire.Nak, now: float) -> None:
        """A member's NAK for what we sent since the last cut is a loss report: slow down."""
        if nak.target == self.state.pid and nak.ranges and nak.ranges[-1][1] > self._cut_seqno \
                and nak.ranges[0][0] <= self.released_seqno:  # (seqnos never sent are no loss report)
            self._slow_down(now)

    def _slow_down(self, now: float) -> None:
        """A member lacks messages sent since the last cut: halve the rate (once per such loss)."""
        sent = sum(count for at, count in self._recent_sends if now - at <= 1.0)
        current = self.rate if self.rate is not None else max(sent, PACE_FLOOR)
        self.rate = max(PACE_FLOOR, current / 2)
        self._cut_seqno = self.released_seqno
        self._rate_step_at = now + PACE_STEP
        self.state.stats["rate_cuts"] += 1

    def release(self, now: float | None) -> list[wire.DataBatch]:
        """The paced batches that may go out by ``now`` (all of them when not paced)."""
        if self.rate is not None and now is not None:
            while now >= self._rate_step_at:  # no loss reported for a step: speed up
                self.rate *= PACE_GROWTH
                self._rate_step_at += PACE_STEP
            if self.rate > PACE_CEILING:
                self.rate = None
        if self.rate is None or now is None:
            out, self._paced = self._paced, []
        else:
            burst = max(self.rate * PACE_BURST, crypto.MAX_BATCH)
            self._credit = min(burst, self._credit + (now - self._credit_at) * self.rate)
            self._credit_at = now
            taken = 0
            for batch in self._paced:
                if len(batch.items) > self._credit + 1e-6:  # (float rounding must not stall it)
                    break
                self._credit -= len(batch.items)
                taken += 1
            out, self._paced = self._paced[:taken], self._paced[taken:]
        if out:
            self.released_seqno = max(self.released_seqno, out[-1].items[-1][0])
            if now is not None:
                self._recent_sends = [(at, n) for at, n in self._recent_sends if now - at <= 1.0]
                self._recent_sends.append((now, sum(len(batch.items) for batch in out)))
        return out

    def next_release(self) -> float | None:
        if not self._paced or self.rate is None:
            return None
        lacking = len(self._paced[0].items) - self._credit
        return self._credit_at + max(0.0, lacking) / self.rate
