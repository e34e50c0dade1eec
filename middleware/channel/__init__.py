"""One joined group's protocol core, without I/O: ordering, loss repair, heartbeats and MSP.

Driven like aioquic's connection: user calls (``compose``, ``start_sync``),
``receive(sender, message, now)`` for the group channel's datagrams and
``handle_timer(now)``; drained by ``datagrams_to_send()``, ``deliveries()``,
``events()`` and ``get_timer()``.  It reads stored messages through ``fetch``
(the SQLite store in the app, a dict in tests) and never touches a socket or
a clock.

- **Ordering**: every DATA message, this peer's own included, runs through the
  group's :class:`~middleware.mop.SbOrderer`.
- **Loss detection**: seqnos count per sender, so a gap in what was received
  from a sender is a loss; so is a parent that held replies wait for, and a
  seqno above the last one received that a heartbeat announces.
- **Members only** (after JGroups' NAKACK2): datagrams are taken only from
  members (``is_member``), so a stranger's DATA, NAK, SYNC_REQ or heartbeat
  costs a dict look-up; they are counted (``stranger_dropped``) and the highest
  seqno each stranger claimed is kept in a small table, so a member whose join
  was not heard yet is asked for its messages once it is.  Messages that a
  member relays are taken whoever wrote them (their author's signature is
  checked), up to ``MAX_SENDERS`` authors who are not members.  NAK state
  exists only for members and for senders whose messages we hold.
- **Repair** (after SRM/NORM/PGM): a NAK goes out after a random back-off and
  leaves out what another member asked for within ``NAK_RETRY``.  One member
  answers: the original sender at once, the others in turns of
  ``ANSWER_SLOT`` in an order drawn from a hash of the request and their pid
  (random but the same on every member), so the next in line hears the first
  one's REPAIR and drops what it carried, before each chunk.  What was repaired
  within ``REPAIR_HOLDOFF`` is not repaired again (what was NAKed or repaired
  lately ages entry by entry, in ``RECENT_SLICES`` slices).  One REPAIR per
  request, neither sent twice nor held to merge: at 200 members and 5 % loss
  that is 1.48 NAKs and 1.40 repairs per lost message, where a second copy
  gives 1.1 NAKs but 2.05 repairs and merging costs more of both (README,
  "Repair at scale", issue 34).  A NAK costs O(ranges): it
  is intersected with what we hold as ranges.  Requests retry with
  exponential back-off up to ``NAK_RETRY_MAX``, which starts again whenever some
  of what was asked for arrived, and give up after ``NAK_TRIES`` without it: the gap is reported
  (the held replies stay held, visible as waiting).
- **Hold store**: replies waiting for a parent are bounded in count and bytes by the
  orderer; one it evicts is a gap again, not asked for until its parent is delivered.
- **Equivocation**: two validly signed versions of one mid are resolved the same way
  everywhere (the lowest SHA-256 of the signed bytes is kept) and both versions are
  multicast as a REPAIR, in a few suppressed rounds, so every member learns of it.
- **Budgets**: answers are charged to the requester (``REQUESTER_MESSAGES``
  and ``REQUESTER_BYTES`` per second) and to this peer (``ANSWER_RATE``), and at
  most ``MAX_SYNC_ANSWERS`` sync answers are open at once.
- **Flow control** (after PGM's and NORM's loss-driven rate control): a NAK
  from a member for messages this peer sent since its last cut means a member
  did not receive them, so the send rate halves (never below ``PACE_FLOOR``);
  while no such NAK comes it grows by ``PACE_GROWTH`` every ``PACE_STEP``, and
  past ``PACE_CEILING`` pacing ends.  Paced batches wait, signed, in a queue;
  heartbeats announce only what went out.
- **Heartbeats**: after this peer sends, it announces its highest seqno at
  growing intervals (0.2 s doubling to 8 s) and then falls silent, so a lost
  last message is noticed without idle chatter.
- **MSP** (thesis ch. 6): a SYNC_REQ carries the requester's digest
  (per-sender seqno ranges, O(senders + gaps)).  Each member works out what the
  requester lacks (the thesis's MIR), waits a random back-off, and streams it in
  paced chunks of at most ``CHUNK_BYTES``; a member that sees another one
  answering the same request removes what was sent from its MIR and yields
  while that one is active (the thesis's suppression), and stale requests are
  dropped (the PSSIT).  What the requester holds and a member lacks is asked
  for with NAKs, so synchronization goes both ways.  The requester's own NAKs
  wait only while answers are expected (``SYNC_ANSWER_WAIT`` after the request
  and after each answer that announces more): members that have nothing to send
  stay silent, so a sync nobody answers must not hold NAKs until its retry.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter
from dataclasses import dataclass
from sys import getsizeof
from typing import Callable, Iterable

from .. import crypto, rules, wire
from ..crypto import Identity
from ..events import SyncProgress  # told to the application as it is
from ..mop import DEFAULT_MAX_HELD_BYTES, SbOrderer
from ..rangeset import RangeSet
from ..types import SENT_AT_EARLIEST_MS, SENT_AT_MAX_AHEAD_MS, ChatMessage, Mid, UsageError, check_unicode

Fetch = Callable[[str, list[Mid]], list[wire.StoredMessage]]
"""``fetch(gid, mids)`` -> the stored messages among ``mids``, in delivery order."""

NAK_DELAY = (0.005, 0.030)  # first NAK after this random back-off (s)...
NAK_SPREAD = 0.001  # ...or up to this much per member, when longer: of all the members that lost a
# message, the first asks about as soon as in a small group, and the next one has heard it
# (the more members, the more of them lost it)
NAK_RETRY = 0.25  # then retry after this, doubling per try,
NAK_RETRY_MAX = 1.0  # up to this: at 20 % loss, 36 % of NAK -> REPAIR round trips fail, and four
# failing in a row cost 7.75 s with no cap (2.75 s with it); a gap is reported after NAK_TRIES,
NAK_TRIES = 32  # about 31 s without progress, as long as eight doubling tries took
NAK_MAX_SEQNOS = 5_000  # seqnos asked for, or answered, per NAK
NAK_MAX_RANGES = 500  # ranges asked for, or answered, per NAK: a NAK costs O(ranges)
ANSWER_SLOT = 0.010  # the next responder in line waits this long per member before it (s)
RESPONDERS = 2  # members in line for a NAK (after the sender); 4-fold more each time it is asked again,
REPEAT_LEVELS = 3  # and every member who holds it from the 4th time
REPEAT_WINDOW = 5.0  # a NAK for what was asked for within this long is asked again (s)
SENDER_ALIVE = 10.0  # a member heard from within this long answers NAKs for its messages itself (s)
ANSWER_YIELD = 0.1  # a responder that hears another one's REPAIR or SYNC_RESP defers this long (s)
REPAIR_HOLDOFF = 0.05  # seqnos repaired within this long are not repaired again for a NAK (s)
REPAIR_PACE = 0.004  # between two chunks of one repair answer (s)
ANSWER_RATE = 30_000  # messages per second this peer sends as repairs or sync answers
# Per requester, per second (a burst of one second's worth): what one member can make us send.
REQUESTER_MESSAGES = 20_000
REQUESTER_BYTES = 10_000_000
MAX_SYNC_ANSWERS = 4  # sync answers streamed at once; further requests wait for a retry
RECENT_SLICES = 8  # what was NAKed or repaired lately is kept in this many slices of its window
MAX_STRANGERS = 1_024  # non-members remembered (their highest seqno) in case their join is late
CHUNK_BYTES = 60_000
# A burst of new messages goes out in DATA_BATCH datagrams that fit one Ethernet frame
# (1,472 bytes of UDP payload), so they are never fragmented: one lost fragment would
# lose them all.  Around the messages, a batch's envelope takes at most 275 bytes (100 of
# them the burst path) plus the gid twice (when sealed).  A longer message travels alone.
FRAME_PAYLOAD = 1_472
BATCH_ENVELOPE = 275
SYNC_PACE = 0.008  # between two chunks of one sync answer (s)
SYNC_YIELD = 0.5  # how long to defer to another responder that is answering (s)
SYNC_RETRY = 1.0
SYNC_TRIES = 3
# NAKs wait for a sync's answers (which carry the same messages) this long after the request and
# after each answer that announces more (s).  Members answer only with what the requester lacks, so
# a request that nobody answers means nothing was missing (or it was lost: the retry covers that),
# and NAKs must not wait for the retry.  The first answer comes within ANSWER_SLOT per member
# before it in the line, and the next chunk SYNC_PACE later.
SYNC_ANSWER_WAIT = 0.2
# Flow control, in messages per second.  The floor keeps a chat-paced stream (and the
# 1,000 msg/s latency target) out of reach of pacing: only a flood is slowed.
PACE_FLOOR = 2_000
PACE_CEILING = 200_000
PACE_GROWTH = 1.25  # per PACE_STEP without a member reporting loss of what we sent lately
PACE_STEP = 0.1
PACE_BURST = 0.02  # seconds of sending at the paced rate that may go out at once
HEARTBEAT_FIRST, HEARTBEAT_MAX = 0.2, 8.0
HEARTBEAT_QUIET_AFTER = 30.0  # seconds after the last send
MAX_SENDERS = 10_000  # per group, authors who are not members: relayed or restored
MemberCheck = Callable[[str], bool]
# What holding one message costs beyond its text and proof (payload tuple, mid, node, index, and
# the display name, at most 64 characters).
HELD_OVERHEAD = 700
# Evicted messages remembered (by mid and parent) so they are asked for again once their
# parent is delivered; past this, the oldest become ordinary gaps, which NAKs and MSP fetch.
MAX_EVICTED_REMEMBERED = 100_000
# Equivocation (two signed versions of one mid): every member keeps the version whose signed
# bytes hash lowest, and multicasts both versions (a REPAIR) so that every member learns of it:
# soon after learning of it and again at these offsets (s), unless another member's copy of
# the evidence came first.  At most MAX_CONFLICTS are remembered per group.
EVIDENCE_ROUNDS = (0.0, 2.0, 8.0, 20.0)
EVIDENCE_JITTER = 0.5
EVIDENCE_FIRST = 0.05  # the first round goes out within this (s)
MAX_CONFLICTS = 10_000


@dataclass(frozen=True, slots=True)
class GapReported:
    """Messages nobody answered for after ``NAK_TRIES`` requests."""

    gid: str
    sender: str
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Conflict:
    """Two different signed messages under one mid (learnt now): ``kept`` is the version every
    member keeps (its signed bytes hash lowest), ``other`` the one it beat."""

    gid: str
    mid: Mid
    kept: wire.StoredMessage
    other: wire.StoredMessage


@dataclass(frozen=True, slots=True)
class Replaced:
    """A delivered message's text gave way to the version the equivocation rule keeps."""

    gid: str
    message: wire.StoredMessage


