"""Direct messages without I/O: one reliable, causally ordered channel per peer, over unicast datagrams.

A conversation is between this peer and another identity, named by the other's pid.
Each side numbers its messages in the conversation from 1 (the mid is ``(sender,
seqno)``).  What travels is a DIRECT datagram (:func:`middleware.wire.encode_direct`)
holding nothing but :func:`middleware.crypto.seal_direct`'s output: one frame, sealed
for the recipient and signed by the sender, so an onlooker sees neither pids nor
seqnos nor text.  The frames, msgpack inside the seal:

* MSG ``[1, seqno, parent, sent_at, name, text, stamp, echo]``: ``parent`` is None or
  ``[who, seqno]`` (0: the sender's message, 1: the recipient's), ``stamp`` the
  SES stamp (:class:`middleware.ses.SesStamp`) made when the message was composed;
* ACK ``[2, cumulative, ranges, receipt, receipt_heard, confirm, echo]``: the sender's
  seqnos received (all up to ``cumulative``, and ``ranges`` above it), the highest of
  them read (0 with read receipts off), the highest read receipt heard from the
  other, and whether this ACK's receipt wants confirming (an ACK back).

``echo`` (both; a frame may leave it out): the recipient's latest HELLO nonce
(:meth:`middleware.reach.Reach.echo_for`) or b"".  It comes back signed by the sender
from the sender's endpoint, which is what the reach handshake's echo proves; so the
handshake completes with whichever datagram gets through, and a lost HELLO does not
hold a conversation up for the HELLO budget's minute.

Reliability: a message is sent when composed if the peer is reachable (its endpoint
proven by :mod:`middleware.reach` and heard lately), and again with exponential
backoff (:data:`RETRY_FIRST` doubling to :data:`RETRY_MAX`) until acknowledged, and at
once when an ACK shows it missing (a later one acknowledged); at most :data:`WINDOW`
seqnos past the first unacknowledged one are in flight, paced to :data:`PACE_RATE` a
second per peer.  While the peer is away nothing is sent: the messages stay queued, in
the store, and go when it is heard again, across restarts of either side.  The receiver
acknowledges every MSG (a duplicate too, so a lost ACK is repaired), except one it
refuses (see the bounds), which the sender then retries.  Status per outgoing message:
queued -> sent -> delivered (acknowledged) -> read (a read receipt); per incoming one:
received -> read.

Ordering: SES (:mod:`middleware.ses`) stamps each message when composed and holds an
incoming one until the messages that causally precede it and are addressed to this
peer are delivered; held messages are stored (status "held") and fed to SES again
after a restart.  SES's state is stored with every send and delivery.  SES is given
only the part of a stamp about pids that ``keys_of`` knows (current members of a
joined group, and this peer): no message of anyone else can reach this peer, so a
demand to wait for one could only hold a message until SES's hold limit.

Persistence: nothing here touches the store's writes.  What changed waits in
:meth:`DirectCore.take_writes` for the peer core's commit; after the commit
:meth:`DirectCore.committed` releases the batch's events, and the datagrams
:meth:`DirectCore.prepare` made before the commit may go out (the crash order of
:mod:`middleware.peer_core`).  A failed commit keeps the writes for the next one.

Bounds (resources/docs/protocol.md § Direct messages says who gives way):
only a sender whose keys a current member's record in a joined group holds is opened
at all, and only such a peer is written to (``keys_of``); opening attempts are capped
per second (:data:`OPENS_PER_SECOND`); each sender gets :data:`SENDER_RATE` frames a
second (burst :data:`SENDER_BURST`); an incoming seqno more than :data:`MAX_AHEAD` past
the sender's first gap is refused, and so is a message from a sender with
:data:`MAX_UNREAD` unread ones; all senders together leave at most
:data:`MAX_UNREAD_TOTAL` unread, past which a sender who shares no group any more gives
way first, then the one holding the most (its newest unread message is dropped: status
:data:`DROPPED`), and a sender holding nearly as many is refused; SES caps what it
holds; outgoing, :data:`MAX_QUEUED_PER_PEER` unacknowledged per peer and
:data:`MAX_QUEUED` in all, past which ``compose`` raises.  A refused message is not
acknowledged: its sender keeps it and retries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, NamedTuple

import msgpack

from . import crypto, wire
from .addresses import Endpoint
from .events import DirectDelivered, DirectStatusChanged, Event
from .rangeset import RangeSet
from .ses import Ses, SesStamp
from .types import DirectMessage, Mid, UsageError, check_unicode

MSG = 1
ACK = 2

RETRY_FIRST = 1.0  # s: the first retransmission of an unacknowledged message
RETRY_MAX = 30.0
WINDOW = 32  # messages sent past the first unacknowledged one, per peer; the rest wait their turn
PACE_RATE = 40.0  # transmissions of messages per second per peer (below SENDER_RATE with the ACKs)
PACE_BURST = 100.0
ACK_INTERVAL = 0.02  # s between two ACKs to one peer: 50 a second at most
FAST_RETRY = 0.1  # s: a message an ACK shows a gap at is sent again at once, if sent this long ago
MAX_ACK_RANGES = 64  # ranges above the cumulative ack, the lowest first
MAX_QUEUED_PER_PEER = 1_000  # unacknowledged outgoing messages per peer
MAX_QUEUED = 10_000  # ... and in all
MAX_AHEAD = MAX_QUEUED_PER_PEER  # an incoming seqno this far past the first gap is refused
MAX_UNREAD = 500  # unread incoming messages per sender; past it the sender's new ones are refused
# Unread incoming messages of all senders together (each up to MAX_TEXT characters and a stamp: at
# most about 75 MB on disk).  Past it, a sender no longer in a group with this peer gives way first
# (its newest unread message is dropped), then the sender holding the most: a new message is taken only
# from a sender holding at least two fewer than that one, so a flood from many keys ends with each
# holding about the same, and a member who has sent little still gets through (see _victim).
MAX_UNREAD_TOTAL = 2_000
STRANGER_SWEEP = 1.0  # s: how long the list of holders who share no group with this peer is reused
SENDER_RATE = 100.0  # frames per second per sender, after opening (an honest one paces itself below)
SENDER_BURST = 300.0
# DIRECT datagrams opened per second.  A stranger's flood must not lock members out: datagrams
# from sources no member has proven to be at share STRANGER_OPENS_PER_SECOND, and each member's
# proven endpoint has OPENS_PER_SECOND of its own, so a flood forged from one member's address
# spends only that member's budget.  At most MAX_SOURCE_BUDGETS endpoints are counted per second.
OPENS_PER_SECOND = 2_000
STRANGER_OPENS_PER_SECOND = 2_000
MAX_SOURCE_BUDGETS = 1_024
MAX_TEXT = wire.MAX_TEXT
SETTING_SES = "ses"
SETTING_RECEIPTS = "receipts"

QUEUED, SENT, DELIVERED, READ, RECEIVED, HELD = "queued", "sent", "delivered", "read", "received", "held"
DROPPED = "dropped"  # a write only: the store deletes the row (an unread message that gave way, MAX_UNREAD_TOTAL)


class StoredDirect(NamedTuple):
    """One direct message as the store keeps it (``middleware.store_api``)."""

    peer: str
    sender: str
    seqno: int
    parent: Mid | None
    name: str  # as the sender signed it
    text: str
    sent_at: int
    received_at: int
    order: int  # in the conversation's delivery order; 0 while held
    status: str  # outgoing: queued, sent, delivered; incoming: held, received (read is derived)
    late: bool
    stamp: bytes  # the SES stamp (msgpack of SesStamp.to_wire()), to send again or to feed SES again

    @property
    def mid(self) -> Mid:
        return self.sender, self.seqno


@dataclass(slots=True)
class Outgoing:
    row: StoredDirect
    next_at: float | None = None  # the next transmission; None: at the next chance the peer is reachable
    tries: int = 0
    sent_at: float | None = None  # the last transmission


@dataclass(slots=True)
class Conversation:
    """What this peer keeps of one conversation besides its messages."""

    peer: str
    next_seqno: int = 1
    next_order: int = 1
    received: RangeSet = field(default_factory=RangeSet)  # the peer's seqnos received (held or delivered)
    read_order: int = 0  # incoming messages up to this order are read
    receipt: int = 0  # the highest incoming seqno whose reading this peer tells (read receipts on)
    receipt_confirmed: int = 0  # ... and that the peer confirmed hearing
    their_receipt: int = 0  # the highest of this peer's seqnos the peer read
    # in memory only
    outgoing: dict[int, Outgoing] = field(default_factory=dict)  # unacknowledged, by seqno, in seqno order
    unread: list[tuple[int, int]] = field(default_factory=list)  # (order, seqno) of incoming messages not read
    ack_due: bool = False
    receipt_at: float | None = None  # the next sending of an unconfirmed receipt
    receipt_tries: int = 0
    tokens: float = SENDER_BURST  # what the peer may still send us (its rate)
    tokens_at: float = 0.0
    pace: float = PACE_BURST  # what we may still send it
    pace_at: float = 0.0
    paced_until: float | None = None  # messages wait for pace until then
    ack_at: float = 0.0  # the earliest next ACK
    away: bool = False  # the peer could not be reached at the last prepare: no deadline until it is

    def window(self) -> list[Outgoing]:
        """The unacknowledged messages that may be in flight: from the first one, :data:`WINDOW` seqnos
        (``outgoing`` is kept in seqno order)."""
        window: list[Outgoing] = []
        for seqno, pending in self.outgoing.items():
            if window and seqno >= window[0].row.seqno + WINDOW:
                break
            window.append(pending)
        return window

    def pack(self) -> bytes:
        return msgpack.packb([self.next_seqno, self.next_order, self.received.ranges(), self.read_order,
                              self.receipt, self.receipt_confirmed, self.their_receipt], use_bin_type=True)

    @classmethod
    def unpack(cls, peer: str, data: bytes) -> Conversation:
        next_seqno, next_order, ranges, read_order, receipt, confirmed, their = msgpack.unpackb(data, raw=False)
        return cls(peer, next_seqno, next_order, RangeSet.from_ranges(tuple(r) for r in ranges), read_order, receipt,
                   confirmed, their)

    def first_gap(self) -> int:
        """The lowest of the peer's seqnos not received yet."""
        ranges = self.received.ranges()
        return ranges[0][1] + 1 if ranges and ranges[0][0] == 1 else 1