Event = SyncProgress | GapReported | Conflict | Replaced


def _approx_size(message: wire.StoredMessage) -> int:
    return 120 + len(message.public_key) + len(message.sig) + len(message.sender) + len(message.name) \
        + len(message.text.encode())


def _batch_item_size(message: wire.Data) -> int:
    """An upper bound of a message's msgpack size inside a DATA_BATCH."""
    parent = 12 + len(message.parent[0]) if message.parent else 1
    name, text = message.name, message.text
    return 25 + parent + (len(name) if name.isascii() else len(name.encode())) \
        + (len(text) if text.isascii() else len(text.encode()))


def _chunks(messages: list, limit: int = CHUNK_BYTES, max_items: int = wire.MAX_ITEMS,
            size: Callable[[object], int] = _approx_size) -> Iterable[list]:
    chunk, total = [], 0
    for message in messages:
        cost = size(message)
        if chunk and (total + cost > limit or len(chunk) >= max_items):
            yield chunk
            chunk, total = [], 0
        chunk.append(message)
        total += cost
    if chunk:
        yield chunk


def _held_size(payload: tuple) -> int:
    """What holding a message costs (called by the orderer only for the messages it holds)."""
    _, text, _, sig, _ = payload
    return HELD_OVERHEAD + getsizeof(text) + len(sig)


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


def _discard(sets: dict[str, RangeSet], key: str, value: int) -> None:
    """Remove ``value`` from ``sets[key]`` (dropping an emptied set), if there."""
    values = sets.get(key)
    if values is not None and value in values:
        end = values.take_run(value)
        values.add_range(value + 1, end)
        if not values:
            del sets[key]


def _send_order(mid: Mid) -> tuple[int, str]:
    return mid[1], mid[0]


class _Budget:
    """A token bucket per requester, in messages and bytes (a burst of one second's worth)."""

    __slots__ = ("messages", "bytes", "at")

    def __init__(self, now: float) -> None:
        self.messages, self.bytes, self.at = float(REQUESTER_MESSAGES), float(REQUESTER_BYTES), now

    def refill(self, now: float) -> None:
        elapsed = max(0.0, now - self.at)
        self.at = max(self.at, now)
        self.messages = min(REQUESTER_MESSAGES, self.messages + elapsed * REQUESTER_MESSAGES)
        self.bytes = min(REQUESTER_BYTES, self.bytes + elapsed * REQUESTER_BYTES)


class _RepairAnswer:
    """The seqnos of one sender that this peer will repair, sent a chunk at a time."""

    __slots__ = ("wanted", "next_at", "requester")

    def __init__(self, next_at: float, requester: str) -> None:
        self.wanted = RangeSet()
        self.next_at = next_at
        self.requester = requester