class UnreadCounts:
    """How many unread incoming messages each conversation holds, all of them together, and who holds
    the most: found in O(1) however many hold some (counts change by one, or fall when read)."""

    def __init__(self) -> None:
        self.total = 0
        self._count: dict[str, int] = {}
        self._by_count: dict[int, dict[str, None]] = {}
        self._most = 0

    def set(self, peer: str, count: int) -> None:
        old = self._count.pop(peer, 0)
        if old:
            holders = self._by_count[old]
            del holders[peer]
            if not holders:
                del self._by_count[old]
        if count:
            self._count[peer] = count
            self._by_count.setdefault(count, {})[peer] = None
            self._most = max(self._most, count)
        self.total += count - old

    def of(self, peer: str) -> int:
        return self._count.get(peer, 0)

    def holders(self) -> list[str]:
        return list(self._count)

    def most(self, other_than: str | None = None) -> tuple[str, int] | None:
        """The peer holding the most (not ``other_than``) and its count, or None."""
        while self._most and self._most not in self._by_count:
            self._most -= 1
        for count in range(self._most, 0, -1):
            for peer in self._by_count.get(count, ()):
                if peer != other_than:
                    return peer, count
        return None


class DirectCore:
    """Every conversation of one peer.  ``keys_of(pid)``: the pid's (Ed25519, X25519) public keys from
    the member records of joined groups, or None; ``lookup(peer, mid)``: a stored message."""

    def __init__(self, identity: crypto.Identity, keys_of: Callable[[str], tuple[bytes, bytes] | None],
                 lookup: Callable[[str, Mid], StoredDirect | None], ses: Ses, receipts: bool = True) -> None:
        self.identity = identity
        self.me = identity.pid
        self.keys_of = keys_of
        self._lookup_stored = lookup
        self.ses = ses
        self.receipts = receipts
        self.conversations: dict[str, Conversation] = {}
        self._held: dict[Mid, StoredDirect] = {}  # incoming, waiting for SES
        self._busy: set[str] = set()  # conversations with something to send
        self._rows: dict[tuple[str, Mid], StoredDirect] = {}  # to store
        self._dirty: set[str] = set()  # conversations whose state is to store
        self._settings: dict[str, bytes] = {}
        self._composed: list[Mid] = []  # since the last commit
        self._events: list[Event] = []  # of the writes not committed yet
        self._opens_second = 0.0
        self._opens: dict[object, int] = {}  # this second's openings: per proven endpoint, None for the rest
        self._unread = UnreadCounts()
        self._strangers: list[str] = []  # holders of unread messages sharing no group with this peer
        self._strangers_at = float("-inf")
        self._fresh = False  # whether the datagram being read moved anything (see receive)
        self.stats = dict.fromkeys((
            "direct_sent", "direct_retransmitted", "direct_acks_sent", "direct_delivered", "direct_duplicates",
            "direct_unopened", "direct_malformed", "direct_over_budget", "direct_rate_dropped",
            "direct_refused_ahead", "direct_refused_unread", "direct_refused_held", "direct_late",
            "direct_unsealable", "direct_refused_total", "direct_dropped"), 0)

    # -- start ----------------------------------------------------------------------------

    def restore(self, states: dict[str, bytes], unsettled: list[StoredDirect],
                unread: Callable[[str, int], list[tuple[int, int]]], now: float) -> None:
        """The stored conversations and their unsettled messages: queued outgoing ones are sent again,
        held incoming ones fed to SES again (in the order they came)."""
        for peer, state in states.items():
            conversation = self.conversations[peer] = Conversation.unpack(peer, state)
            conversation.unread = [tuple(row) for row in unread(peer, conversation.read_order)]  # type: ignore[misc]
            self._unread.set(peer, len(conversation.unread))
        # Own messages in seqno order (a window needs it); held ones keep their arrival order (stable sort).
        for row in sorted(unsettled, key=lambda row: row.seqno if row.sender == self.me else 0):
            conversation = self._conversation(row.peer)
            if row.sender == self.me:
                conversation.outgoing[row.seqno] = Outgoing(row)
                self._busy.add(row.peer)
            else:
                self._take_in(row, _unpack_stamp(row.stamp), now)

    # -- user calls -------------------------------------------------------------------------

    def compose(self, peer: str, name: str, text: str, parent: Mid | None, wall: float) -> Mid:
        """A new message to ``peer``: stored and sent by the next flush."""
        if not isinstance(peer, str) or peer == self.me:
            raise UsageError("a direct message goes to another peer's pid")
        keys = self.keys_of(peer)
        if keys is None:
            raise UsageError(f"{peer:.40} is no current member of a group you are in: share a group with them "
                             "first (direct messages go only to current members; one who left is no longer one)")
        try:
            crypto.seal_direct(self.identity, peer, keys[1], b"")
        except ValueError:  # a low-order point only its owner can have signed into its record
            raise UsageError("this member's direct-message key is not usable: nothing can be sealed for it") from None
        if not isinstance(text, str) or not text.strip():
            raise UsageError("text must be a non-empty string")
        check_unicode(text, "text")
        if len(text) > MAX_TEXT:
            raise UsageError(f"text of {len(text)} characters: a direct message holds at most {MAX_TEXT}")
        conversation = self._conversation(peer)
        if parent is not None:
            who, seqno = parent
            known = seqno < conversation.next_seqno if who == self.me else who == peer and seqno in conversation.received
            if not known:
                raise UsageError("bad parent: not a message of this conversation")
        if len(conversation.outgoing) >= MAX_QUEUED_PER_PEER:
            raise UsageError(f"{MAX_QUEUED_PER_PEER} messages to this peer wait for it already: "
                             "nothing more is queued until it has them")
        if sum(len(c.outgoing) for c in self.conversations.values()) >= MAX_QUEUED:
            raise UsageError(f"{MAX_QUEUED} direct messages wait for their recipients already: "
                             "nothing more is queued until some are delivered")
        stamp = self.ses.stamp(peer)
        seqno = conversation.next_seqno
        conversation.next_seqno += 1
        at = int(wall * 1000)
        row = StoredDirect(peer, self.me, seqno, parent, name, text, at, at, conversation.next_order, QUEUED, False,
                           msgpack.packb(stamp.to_wire(), use_bin_type=True))
        conversation.next_order += 1
        conversation.outgoing[seqno] = Outgoing(row)
        self._busy.add(peer)
        self._dirty.add(peer)
        self._write(row)
        self._settings[SETTING_SES] = self.ses.to_bytes()
        self._events.append(DirectDelivered(peer, [self.view(row)]))
        self._composed.append(row.mid)
        return self.me, seqno

    def mark_read(self, peer: str, mid: Mid) -> None:
        """Every incoming message of the conversation up to ``mid`` (in its order) is read."""
        conversation = self.conversations.get(peer)
        row = self.lookup(peer, mid) if conversation is not None else None
        if conversation is None or row is None or row.order == 0:
            raise UsageError("not a message of this conversation")
        if row.order <= conversation.read_order:
            return
        conversation.read_order = row.order
        read = [seqno for order, seqno in conversation.unread if order <= row.order]
        conversation.unread = [(order, seqno) for order, seqno in conversation.unread if order > row.order]
        self._unread.set(peer, len(conversation.unread))
        if read and self.receipts and max(read) > conversation.receipt:
            conversation.receipt = max(read)
            conversation.receipt_at, conversation.receipt_tries = None, 0
            self._busy.add(peer)
        self._dirty.add(peer)

    def set_receipts(self, on: bool) -> None:
        """Whether reading tells the sender (from now on: what was read while off stays untold)."""
        self.receipts = bool(on)
        self._settings[SETTING_RECEIPTS] = b"1" if on else b"0"

    def lookup(self, peer: str, mid: Mid) -> StoredDirect | None:
        return self._rows.get((peer, mid)) or self._lookup_stored(peer, mid)

    def view(self, row: StoredDirect) -> DirectMessage:
        conversation = self.conversations.get(row.peer)
        outgoing = row.sender == self.me
        if outgoing:
            status = READ if conversation is not None and row.seqno <= conversation.their_receipt else row.status
        else:
            status = READ if conversation is not None and 0 < row.order <= conversation.read_order else RECEIVED
        return DirectMessage(row.peer, row.mid, row.parent, row.name, row.text, row.sent_at, row.received_at,
                             outgoing, status, row.order, row.late)

    def queued(self, peer: str | None = None) -> int:
        """Outgoing messages not acknowledged yet (to ``peer``, or to anyone)."""
        conversations = [self.conversations[peer]] if peer in self.conversations else [] if peer else \
            list(self.conversations.values())
        return sum(len(c.outgoing) for c in conversations)

    def held(self) -> int:
        return len(self._held)

    # -- network input ----------------------------------------------------------------------

    def receive(self, sealed: bytes, now: float, wall: float, proven_source: object = None
                ) -> tuple[str, bytes, bool] | None:
        """A DIRECT datagram's sealed payload; returns its sender if it opened, the HELLO nonce of
        this peer's that it echoes (b"" if none or malformed), and whether it was fresh: a message
        taken in or an ACK that moved something.  Only a fresh datagram shows that the sender is
        there now; anyone who captured an old one can send it again.
        ``proven_source``: the datagram's source when a member has proven to be there, else None."""
        if now - self._opens_second >= 1.0:
            self._opens_second, self._opens = now, {}
        budget = STRANGER_OPENS_PER_SECOND if proven_source is None else OPENS_PER_SECOND
        count = self._opens.get(proven_source, 0)
        if count >= budget or (count == 0 and len(self._opens) >= MAX_SOURCE_BUDGETS):
            self.stats["direct_over_budget"] += 1
            return None
        self._opens[proven_source] = count + 1
        opened = crypto.open_direct(self.identity, sealed, self.keys_of)
        if opened is None:
            self.stats["direct_unopened"] += 1
            return None
        sender, body = opened
        if sender == self.me:
            self.stats["direct_malformed"] += 1
            return None
        conversation = self._conversation(sender)
        conversation.tokens = min(SENDER_BURST, conversation.tokens + (now - conversation.tokens_at) * SENDER_RATE)
        conversation.tokens_at = now
        if conversation.tokens < 1:
            self.stats["direct_rate_dropped"] += 1
            return sender, b"", False
        conversation.tokens -= 1
        echo = b""
        self._fresh = False
        try:
            frame = msgpack.unpackb(body, raw=False, max_bin_len=wire.MAX_DATAGRAM, max_str_len=wire.MAX_DATAGRAM,
                                    max_array_len=4 * MAX_ACK_RANGES, max_map_len=0, max_ext_len=0)
            if type(frame) is not list or not frame:
                raise ValueError("not a frame")
            if frame[0] == MSG:
                row, echo = _message_frame(frame, sender, self.me)
                self._on_message(conversation, row, now, wall)
            elif frame[0] == ACK:
                cumulative, ranges, receipt, heard, confirm, echo = _ack_frame(frame)
                self._on_ack(conversation, cumulative, ranges, receipt, heard, confirm, now)
            else:
                raise ValueError("unknown frame")
        except (ValueError, TypeError, msgpack.UnpackException):
            self.stats["direct_malformed"] += 1
        return sender, echo, self._fresh

    def _on_message(self, conversation: Conversation, row: StoredDirect, now: float, wall: float) -> None:
        seqno = row.seqno
        if seqno in conversation.received:
            self.stats["direct_duplicates"] += 1  # a replay, or our ACK was lost: acknowledge again
            self._ack_due(conversation)
            return
        if seqno >= conversation.first_gap() + MAX_AHEAD:
            self.stats["direct_refused_ahead"] += 1
            return
        if len(conversation.unread) >= MAX_UNREAD:
            self.stats["direct_refused_unread"] += 1  # not acknowledged: the sender keeps it and retries
            return
        if self._unread.total >= MAX_UNREAD_TOTAL and self._victim(conversation.peer, now) is None:
            self.stats["direct_refused_total"] += 1  # as above: it comes once this peer's user reads
            return
        row = row._replace(received_at=int(wall * 1000))
        if self._take_in(row, _unpack_stamp(row.stamp), now):
            self._fresh = True
            self._ack_due(conversation)

    def _take_in(self, row: StoredDirect, stamp: SesStamp, now: float) -> bool:
        """An incoming message to SES; False if SES refused it (its holds are full)."""
        conversation = self._conversation(row.peer)
        key = row.mid
        self._held[key] = row
        delivered = self.ses.receive(row.sender, key, self._known_only(stamp), now)
        if delivered is None:
            del self._held[key]
            self.stats["direct_refused_held"] += 1
            return False
        conversation.received.add(row.seqno)
        self._dirty.add(row.peer)
        if key not in delivered:
            self._write(row._replace(status=HELD, order=0))
        self._deliver(delivered, late=False, now=now)
        return True

    def _known_only(self, stamp: SesStamp) -> SesStamp:
        """``stamp`` without the pids that share no group with this peer.  No message of theirs can reach
        this peer, so a demand to wait for one would only hold a message until SES's hold limit (a
        stamp naming a made-up pid did so for 120 s); and relayed on, it would hold others' messages."""
        known: dict[str, bool] = {self.me: True}

        def keep(pid: str) -> bool:
            if pid not in known:
                known[pid] = self.keys_of(pid) is not None
            return known[pid]

        return stamp.restricted(keep)

    def _victim(self, peer: str, now: float) -> str | None:
        """Whose newest unread message gives way for one more from ``peer`` (MAX_UNREAD_TOTAL): a holder
        who shares no group with this peer any more, else the one holding the most if that is at least
        two more than ``peer`` holds; None: ``peer``'s message is refused (it is retried)."""
        if now - self._strangers_at >= STRANGER_SWEEP:
            self._strangers = [holder for holder in self._unread.holders() if self.keys_of(holder) is None]
            self._strangers_at = now
        while self._strangers:
            stranger = self._strangers[-1]
            if stranger != peer and self._unread.of(stranger):
                return stranger
            self._strangers.pop()
        most = self._unread.most(other_than=peer)
        return most[0] if most is not None and most[1] >= self._unread.of(peer) + 2 else None

    def _drop_newest_unread(self, peer: str) -> None:
        conversation = self.conversations[peer]
        _, seqno = conversation.unread.pop()
        self._unread.set(peer, len(conversation.unread))
        self._write(StoredDirect(peer, peer, seqno, None, "", "", 0, 0, 0, DROPPED, False, b""))
        self.stats["direct_dropped"] += 1

    def _deliver(self, keys: list[Hashable], late: bool, now: float) -> None:
        for key in keys:
            row = self._held.pop(key, None)  # type: ignore[call-overload]
            if row is None:
                continue
            conversation = self._conversation(row.peer)
            row = row._replace(order=conversation.next_order, status=RECEIVED, late=late)
            conversation.next_order += 1
            conversation.unread.append((row.order, row.seqno))
            self._unread.set(row.peer, len(conversation.unread))
            self._dirty.add(row.peer)
            self._write(row)
            if self._unread.total > MAX_UNREAD_TOTAL:  # _on_message found a victim; held ones released need one
                victim = self._victim(row.peer, now)
                most = self._unread.most()
                self._drop_newest_unread(victim if victim is not None else most[0] if most else row.peer)
                if conversation.unread[-1:] != [(row.order, row.seqno)]:  # it was this one: nothing to show
                    continue
            self.stats["direct_delivered"] += 1
            self.stats["direct_late"] += late
            self._events.append(DirectDelivered(row.peer, [self.view(row)]))
        if keys:
            self._settings[SETTING_SES] = self.ses.to_bytes()

    def _on_ack(self, conversation: Conversation, cumulative: int, ranges: list[tuple[int, int]], receipt: int,
                receipt_heard: int, confirm: bool, now: float) -> None:
        peer = conversation.peer
        acked = RangeSet.from_ranges([(1, cumulative)] if cumulative else [])
        for first, last in ranges:
            acked.add_range(first, last + 1)
        for seqno in [s for s in conversation.outgoing if s in acked]:
            self._settle(conversation, seqno)
            self._fresh = True
        highest = acked.max()
        for seqno, pending in conversation.outgoing.items():  # gaps the ACK shows: lost, most likely
            if highest is not None and seqno < highest and pending.sent_at is not None \
                    and now - pending.sent_at >= FAST_RETRY and (pending.next_at is None or pending.next_at > now):
                pending.next_at = now
                self._busy.add(peer)
        receipt = min(receipt, conversation.next_seqno - 1)
        if receipt > conversation.their_receipt:
            for seqno in range(conversation.their_receipt + 1, receipt + 1):
                if seqno in conversation.outgoing:
                    self._settle(conversation, seqno)
                self._events.append(DirectStatusChanged(peer, (self.me, seqno), READ))
            conversation.their_receipt = receipt
            self._fresh = True
            self._dirty.add(peer)
        heard = min(receipt_heard, conversation.receipt)
        if heard > conversation.receipt_confirmed:
            conversation.receipt_confirmed = heard
            self._dirty.add(peer)
            self._fresh = True
        if confirm:
            self._ack_due(conversation)
        if not conversation.outgoing and conversation.receipt_confirmed >= conversation.receipt:
            conversation.receipt_at = None

    def _settle(self, conversation: Conversation, seqno: int) -> None:
        """An outgoing message reached the peer."""
        row = conversation.outgoing.pop(seqno).row._replace(status=DELIVERED)
        self._write(row)
        self._events.append(DirectStatusChanged(conversation.peer, row.mid, DELIVERED))

    def _ack_due(self, conversation: Conversation) -> None:
        conversation.ack_due = True
        self._busy.add(conversation.peer)

    # -- timers -----------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        deadlines = [self.ses.deadline()]
        for peer in self._busy:
            conversation = self.conversations[peer]
            if conversation.away:  # (a due ACK would be a deadline in the past, and the loop would spin)
                continue
            deadlines.append(conversation.receipt_at)
            if conversation.ack_due:
                deadlines.append(conversation.ack_at)
            window = conversation.window()
            deadlines += [out.next_at for out in window]
            if conversation.paced_until is not None and window:
                deadlines.append(conversation.paced_until)
        present = [d for d in deadlines if d is not None]
        return min(present) if present else None

    def handle_timer(self, now: float) -> None:
        late = self.ses.expire(now)
        self._deliver(late, late=True, now=now)

    # -- output -----------------------------------------------------------------------------

    def prepare(self, now: float, endpoint_of: Callable[[str, float], tuple[Endpoint, bytes] | None]
                ) -> list[tuple[bytes, Endpoint]]:
        """The DIRECT datagrams due now, each with its destination: only to peers ``endpoint_of``
        finds reachable (it gives their endpoint and the HELLO nonce to echo).  Statuses they
        change are written with the batch, so they go out only once committed (the caller
        drops them if the commit fails)."""
        out: list[tuple[bytes, Endpoint]] = []
        for peer in list(self._busy):
            conversation = self.conversations[peer]
            receipt_open = self.receipts and conversation.receipt > conversation.receipt_confirmed
            if not (conversation.outgoing or conversation.ack_due or receipt_open):
                self._busy.discard(peer)
                continue
            keys = self.keys_of(peer)
            reached = endpoint_of(peer, now) if keys is not None else None
            conversation.away = reached is None or keys is None
            if reached is None or keys is None:  # everything waits until it is heard again (then a prepare comes)
                for pending in conversation.outgoing.values():
                    pending.next_at = None
                conversation.receipt_at = None
                continue
            try:
                out += self._prepare_for(conversation, keys[1], *reached, receipt_open, now)
            except ValueError:  # its key changed to an unusable one since: nothing goes to it
                self.stats["direct_unsealable"] += 1
                for pending in conversation.outgoing.values():
                    pending.next_at = None
                conversation.receipt_at = None
        return out

    def _prepare_for(self, conversation: Conversation, dh: bytes, endpoint: Endpoint, echo: bytes,
                     receipt_open: bool, now: float) -> list[tuple[bytes, Endpoint]]:
        peer = conversation.peer
        out: list[tuple[bytes, Endpoint]] = []
        receipt_due = receipt_open and (conversation.receipt_at is None or conversation.receipt_at <= now)
        if (conversation.ack_due or receipt_due) and conversation.ack_at <= now:
            out.append((self._seal(peer, dh, [*self._ack(conversation, receipt_open), echo]), endpoint))
            self.stats["direct_acks_sent"] += 1
            conversation.ack_due = False
            conversation.ack_at = now + ACK_INTERVAL
            if receipt_due:
                conversation.receipt_tries += 1
                conversation.receipt_at = now + _backoff(conversation.receipt_tries)
        conversation.pace = min(PACE_BURST, conversation.pace + (now - conversation.pace_at) * PACE_RATE)
        conversation.pace_at = now
        conversation.paced_until = None
        for pending in conversation.window():
            if pending.next_at is not None and pending.next_at > now:
                continue
            if conversation.pace < 1:  # (a millisecond at least: the sum must move the clock)
                conversation.paced_until = now + max((1 - conversation.pace) / PACE_RATE, 0.001)
                break
            conversation.pace -= 1
            row = pending.row
            out.append((self._seal(peer, dh, [*self._message(row), echo]), endpoint))
            pending.tries += 1
            pending.sent_at = now
            pending.next_at = now + _backoff(pending.tries)
            if pending.tries > 1:
                self.stats["direct_retransmitted"] += 1
            else:
                self.stats["direct_sent"] += 1
            if row.status == QUEUED:
                pending.row = row._replace(status=SENT)
                self._write(pending.row)
                self._events.append(DirectStatusChanged(peer, row.mid, SENT))
        return out

    def _seal(self, peer: str, dh: bytes, frame: list) -> bytes:
        return wire.encode_direct(crypto.seal_direct(self.identity, peer, dh, msgpack.packb(frame, use_bin_type=True)))

    def _message(self, row: StoredDirect) -> list:
        parent = None if row.parent is None else [0 if row.parent[0] == self.me else 1, row.parent[1]]
        return [MSG, row.seqno, parent, row.sent_at, row.name, row.text, msgpack.unpackb(row.stamp, raw=False)]

    def _ack(self, conversation: Conversation, confirm: bool) -> list:
        cumulative = conversation.first_gap() - 1
        above = [(first, last) for first, last in conversation.received.ranges() if first > cumulative]
        receipt = conversation.receipt if self.receipts else 0
        return [ACK, cumulative, [list(r) for r in above[:MAX_ACK_RANGES]], receipt, conversation.their_receipt,
                confirm]

    def take_writes(self) -> tuple[list[StoredDirect], dict[str, bytes], dict[str, bytes]]:
        """What to store with this batch: messages, conversation states, settings (kept until committed)."""
        return (list(self._rows.values()), {peer: self.conversations[peer].pack() for peer in self._dirty},
                dict(self._settings))

    def composed(self) -> list[Mid]:
        """This peer's messages composed since the last commit (not stored yet)."""
        return list(self._composed)

    def committed(self) -> list[Event]:
        """The batch's writes are kept: forget them, and hand out its events."""
        self._rows.clear()
        self._dirty.clear()
        self._settings.clear()
        self._composed.clear()
        events, self._events = self._events, []
        return events

    # -- internals --------------------------------------------------------------------------

    def _conversation(self, peer: str) -> Conversation:
        conversation = self.conversations.get(peer)
        if conversation is None:
            conversation = self.conversations[peer] = Conversation(peer)
            self._dirty.add(peer)
        return conversation

    def _write(self, row: StoredDirect) -> None:
        self._rows[(row.peer, row.mid)] = row