class _RecentRanges:
    """Seqnos of one sender seen lately (NAKed or repaired), each for about ``window`` seconds.

    Kept in time slices of ``window / RECENT_SLICES``: an entry is forgotten with its slice,
    between ``window`` and ``window * (1 + 1 / RECENT_SLICES)`` after it came, so memory is at
    most ``RECENT_SLICES + 1`` range sets.  (A single set forgotten as a whole once its oldest
    entry was old forgot a NAK heard a moment ago with it, and the members that had held their
    own NAK back for it asked again before its repair could come.)"""

    __slots__ = ("slices",)

    def __init__(self) -> None:
        self.slices: list[tuple[float, list[float], RangeSet]] = []  # (started, [last added], seqnos)

    def _live(self, now: float, window: float) -> list[tuple[float, list[float], RangeSet]]:
        slices = self.slices
        while slices and now - slices[0][1][0] > window:
            del slices[0]
        return slices

    def _current(self, now: float, window: float) -> RangeSet:
        slices = self._live(now, window)
        if not slices or now - slices[-1][0] > window / RECENT_SLICES:
            slices.append((now, [now], RangeSet()))
        slices[-1][1][0] = now
        return slices[-1][2]

    def add(self, seqno: int, now: float, window: float) -> None:
        self._current(now, window).add(seqno)

    def add_range(self, start: int, end: int, now: float, window: float) -> None:
        self._current(now, window).add_range(start, end)

    def intersection(self, ranges: list[tuple[int, int]], max_ranges: int, now: float,
                     window: float) -> list[tuple[int, int]]:
        """The parts of inclusive ``ranges`` (ascending, disjoint) seen within ``window``."""
        slices = self._live(now, window)
        if len(slices) == 1:
            return slices[0][2].intersection(ranges, max_ranges)
        found = RangeSet()
        for _, _, seqnos in slices:
            for first, last in seqnos.intersection(ranges, max_ranges):
                found.add_range(first, last + 1)
        return found.ranges()[:max_ranges]

    def forgotten_at(self, ranges: list[tuple[int, int]], now: float, window: float) -> float:
        """When the last of ``ranges`` seen within ``window`` is forgotten (``now`` if none is)."""
        until = now
        for _, last, seqnos in self._live(now, window):
            if seqnos.intersection(ranges, 1):
                until = max(until, last[0] + window)
        return until


def _rank_key(*parts: object) -> bytes:
    return "\x1f".join(map(str, parts)).encode()


def _score(key: bytes, pid: str) -> bytes:
    return hashlib.blake2b(key + pid.encode(), digest_size=8).digest()


class _SyncAnswer:
    """One MSP request this peer may answer: the thesis's MIR.

    Sent oldest seqnos first (across senders), which approximates the order the
    messages were written in, so few of them wait for a parent at the requester.
    """

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
        picked = []
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
        self.orderer = SbOrderer(max_held=max_held, max_held_bytes=max_held_bytes, size_of=_held_size)
        self.fetch: Fetch = fetch or (lambda gid, mids: [])
        self.rng = rng or random.Random()
        self.group_size = 1
        self.is_member: MemberCheck = is_member or (lambda pid: True)
        self.members: Callable[[], Iterable[str]] = members or (lambda: ())
        self._strangers: dict[str, int] = {}  # non-member -> highest seqno it claimed
        self._heard_at: dict[str, float] = {}  # member -> when a datagram of its came last
        self._outbox: list[wire.Message] = []
        self._wall = 0.0  # the wall-clock stamp of the input being handled (received_at, sent_at)
        self._unsigned: list[wire.Data] = []
        self._deliveries: list[ChatMessage] = []
        self._events: list[Event] = []
        # Loss detection: everything received (delivered or held) and the highest seqno known to exist.
        self._received: dict[str, RangeSet] = {}
        self._highest: dict[str, int] = {}
        self._abandoned: dict[str, RangeSet] = {}
        # Held messages the orderer evicted: not received any more, and not asked for until
        # their parent is delivered (parent -> evicted replies, oldest first; sender -> seqnos).
        self._evicted_for: dict[Mid, list[Mid]] = {}
        self._evicted_remembered = 0
        self._deferred: dict[str, RangeSet] = {}
        # Equivocation: mid -> (kept, other) versions, and when to multicast them next.
        self._conflicts: dict[Mid, tuple[wire.StoredMessage, wire.StoredMessage]] = {}
        self._evidence_at: dict[Mid, tuple[float, int]] = {}  # mid -> (when, round)
        # NAK state per sender: when to (re)ask, and how often we have asked.
        self._nak_at: dict[str, float] = {}
        self._nak_tries: dict[str, int] = {}
        # Per sender: how many seqnos were missing, and which ones were asked for, at the last NAK.
        self._nak_progress: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {}
        self._asked: dict[str, _RecentRanges] = {}  # sender -> seqnos other members NAKed lately
        self._requested: dict[str, list[_RecentRanges]] = {}  # asked for 1, 2, 3 times within REPEAT_WINDOW
        # Repairs this peer will send, per sender, and what was repaired lately (by anyone).
        self._answers: dict[str, _RepairAnswer] = {}
        self._repaired: dict[str, _RecentRanges] = {}
        self._answer_budget = float(ANSWER_RATE)
        self._budget_at = 0.0
        self._budgets: dict[str, _Budget] = {}  # per requester
        # Flow control: signed batches waiting for credit, and the rate (None: not paced).
        self._paced: list[wire.DataBatch] = []
        self._released_seqno = next_seqno - 1  # highest seqno sent out
        self._rate: float | None = None
        self._credit = 0.0
        self._credit_at = 0.0
        self._cut_seqno = 0  # a loss report above this seqno cuts the rate again
        self._rate_step_at = 0.0
        self._recent_sends: list[tuple[float, int]] = []  # (when, messages) over the last second
        # Heartbeats.
        self._heartbeat_at: float | None = None
        self._heartbeat_interval = HEARTBEAT_FIRST
        self._last_send_at = -math.inf
        self._heartbeat_due = False  # sent since the heartbeat was last armed
        # MSP, as requester.
        self._sync_seqno = 0
        self._sync_active = False
        self._sync_retry_at: float | None = None
        self._naks_held_until: float | None = None  # while a sync's answers are expected
        self._sync_tries = 0
        self._sync_received = 0
        self._sync_expected = 0
        self._sync_remaining: dict[str, int] = {}
        # MSP, as responder: the PSSIT (latest request per requester) and open answers.
        self._latest_request: dict[str, int] = {}
        self._sync_answers: dict[tuple[str, int], _SyncAnswer] = {}
        self.stats = {"naks_sent": 0, "repairs_sent": 0, "repaired": 0, "gaps_reported": 0,
                      "sync_messages_sent": 0, "foreign_dropped": 0, "conflicts": 0,
                      "bad_signature_dropped": 0, "stranger_dropped": 0, "requests_over_budget": 0,
                      "sync_requests_refused": 0, "rate_cuts": 0, "sent_at_clamped": 0}

    # -- restore and user calls ----------------------------------------------------

    def restore(self, mids: Iterable[Mid]) -> None:
        """Mark messages already in the store as delivered."""
        for mid in mids:
            self.orderer.mark_delivered(mid)
            self._note_received(mid[0], mid[1])

    def restore_conflicts(self, conflicts: Iterable[tuple[wire.StoredMessage, wire.StoredMessage]]) -> None:
        """Equivocations learnt before (``(kept, other)`` from the store): counted, and kept to."""
        for kept, other in conflicts:
            self._conflicts[(kept.sender, kept.seqno)] = (kept, other)
        self.stats["conflicts"] = len(self._conflicts)

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
        self._wall = now if wall is None else wall
        data = wire.Data(self.gid, self.next_seqno, parent, int(self._wall * 1000), name, text, b"")
        self.next_seqno += 1
        self._unsigned.append(data)  # signed with the rest of this burst in datagrams_to_send()
        self._on_data(self.pid, data.seqno, data.parent, data.name, data.text, data.sent_at, now,
                      b"", self.identity.public_key)
        self._last_send_at = now
        self._heartbeat_due = True
        return data

    def retract(self, mids: Iterable[Mid]) -> list[Mid]:
        """Take back this peer's newest messages, composed but never sent (they could not be
        stored): their seqnos are free again.  Returns the mids taken back."""
        retracted = []
        for mid in sorted((m for m in mids if m[0] == self.pid), key=lambda m: -m[1]):
            if mid[1] != self.next_seqno - 1 or not self.orderer.forget_delivered(mid):
                break  # only the newest can go back, or seqnos would be reused out of order
            _discard(self._received, self.pid, mid[1])
            self.next_seqno -= 1
            retracted.append(mid)
        return retracted

    def start_sync(self, now: float, wall: float | None = None) -> None:
        """MSP: ask the group for what this peer missed (on join and on return).

        ``wall`` (seconds since the epoch), given when the channel opens, starts the request
        numbers at the wall clock's milliseconds: the members remember each requester's latest
        number to drop stale copies, and a restarted peer counting again from 1 would be
        dropped until its retries ran out."""
        # A new sync: its retries and progress start again (a lost request on return is asked
        # again, however many requests went before).
        self._sync_tries = self._sync_received = self._sync_expected = 0
        self._sync_remaining = {}
        self._request_sync(now, wall)

    def _request_sync(self, now: float, wall: float | None = None) -> None:
        self._sync_seqno = max(self._sync_seqno + 1, 0 if wall is None else int(wall * 1000))
        self._sync_active = True
        self._sync_tries += 1
        self._sync_retry_at = now + SYNC_RETRY
        self._naks_held_until = now + SYNC_ANSWER_WAIT
        digest = tuple(
            (pid, tuple(seen.ranges())) for pid, seen in sorted(self._received.items()) if seen
        )[: wire.MAX_ITEMS]
        self._outbox.append(wire.SyncReq(self.gid, self._sync_seqno, digest))

    @property
    def pending(self) -> int:
        return self.orderer.pending

    @property
    def syncing(self) -> bool:
        return self._sync_active

    # -- network input ---------------------------------------------------------------

    def receive(self, sender: str, message: wire.Message, now: float, public_key: bytes = b"",
                wall: float | None = None) -> None:
        """One verified datagram of this group (``public_key``: the sender's, from the envelope).

        ``now`` is the deadline clock; ``wall`` (``now`` if not given) stamps ``received_at``."""
        self._wall = now if wall is None else wall
        if getattr(message, "gid", self.gid) != self.gid:
            self.stats["foreign_dropped"] += 1
            return
        if sender != self.pid:
            if not self.is_member(sender):
                self._note_stranger(sender, message)
                return
            self._heard_at[sender] = now
        if isinstance(message, wire.DataBatch):
            for (seqno, parent, sent_at, name, text), proof in zip(message.items, message.proofs):
                self._on_data(sender, seqno, parent, name, text, sent_at, now, proof, public_key)
        elif isinstance(message, wire.Data):
            self._on_data(sender, message.seqno, message.parent, message.name, message.text, message.sent_at, now,
                          message.sig, public_key)
        elif isinstance(message, wire.Repair):
            self._on_repair(sender, message, now)
            if len(message.messages) > 1:
                self._on_evidence(message, now)
        elif isinstance(message, wire.Nak):
            if sender != self.pid:
                self._on_nak(sender, message, now)
        elif isinstance(message, wire.Heartbeat):
            if sender != self.pid and message.seqno:
                self._note_highest(sender, message.seqno, now)
        elif isinstance(message, wire.SyncReq):
            if sender != self.pid:
                self._on_sync_req(sender, message, now)
        elif isinstance(message, wire.SyncResp):
            if sender != self.pid:
                self._on_sync_resp(sender, message, now)

    def _note_stranger(self, sender: str, message: wire.Message) -> None:
        """A datagram from a non-member: dropped, but the seqno it claims is remembered (in a
        bounded table) so that, should the sender turn out to be a member, we ask for it."""
        self.stats["stranger_dropped"] += 1
        if isinstance(message, wire.DataBatch):
            seqno = max(item[0] for item in message.items) if message.items else 0
        elif isinstance(message, (wire.Data, wire.Heartbeat)):
            seqno = message.seqno
        else:
            return
        strangers = self._strangers
        if sender not in strangers and len(strangers) >= MAX_STRANGERS:
            del strangers[next(iter(strangers))]  # the oldest goes
        strangers[sender] = max(seqno, strangers.get(sender, 0))

    def member_joined(self, pid: str, now: float) -> None:
        """``pid`` is a member now: ask for whatever it sent while it was taken for a stranger."""
        seqno = self._strangers.pop(pid, 0)
        if seqno and self.is_member(pid):
            self._note_highest(pid, seqno, now)

    def _on_stored(self, stored: wire.StoredMessage, now: float) -> int:
        """A relayed message: checked against its writer's signature unless we have it already."""
        mid = (stored.sender, stored.seqno)
        if not self.orderer.is_delivered(mid) and self.orderer.held_payload(mid) is None:
            if not wire.verify_stored(self.gid, stored):
                self.stats["bad_signature_dropped"] += 1
                return 0
        return self._on_data(stored.sender, stored.seqno, stored.parent, stored.name, stored.text, stored.sent_at,
                             now, stored.sig, stored.public_key)

    def _on_data(self, sender: str, seqno: int, parent: Mid | None, name: str, text: str, sent_at: int,
                 now: float, sig: bytes, public_key: bytes) -> int:
        """Order one (verified) message; returns how many messages it made deliverable."""
        received = self._received.get(sender)
        if received is None:
            # Members are always taken; authors who are not (relayed or restored) up to a cap.
            if len(self._received) >= MAX_SENDERS and sender != self.pid and not self.is_member(sender):
                self.stats["foreign_dropped"] += 1
                return 0
            received = self._received[sender] = RangeSet()
        orderer = self.orderer
        duplicates = orderer.duplicates
        released = orderer.receive((sender, seqno), parent, (name, text, sent_at, sig, public_key))
        if orderer.duplicates != duplicates:
            self._check_conflict(wire.StoredMessage(sender, seqno, parent, sent_at, name, text, public_key, sig), now)
            return 0
        follows_previous = seqno == 1 or seqno - 1 in received
        received.add(seqno)
        if self._deferred:
            _discard(self._deferred, sender, seqno)  # an evicted message came again
        if self._highest.get(sender, 0) < seqno:
            self._highest[sender] = seqno
        if released:
            received_at = int(self._wall * 1000)
            gid = self.gid
            self._deliveries.extend(
                ChatMessage(gid, mid, got_parent, n, t, s, received_at, 0, g, k)
                for mid, got_parent, (n, t, s, g, k) in released
            )
            latest = max(received_at, SENT_AT_EARLIEST_MS) + SENT_AT_MAX_AHEAD_MS
            for _, _, (_, _, sent_at, _, _) in released:
                if not SENT_AT_EARLIEST_MS <= sent_at <= latest:
                    self.stats["sent_at_clamped"] += 1  # shown clamped (ChatMessage.shown_at), kept as signed
            if self._evicted_for:
                self._ask_again_for_evicted(released, now)
            if self._conflicts:
                self._deliver_kept_versions(len(released), received_at)
        else:
            evicted = orderer.take_evicted()  # only holding a message evicts others
            if evicted:
                self._on_evicted(evicted, now)
            if parent is not None and not self._has_received(parent):
                self._note_highest(parent[0], parent[1], now)  # a parent we never got: ask for it
        if not follows_previous:
            self._suspect(sender, now)
        return len(released)

    def _deliver_kept_versions(self, count: int, received_at: int) -> None:
        """Of the last ``count`` deliveries, a held version that lost to another gives way to the one kept."""
        deliveries = self._deliveries
        for i in range(len(deliveries) - count, len(deliveries)):
            versions = self._conflicts.get(deliveries[i].mid)
            if versions is not None:
                deliveries[i] = _as_delivery(self.gid, versions[0], received_at)

    def _current_version(self, mid: Mid) -> wire.StoredMessage | None:
        """The version of ``mid`` this peer holds or delivered, or None."""
        held = self.orderer.held_payload(mid)
        if held is not None:
            parent, (name, text, sent_at, sig, public_key) = held
            return wire.StoredMessage(mid[0], mid[1], parent, sent_at, name, text, public_key, sig)
        stored = self.fetch(self.gid, [mid])
        if stored:
            return stored[0]
        for message in reversed(self._deliveries):  # delivered since the last flush: not stored yet
            if message.mid == mid:
                return _as_stored(message)
        return None

    def _check_conflict(self, incoming: wire.StoredMessage, now: float) -> None:
        """A mid seen again.  A different, validly signed version is equivocation: every
        member keeps the version whose signed bytes hash lowest, and spreads the evidence."""
        mid = (incoming.sender, incoming.seqno)
        known = self._conflicts.get(mid)
        current = known[0] if known is not None else self._current_version(mid)
        if current is None or _same_version(current, incoming):
            return
        if known is not None and _same_version(known[1], incoming):
            return  # the version that lost, again
        if not wire.verify_stored(self.gid, incoming):
            self.stats["bad_signature_dropped"] += 1
            return
        if known is None and len(self._conflicts) >= MAX_CONFLICTS:
            return
        kept, other = sorted((current, incoming), key=lambda m: _version_hash(self.gid, m))
        self._conflicts[mid] = (kept, other)
        self.stats["conflicts"] = len(self._conflicts)
        self._events.append(Conflict(self.gid, mid, kept, other))
        if kept is incoming:
            self._replace(mid, kept)
        if mid not in self._evidence_at:
            self._evidence_at[mid] = (now + self.rng.uniform(0, EVIDENCE_FIRST), 0)

    def _replace(self, mid: Mid, kept: wire.StoredMessage) -> None:
        """The version kept wins over one this peer delivered (or holds: see _on_data)."""
        if not self.orderer.is_delivered(mid):
            return
        for i, message in enumerate(self._deliveries):
            if message.mid == mid:
                self._deliveries[i] = _as_delivery(self.gid, kept, message.received_at)
                return
        self._events.append(Replaced(self.gid, kept))

    def _on_evidence(self, repair: wire.Repair, now: float) -> None:
        """Another member multicast both versions of a mid: our own copy of that evidence can wait."""
        copies = Counter((m.sender, m.seqno) for m in repair.messages)
        for mid in (mid for mid, count in copies.items() if count > 1):
            scheduled = self._evidence_at.get(mid)
            if scheduled is not None:  # this round is done by another member: skip to our next one
                self._next_evidence_round(mid, scheduled[1], now)

    def _send_evidence(self, now: float) -> None:
        for mid, (when, round_) in list(self._evidence_at.items()):
            if when > now:
                continue
            kept, other = self._conflicts[mid]
            self._outbox.append(wire.Repair(self.gid, (kept, other)))
            self._next_evidence_round(mid, round_, now)

    def _next_evidence_round(self, mid: Mid, round_: int, now: float) -> None:
        if round_ + 1 >= len(EVIDENCE_ROUNDS):
            del self._evidence_at[mid]
        else:
            self._evidence_at[mid] = (now + EVIDENCE_ROUNDS[round_ + 1] - EVIDENCE_ROUNDS[round_]
                                      + self.rng.uniform(0, EVIDENCE_JITTER), round_ + 1)

    def _on_evicted(self, evicted: list[tuple[Mid, Mid]], now: float) -> None:
        """Evicted from the hold store: a gap again, asked for once its parent is delivered."""
        for mid, parent in evicted:
            sender, seqno = mid
            _discard(self._received, sender, seqno)
            self._deferred.setdefault(sender, RangeSet()).add(seqno)
            self._evicted_for.setdefault(parent, []).append(mid)
            self._evicted_remembered += 1
        while self._evicted_remembered > MAX_EVICTED_REMEMBERED:
            oldest = next(iter(self._evicted_for))
            self._release_evicted(self._evicted_for.pop(oldest), now)

    def _ask_again_for_evicted(self, released: list, now: float) -> None:
        for mid, _, _ in released:
            children = self._evicted_for.pop(mid, None)
            if children is not None:
                self._release_evicted(children, now)

    def _release_evicted(self, mids: list[Mid], now: float) -> None:
        """Stop deferring evicted messages: they are gaps that NAKs ask for."""
        self._evicted_remembered -= len(mids)
        for sender, seqno in mids:
            _discard(self._deferred, sender, seqno)
            if sender != self.pid:  # a new request, not a retry of an old one: ask soon, tries afresh
                self._nak_tries.pop(sender, None)
                self._nak_progress.pop(sender, None)
                at = now + self.rng.uniform(*NAK_DELAY)
                self._nak_at[sender] = min(self._nak_at.get(sender, at), at)

    def _note_received(self, sender: str, seqno: int) -> None:
        seen = self._received.get(sender)
        if seen is None:
            seen = self._received[sender] = RangeSet()
        seen.add(seqno)

    def _has_received(self, mid: Mid) -> bool:
        seen = self._received.get(mid[0])
        return seen is not None and mid[1] in seen

    def _note_highest(self, sender: str, seqno: int, now: float) -> None:
        # NAK state only for members and for senders whose messages we hold (a left member's):
        # parents and digests naming invented pids cost nothing.
        if sender not in self._received and not self.is_member(sender):
            return
        if seqno > self._highest.get(sender, 0):
            self._highest[sender] = seqno
        if not self._has_received((sender, seqno)):
            self._suspect(sender, now)

    # -- loss repair: asking -------------------------------------------------------------

    def _suspect(self, sender: str, now: float) -> None:
        if sender == self.pid or sender in self._nak_at:
            return
        low, high = NAK_DELAY
        self._nak_at[sender] = now + self.rng.uniform(low, max(high, NAK_SPREAD * self.group_size))

    def missing(self, sender: str) -> list[tuple[int, int]]:
        """Seqno ranges of ``sender`` known to exist and not received (nor given up on)."""
        highest = self._highest.get(sender, 0)
        if not highest:
            return []
        seen = self._received.get(sender) or RangeSet()
        abandoned = self._abandoned.get(sender)
        deferred = self._deferred.get(sender)
        if abandoned or deferred:
            seen = RangeSet.from_ranges(seen.ranges() + (abandoned.ranges() if abandoned else [])
                                        + (deferred.ranges() if deferred else []))
        return seen.gaps(highest)

    def _send_naks(self, now: float) -> None:
        for sender, at in list(self._nak_at.items()):
            if at > now:
                continue
            gaps = self.missing(sender)
            if not gaps:
                del self._nak_at[sender]
                self._nak_tries.pop(sender, None)
                continue
            outstanding = sum(b - a + 1 for a, b in gaps)
            if self._progressed(sender, outstanding):
                self._nak_tries[sender] = 0  # repairs are arriving: this is not a dead end
            tries = self._nak_tries.get(sender, 0)
            if tries >= NAK_TRIES:
                abandoned = self._abandoned.setdefault(sender, RangeSet())
                for a, b in gaps:
                    abandoned.add_range(a, b + 1)
                self._events.append(GapReported(self.gid, sender, tuple(gaps)))
                self.stats["gaps_reported"] += 1
                del self._nak_at[sender]
                continue
            asked = self._asked.get(sender)
            if asked is not None:
                recent = asked.intersection(gaps, NAK_MAX_RANGES, now, NAK_RETRY)
                if recent:
                    unasked = RangeSet.from_ranges(gaps)
                    for a, b in recent:
                        unasked.remove_range(a, b + 1)
                    if not unasked:  # other members asked for all of it: wait for their repairs
                        self._nak_at[sender] = asked.forgotten_at(gaps, now, NAK_RETRY) \
                            + NAK_RETRY * self.rng.uniform(0.0, 0.2)
                        continue
                    gaps = unasked.ranges()
            ranges, budget = [], NAK_MAX_SEQNOS
            for a, b in gaps:
                if budget <= 0 or len(ranges) >= NAK_MAX_RANGES:
                    break
                b = min(b, a + budget - 1)
                ranges.append((a, b))
                budget -= b - a + 1
            self._outbox.append(wire.Nak(self.gid, sender, tuple(ranges)))
            self.stats["naks_sent"] += 1
            self._nak_progress[sender] = (outstanding, tuple(ranges))
            self._nak_tries[sender] = tries + 1
            retry = min(NAK_RETRY * 2 ** min(tries, 8), NAK_RETRY_MAX)
            self._nak_at[sender] = now + retry * self.rng.uniform(0.9, 1.1)

    def _progressed(self, sender: str, outstanding: int) -> bool:
        """Whether repairs came since the last NAK for ``sender``: fewer seqnos are missing, or some
        that it asked for arrived.  The second counts while ``sender`` is still sending: new losses
        then outweigh what the repairs fill, and the back-off must not grow as if nobody answered."""
        last = self._nak_progress.get(sender)
        if last is None:
            return False
        before, asked = last
        received = self._received.get(sender)
        return outstanding < before or received is not None and bool(received.intersection(asked, 1))

    # -- loss repair: answering --------------------------------------------------------

    def _rank(self, key: bytes, exclude: tuple[str, ...]) -> int:
        """This peer's place in the line of responders to a request: the members ordered by a
        hash of the request and their pid, so every member works out the same line."""
        mine = _score(key, self.pid)
        members = self.members()
        if not members:  # no member list: a place drawn from the same hash
            return int.from_bytes(mine, "big") * self.group_size >> 64
        return sum(1 for pid in members if pid not in exclude and pid != self.pid and _score(key, pid) < mine)

    def _budget(self, requester: str, now: float) -> _Budget:
        budget = self._budgets.get(requester)
        if budget is None:
            if len(self._budgets) >= MAX_SENDERS:
                self._budgets = {p: b for p, b in self._budgets.items() if now - b.at < 1.0}
            budget = self._budgets[requester] = _Budget(now)
        budget.refill(now)
        return budget

    def _on_nak(self, requester: str, nak: wire.Nak, now: float) -> None:
        target = nak.target
        if target == self.pid and nak.ranges and nak.ranges[-1][1] > self._cut_seqno \
                and nak.ranges[0][0] <= self._released_seqno:  # (seqnos never sent are no loss report)
            self._slow_down(now)
        if target not in self._received and not self.is_member(target):
            return  # nobody we hold messages of, nor a member: no state for it
        ranges = nak.ranges[:NAK_MAX_RANGES]
        # Someone else asked: our own NAK leaves this out until the repair had time to come.
        asked = self._asked.setdefault(target, _RecentRanges())
        for first, last in ranges:
            asked.add_range(first, min(last, first + NAK_MAX_SEQNOS) + 1, now, NAK_RETRY)
        # How often this was asked for lately: each time, the line of responders grows 4-fold.
        levels = self._requested.get(target)
        if levels is None:
            levels = self._requested[target] = [_RecentRanges() for _ in range(REPEAT_LEVELS)]
        repeats = 0
        for level in reversed(range(REPEAT_LEVELS)):
            seen = levels[level]
            if seen.intersection(ranges, 1, now, REPEAT_WINDOW):
                repeats = max(repeats, level + 1)
            below = levels[level - 1].intersection(ranges, NAK_MAX_RANGES, now, REPEAT_WINDOW) if level else ranges
            for first, last in below:
                seen.add_range(first, min(last, first + NAK_MAX_SEQNOS) + 1, now, REPEAT_WINDOW)
        # What we hold of it, as ranges (O(ranges), however many seqnos they span), less what
        # was repaired a moment ago, within the requester's budget.
        budget = self._budget(requester, now)
        allowed = min(NAK_MAX_SEQNOS, int(budget.messages))
        wanted, count = RangeSet(), 0
        for first, last in self.orderer.delivered_set(target).intersection(ranges, NAK_MAX_RANGES):
            if last - first + 1 > allowed - count:
                self.stats["requests_over_budget"] += 1
                last = first + allowed - count - 1
                if last < first:
                    break
            wanted.add_range(first, last + 1)
            count += last - first + 1
        repaired = self._repaired.get(target)
        if repaired is not None and wanted:
            for first, last in repaired.intersection(wanted.ranges(), NAK_MAX_RANGES, now, REPAIR_HOLDOFF):
                wanted.remove_range(first, last + 1)
        if not wanted:
            return
        budget.messages -= len(wanted)
        answer = self._answers.get(target)
        if answer is None:
            if target == self.pid:
                delay = self.rng.uniform(0, 0.002)  # the sender always has it: answer first
            else:  # after the sender (if it is a member), in the line drawn for this request
                if now - self._heard_at.get(target, -math.inf) < SENDER_ALIVE:
                    # The sender is there and answers; asked again, the request most likely lost
                    # its repair somewhere: the line steps in the time after.
                    if repeats < 2:
                        return
                    repeats -= 2
                rank = self._rank(_rank_key(requester, target, ranges), (requester, target))
                if repeats < REPEAT_LEVELS and rank >= RESPONDERS << 2 * repeats:
                    return
                delay = ANSWER_SLOT * (rank + self.is_member(target)) + self.rng.uniform(0.001, 0.002)
            answer = self._answers[target] = _RepairAnswer(now + delay, requester)
        answer.requester = requester
        for first, last in wanted.ranges():
            answer.wanted.add_range(first, last + 1)

    def _on_repair(self, responder: str, repair: wire.Repair, now: float) -> None:
        for stored in repair.messages:
            self._on_stored(stored, now)
            self._cancel_answer(stored.sender, stored.seqno)
            recent = self._repaired.get(stored.sender)
            if recent is None:
                recent = self._repaired[stored.sender] = _RecentRanges()
            recent.add(stored.seqno, now, REPAIR_HOLDOFF)
        if responder != self.pid:
            # Another member is answering: let it go on, and drop what it carries as it comes.
            for sender in {stored.sender for stored in repair.messages}:
                answer = self._answers.get(sender)
                if answer is not None:
                    answer.next_at = max(answer.next_at, now + ANSWER_YIELD)

    def _cancel_answer(self, sender: str, seqno: int) -> None:
        answer = self._answers.get(sender)
        if answer is not None:
            answer.wanted.discard(seqno)
            if not answer.wanted:
                del self._answers[sender]
        for sync_answer in self._sync_answers.values():
            sync_answer.discard(sender, seqno)

    def _take_budget(self, now: float, wanted: int) -> int:
        self._answer_budget = min(ANSWER_RATE, self._answer_budget + (now - self._budget_at) * ANSWER_RATE)
        self._budget_at = now
        granted = max(0, min(wanted, int(self._answer_budget)))
        self._answer_budget -= granted
        return granted

    def _send_repairs(self, now: float) -> None:
        """One chunk per due answer: what others repaired meanwhile has been dropped from it."""
        for sender, answer in list(self._answers.items()):
            if answer.next_at > now:
                continue
            budget = self._budget(answer.requester, now)
            granted = self._take_budget(now, 400) if budget.bytes > 0 else 0
            seqnos = answer.wanted.first(granted)
            messages = self.fetch(self.gid, [(sender, s) for s in seqnos]) if seqnos else []
            chunk = next(iter(_chunks(messages)), [])
            if seqnos:  # what did not fit the chunk stays wanted; what we lack (normally nothing) goes
                answer.wanted.remove_range(seqnos[0], seqnos[-1] + 1)
                for message in messages[len(chunk):]:
                    answer.wanted.add(message.seqno)
            if chunk:
                self._outbox.append(wire.Repair(self.gid, tuple(chunk)))
                self.stats["repairs_sent"] += len(chunk)
                budget.bytes -= sum(_approx_size(m) for m in chunk)
                recent = self._repaired.setdefault(sender, _RecentRanges())
                for message in chunk:
                    recent.add(message.seqno, now, REPAIR_HOLDOFF)
            if answer.wanted:
                answer.next_at = now + (REPAIR_PACE if granted else SYNC_PACE)
            else:
                del self._answers[sender]

    # -- flow control ----------------------------------------------------------------------

    def _slow_down(self, now: float) -> None:
        """A member lacks messages sent since the last cut: halve the rate (once per such loss)."""
        sent = sum(count for at, count in self._recent_sends if now - at <= 1.0)
        current = self._rate if self._rate is not None else max(sent, PACE_FLOOR)
        self._rate = max(PACE_FLOOR, current / 2)
        self._cut_seqno = self._released_seqno
        self._rate_step_at = now + PACE_STEP
        self.stats["rate_cuts"] += 1

    def _release(self, now: float | None) -> list[wire.DataBatch]:
        """The paced batches that may go out by ``now`` (all of them when not paced)."""
        if self._rate is not None and now is not None:
            while now >= self._rate_step_at:  # no loss reported for a step: speed up
                self._rate *= PACE_GROWTH
                self._rate_step_at += PACE_STEP
            if self._rate > PACE_CEILING:
                self._rate = None
        if self._rate is None or now is None:
            out, self._paced = self._paced, []
        else:
            burst = max(self._rate * PACE_BURST, crypto.MAX_BATCH)
            self._credit = min(burst, self._credit + (now - self._credit_at) * self._rate)
            self._credit_at = now
            taken = 0
            for batch in self._paced:
                if len(batch.items) > self._credit + 1e-6:  # (float rounding must not stall it)
                    break
                self._credit -= len(batch.items)
                taken += 1
            out, self._paced = self._paced[:taken], self._paced[taken:]
        if out:
            self._released_seqno = max(self._released_seqno, out[-1].items[-1][0])
            if now is not None:
                self._recent_sends = [(at, n) for at, n in self._recent_sends if now - at <= 1.0]
                self._recent_sends.append((now, sum(len(batch.items) for batch in out)))
        return out

    def _next_release(self) -> float | None:
        if not self._paced or self._rate is None:
            return None
        lacking = len(self._paced[0].items) - self._credit
        return self._credit_at + max(0.0, lacking) / self._rate

    @property
    def rate(self) -> float | None:
        """The paced send rate in messages per second, or None when not paced."""
        return self._rate

    # -- MSP -------------------------------------------------------------------------------

    def _on_sync_req(self, requester: str, request: wire.SyncReq, now: float) -> None:
        latest = self._latest_request.get(requester, 0)
        if request.sync_seqno <= latest:
            return  # stale or repeated (the PSSIT)
        for key in [k for k in self._sync_answers if k[0] == requester]:
            del self._sync_answers[key]  # a newer request replaces the older one
        if len(self._sync_answers) >= MAX_SYNC_ANSWERS:
            self.stats["sync_requests_refused"] += 1  # busy: the requester asks again
            return
        self._latest_request[requester] = request.sync_seqno
        theirs = {pid: RangeSet.from_ranges(ranges) for pid, ranges in request.digest}
        missing: set[Mid] = set()
        for pid, seen in self.orderer.delivered_sets():
            other = theirs.get(pid)
            missing.update((pid, s) for s in seen if other is None or s not in other)
        # The other way round: what the requester holds and we lack, we ask for.
        for pid, ranges in request.digest:
            if ranges:
                self._note_highest(pid, ranges[-1][1], now)
        if missing:
            rank = self._rank(_rank_key(requester, request.sync_seqno), (requester,))
            start = now + ANSWER_SLOT * rank + self.rng.uniform(0.005, 0.007)
            self._sync_answers[(requester, request.sync_seqno)] = _SyncAnswer(
                requester, request.sync_seqno, missing, start)

    def _on_sync_resp(self, responder: str, response: wire.SyncResp, now: float) -> None:
        delivered = 0
        for stored in response.messages:
            delivered += self._on_stored(stored, now)
        mine = response.requester == self.pid and response.sync_seqno <= self._sync_seqno
        answer = self._sync_answers.get((response.requester, response.sync_seqno))
        if answer is not None:
            for stored in response.messages:
                answer.discard(stored.sender, stored.seqno)
            # Another member is answering: let it go on.  When two started at once,
            # the lower pid goes on and the other yields, so they do not both stop.
            if not answer.started or responder < self.pid:
                answer.next_at = max(answer.next_at, now + SYNC_YIELD)
        if mine:
            self._sync_received += len(response.messages)
            self._sync_remaining[responder] = response.remaining
            self._sync_expected = min(wire.MAX_SYNC_REMAINING, max(  # a count the UI's integers can carry
                self._sync_expected, self._sync_received + sum(self._sync_remaining.values())))
            self._sync_retry_at = now + SYNC_RETRY  # answers flow: do not ask again yet
            self._sync_tries = 0
            self._events.append(SyncProgress(self.gid, self._sync_received, self._sync_expected))
            if not any(self._sync_remaining.values()):
                self._sync_active = False
                self._sync_retry_at = None
                self._naks_held_until = None
            else:
                self._naks_held_until = now + SYNC_ANSWER_WAIT

    def _send_sync_answers(self, now: float) -> None:
        for key, answer in list(self._sync_answers.items()):
            if answer.next_at > now:
                continue
            requester_budget = self._budget(answer.requester, now)
            allowed = min(400, int(requester_budget.messages)) if requester_budget.bytes > 0 else 0
            budget = self._take_budget(now, allowed)
            if budget == 0:
                answer.next_at = now + SYNC_PACE
                continue
            messages = self.fetch(self.gid, answer.take(budget))
            chunk = next(iter(_chunks(messages)), [])
            answer.put_back((m.sender, m.seqno) for m in messages[len(chunk):])
            remaining = min(answer.count(), wire.MAX_SYNC_REMAINING)
            answer.started = True
            if chunk:
                self._outbox.append(wire.SyncResp(self.gid, answer.requester, answer.sync_seqno, remaining, tuple(chunk)))
                self.stats["sync_messages_sent"] += len(chunk)
                requester_budget.messages -= len(chunk)
                requester_budget.bytes -= sum(_approx_size(m) for m in chunk)
            if remaining:
                answer.next_at = now + SYNC_PACE
            else:
                del self._sync_answers[key]

    # -- timers ------------------------------------------------------------------------------

    def _arm_heartbeat(self) -> None:
        """The first heartbeat goes HEARTBEAT_FIRST after this peer's last message: armed here,
        once per flush or timer, rather than on every message sent."""
        if self._heartbeat_due:
            self._heartbeat_due = False
            self._heartbeat_interval = HEARTBEAT_FIRST
            self._heartbeat_at = self._last_send_at + HEARTBEAT_FIRST * self.rng.uniform(0.8, 1.2)

    def get_timer(self) -> float | None:
        self._arm_heartbeat()
        deadlines = [d for d in (self._heartbeat_at, self._sync_retry_at, self._next_release()) if d is not None]
        deadlines.extend(answer.next_at for answer in self._answers.values())
        if self._nak_at:
            held = self._naks_held_until
            due = min(self._nak_at.values())
            deadlines.append(due if held is None else max(due, held))
        deadlines.extend(answer.next_at for answer in self._sync_answers.values())
        if self._evidence_at:
            deadlines.append(min(when for when, _ in self._evidence_at.values()))
        return min(deadlines) if deadlines else None

    def handle_timer(self, now: float) -> None:
        self._arm_heartbeat()
        if self._naks_held_until is not None and self._naks_held_until <= now:
            self._naks_held_until = None
        if self._nak_at and self._naks_held_until is None:
            self._send_naks(now)
        if self._answers:
            self._send_repairs(now)
        if self._sync_answers:
            self._send_sync_answers(now)
        if self._evidence_at:
            self._send_evidence(now)
        if self._sync_retry_at is not None and self._sync_retry_at <= now:
            if self._sync_tries < SYNC_TRIES and self._sync_received == 0:
                self._request_sync(now)
            else:  # nobody (else) has anything for us, or the answers stopped: done
                self._sync_active = False
                self._sync_retry_at = None
                self._naks_held_until = None
        if self._heartbeat_at is not None and self._heartbeat_at <= now:
            self._outbox.append(wire.Heartbeat(self.gid, self._released_seqno))
            self._heartbeat_interval = min(HEARTBEAT_MAX, self._heartbeat_interval * 2)
            if now - self._last_send_at > HEARTBEAT_QUIET_AFTER:
                self._heartbeat_at = None
            else:
                self._heartbeat_at = now + self._heartbeat_interval * self.rng.uniform(0.8, 1.2)

    # -- output --------------------------------------------------------------------------------

    def datagrams_to_send(self, now: float | None = None) -> list[wire.Message]:
        """What to transmit by ``now``; this peer's new messages go out in batches, one signature each,
        paced when members reported loss of them (without ``now``: everything, unpaced)."""
        signed: list[wire.DataBatch] = []
        self._arm_heartbeat()
        if self._unsigned:
            proofs = {}
            budget = FRAME_PAYLOAD - BATCH_ENVELOPE - 2 * len(self.gid)
            chunks = list(_chunks(self._unsigned, budget, crypto.MAX_BATCH, _batch_item_size))
            for start in range(0, len(chunks), crypto.MAX_BURST):
                burst = chunks[start:start + crypto.MAX_BURST]
                for chunk, batch in zip(burst, wire.sign_burst(self.identity, burst)):
                    signed.append(batch)
                    proofs.update(((self.pid, data.seqno), proof) for data, proof in zip(chunk, batch.proofs))
            self._unsigned = []
            self._deliveries = [
                ChatMessage(m.gid, m.mid, m.parent, m.sender_name, m.text, m.sent_at, m.received_at, m.order,
                            proofs[m.mid], m.public_key) if m.mid in proofs else m
                for m in self._deliveries
            ]
        self._paced += signed
        out, self._outbox = self._release(now) + self._outbox, []
        return out

    def deliveries(self) -> list[ChatMessage]:
        """Messages delivered since the last call (call after :meth:`datagrams_to_send`)."""
        out, self._deliveries = self._deliveries, []
        return out

    def events(self) -> list[Event]:
        out, self._events = self._events, []
        return out