def _backoff(tries: int) -> float:
    return min(RETRY_FIRST * 2 ** (tries - 1), RETRY_MAX)


def _unpack_stamp(data: bytes) -> SesStamp:
    return SesStamp.from_wire(msgpack.unpackb(data, raw=False))


def _uint(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= wire.MAX_SEQNO:
        raise ValueError("not a count")
    return value


def _echo(value: Any) -> bytes:
    if type(value) is not bytes or len(value) not in (0, wire.NONCE_BYTES):
        raise ValueError("bad echo")
    return value


def _message_frame(frame: list, sender: str, me: str) -> tuple[StoredDirect, bytes]:
    """A MSG frame from ``sender``, checked, as the row it would be stored as (arrival time unset),
    and its echo."""
    if len(frame) not in (7, 8):
        raise ValueError("a MSG frame has 7 fields and an echo")
    _, seqno, parent, sent_at, name, text, stamp, echo = frame if len(frame) == 8 else [*frame, b""]
    if _uint(seqno) == 0:
        raise ValueError("seqnos start at 1")
    if parent is not None:
        if type(parent) is not list or len(parent) != 2 or parent[0] not in (0, 1) or _uint(parent[1]) == 0:
            raise ValueError("bad parent")
        parent = (sender if parent[0] == 0 else me, parent[1])
    if type(name) is not str or len(name) > wire.MAX_NAME or type(text) is not str or len(text) > MAX_TEXT:
        raise ValueError("bad name or text")
    SesStamp.from_wire(stamp)  # raises ValueError on a bad one
    return StoredDirect(sender, sender, seqno, parent, name, text, _uint(sent_at), 0, 0, HELD, False,
                        msgpack.packb(stamp, use_bin_type=True)), _echo(echo)


def _ack_frame(frame: list) -> tuple[int, list[tuple[int, int]], int, int, bool, bytes]:
    if len(frame) not in (6, 7):
        raise ValueError("an ACK frame has 6 fields and an echo")
    _, cumulative, ranges, receipt, heard, confirm, echo = frame if len(frame) == 7 else [*frame, b""]
    if type(ranges) is not list or len(ranges) > MAX_ACK_RANGES or type(confirm) is not bool:
        raise ValueError("bad ACK")
    checked = []
    for item in ranges:
        if type(item) is not list or len(item) != 2 or not 0 < _uint(item[0]) <= _uint(item[1]):
            raise ValueError("bad range")
        checked.append((item[0], item[1]))
    return _uint(cumulative), checked, _uint(receipt), _uint(heard), confirm, _echo(echo)


def conversation_id(a: str, b: str) -> str:
    """The conversation between two pids as exports name it: ``dm:<pid>:<pid>``, the pids sorted."""
    first, second = sorted((a, b))
    return f"dm:{first}:{second}"
