"""Value types the middleware hands to applications (its events are in :mod:`middleware.events`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

from . import kinds
from .mentions import mentioned_pids

Mid = tuple[str, int]
MAX_SEQNO = 2**63 - 1
"""The largest seqno (an SQLite INTEGER, and what the wire takes: ``middleware.wire.MAX_SEQNO``)."""


def format_mid(mid: Mid) -> str:
    """``("ab12…", 7)`` -> ``"ab12…:7"``, the form mids take in JSON and logs."""
    return f"{mid[0]}:{mid[1]}"


def parse_mid(text: str) -> Mid:
    """The inverse of :func:`format_mid`; raises ValueError with a clear message."""
    pid, sep, seqno = text.rpartition(":") if isinstance(text, str) else ("", "", "")
    # ASCII digits only (str.isdigit also takes other scripts' digits and superscripts), and at most
    # 19 of them: a longer number is out of range anyway, and int() of a huge string costs time.
    if not sep or not pid or not seqno.isascii() or not seqno.isdigit() or len(seqno) > 19 \
            or not 1 <= int(seqno) <= MAX_SEQNO:
        raise ValueError(f"not a message id (expected '<pid>:<seqno>', the seqno from 1 to 2**63-1): {text!r:.80}")
    return pid, int(seqno)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MILLISECOND = timedelta(milliseconds=1)
FIRST_FORMATTABLE_MS = (datetime(1, 1, 1, tzinfo=timezone.utc) - _EPOCH) // _MILLISECOND
LAST_FORMATTABLE_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc) - _EPOCH) // _MILLISECOND
"""The span ``datetime`` can hold (years 1 to 9999): stamps outside it are shown at its edge."""

SENT_AT_MAX_AHEAD_MS = 24 * 3600 * 1000
"""How far a message's ``sent_at`` may lie after this peer received it (the sender's clock may be fast)."""
SENT_AT_EARLIEST_MS = (datetime(2020, 1, 1, tzinfo=timezone.utc) - _EPOCH) // _MILLISECOND
"""No M2MC message was written before 2020: an earlier ``sent_at`` comes from a clock never set.
There is no bound relative to this peer's clock on that side: history synced years later is old."""


def utc_datetime(epoch_ms: int) -> datetime:
    """Milliseconds since the epoch as an aware UTC datetime, for any integer (outside years
    1..9999 the nearest end): a stamp from the store or the wire never makes a formatter raise."""
    return _EPOCH + min(max(int(epoch_ms), FIRST_FORMATTABLE_MS), LAST_FORMATTABLE_MS) * _MILLISECOND


def iso_millis(epoch_ms: int) -> str:
    """Milliseconds since the epoch as ISO-8601 UTC with milliseconds and a Z suffix (any integer:
    see :func:`utc_datetime`)."""
    return utc_datetime(epoch_ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def shown_sent_at(sent_at: int, received_at: int) -> int:
    """The ``sent_at`` a reader is shown: the sender's stamp, clamped to what can be true of a message
    this peer received at ``received_at`` (from 2020 to a day after it).  Where they disagree, the
    sender's clock gives way to the receiver's, for display and export only: the signed stamp is
    kept as it came (relays need it)."""
    latest = max(received_at, SENT_AT_EARLIEST_MS) + SENT_AT_MAX_AHEAD_MS
    return min(max(sent_at, SENT_AT_EARLIEST_MS), latest)


class ChatMessage(NamedTuple):
    """A delivered chat message as this peer stores and shows it.

    A NamedTuple rather than a frozen dataclass: every message is built two or
    three times on its way through a peer, and a frozen dataclass's __init__
    (one object.__setattr__ per field) costs five times as much.
    """

    gid: str
    mid: Mid
    parent: Mid | None
    sender_name: str
    text: str
    sent_at: int  # ms since the epoch, the sender's clock
    received_at: int  # ms since the epoch, this peer's clock
    order: int = 0  # position in this peer's delivery order
    signature: bytes = b""  # the writer's signature, kept so any member can relay the message
    public_key: bytes = b""
    # what operations (middleware.obg) made of it; ``text`` above is then the current text
    edited: int = 0
    deleted: bool = False
    reactions: dict | None = None  # {emoji: [pid, ...]}
    pinned: bool = False
    # The name its author signed, when it is not the one shown: ``sender_name`` is then the name of
    # the author's member record (a member cannot post as another), see PeerCore.history.
    signed_name: str | None = None
    # The owner or admin (pid) who removed it (a moderation, middleware.obg's "moderate"); None if none.
    removed_by: str | None = None

    @property
    def sender(self) -> str:
        return self.mid[0]

    @property
    def kind(self) -> str:
        """What the message is: chat text, an operation, a file offer... (:mod:`middleware.kinds`)."""
        return kinds.kind_of(self.text)

    @property
    def payload(self) -> str:
        """What its kind carries: chat's text, an operation's or an offer's JSON (``text`` is the body)."""
        return kinds.payload_of(self.text)

    @property
    def mentions(self) -> tuple[str, ...]:
        """The pids this message mentions (its ``<@pid>`` tokens, middleware.mentions)."""
        return mentioned_pids(self.text)

    @property
    def shown_at(self) -> int:
        """``sent_at`` as readers see it: clamped to a window around ``received_at`` (:func:`shown_sent_at`)."""
        return shown_sent_at(self.sent_at, self.received_at)

    @property
    def sent_at_clamped(self) -> bool:
        """Whether the sender's stamp lay outside that window (its clock is wrong, or it lies)."""
        return self.shown_at != self.sent_at

    def to_json(self) -> dict:
        row = {
            "gid": self.gid,
            "mid": format_mid(self.mid),
            "parent": format_mid(self.parent) if self.parent else None,
            "sender": self.sender,
            "sender_name": self.sender_name,
            **kinds.exported(self.text),  # kind, text (its payload) and what its kind adds (a file offer's file)
            "sent_at": iso_millis(self.shown_at),
            "sent_at_clamped": self.sent_at_clamped,
            "edited": self.edited,
            "deleted": self.deleted,
            "reactions": self.reactions or {},
            "pinned": self.pinned,
            "mentions": list(self.mentions),
        }
        if self.signed_name is not None:
            row["signed_name"] = self.signed_name
        if self.removed_by is not None:
            row["removed_by"] = self.removed_by
        return row


@dataclass(frozen=True, slots=True)
class Notice:
    """An operation that changed what the group shows, for a conversation to say so ("Ann changed the
    topic to …"): the topic set, or a message pinned or unpinned.

    ``message`` is the operation's own message (its author, times and place in this peer's delivery
    order); ``kind`` is ``topic``, ``pin`` or ``unpin``; ``target`` the message pinned or unpinned;
    ``text`` the new topic and ``was`` the one it replaced.  Scripts' ``history`` never holds these:
    they are how an app may show operations, beside the messages.
    """

    message: ChatMessage
    kind: str
    target: Mid | None = None
    text: str = ""
    was: str = ""


class DirectMessage(NamedTuple):
    """A direct message (:mod:`middleware.direct`) as this peer shows it."""

    peer: str  # the other party's pid: the conversation
    mid: Mid  # (sender pid, the sender's seqno in this conversation, from 1)
    parent: Mid | None  # a reply within the conversation (S_b: shown under its parent)
    sender_name: str
    text: str
    sent_at: int  # ms, the sender's clock
    received_at: int  # ms, this peer's clock
    outgoing: bool
    status: str  # outgoing: "queued" | "sent" | "delivered" | "read"; incoming: "received" | "read"
    order: int = 0  # position in this conversation's delivery order
    late: bool = False  # delivered after the SES hold limit, possibly before a cause

    @property
    def sender(self) -> str:
        return self.mid[0]

    def to_json(self) -> dict:
        return {
            "peer": self.peer,
            "mid": format_mid(self.mid),
            "parent": format_mid(self.parent) if self.parent else None,
            "sender": self.sender,
            "name": self.sender_name,
            "text": self.text,
            "sent_at": iso_millis(shown_sent_at(self.sent_at, self.received_at)),
            "received_at": iso_millis(self.received_at),
            "outgoing": self.outgoing,
            "status": self.status,
            "late": self.late,
        }


class ConversationView(NamedTuple):
    """One direct conversation, as the list of conversations shows it."""

    peer: str
    name: str
    fingerprint: str  # the peer's key, grouped hex for people to compare
    last: DirectMessage | None  # (the conversations listed have one)
    unread: int
    online: bool

    def to_json(self) -> dict:
        return {"peer": self.peer, "name": self.name, "fingerprint": self.fingerprint,
                "last": self.last.to_json() if self.last else None, "unread": self.unread, "online": self.online}


def key_fingerprint(pid: str) -> str:
    """A pid in full, in groups of four hex digits, for two people to compare aloud."""
    return " ".join(pid[i:i + 4] for i in range(0, len(pid), 4))


@dataclass(frozen=True, slots=True)
class Member:
    pid: str
    name: str
    epoch: int = 1  # the counter of the member's own signed record

    @property
    def fingerprint(self) -> str:
        return short_fingerprint(self.pid)


def short_fingerprint(pid: str) -> str:
    """A pid's first 64 bits in groups of four, e.g. ``3f2a 91c0 5d7e 0b44``: the pid is
    the fingerprint of the member's key, and a display name can be claimed by anyone."""
    head = pid[:16]
    return " ".join(head[i:i + 4] for i in range(0, len(head), 4))


@dataclass(frozen=True, slots=True)
class GroupView:
    """What this peer knows of a group, joined or not."""

    gid: str
    desc: str
    addr: str
    port: int
    private: bool
    joined: bool
    members: tuple[Member, ...]
    left: tuple[Member, ...]
    member_count: int  # from the member list, or the zeroconf TXT when that is all we have
    last_seen: float  # wall-clock seconds of the latest news of the group
    sources: frozenset[str] = field(default_factory=frozenset)  # {"gjlp", "zeroconf"}
    verified: bool = True  # its creator's signed descriptor checked out: only then is it joinable
    legacy: bool = False  # made before signed descriptors: kept readable, never joined again
    creator: str = ""  # the creator's pid (its key's fingerprint), once verified
    topic: str = ""  # set by any member (an operation, middleware.obg); "" when none or not joined
    roles: dict = field(default_factory=dict)  # current member pid -> "owner", "admin" or "member"
    removed: tuple[Member, ...] = ()  # members an owner or admin removed (middleware.roles)
    admins_only: bool = False  # the owner's setting: only the owner and admins pin and set the topic

    def to_json(self) -> dict:
        return {
            "gid": self.gid,
            "desc": self.desc,
            "joined": self.joined,
            "private": self.private,
            "members": [{"pid": m.pid, "name": m.name, "role": self.roles.get(m.pid, "member")} for m in self.members],
            "removed": [{"pid": m.pid, "name": m.name} for m in self.removed],
            "admins_only": self.admins_only,
            "left": [{"pid": m.pid, "name": m.name} for m in self.left],
            "member_count": self.member_count,
            "addr": self.addr,
            "port": self.port,
            "sources": sorted(self.sources),
            "verified": self.verified,
            "legacy": self.legacy,
            "creator": self.creator,
            "topic": self.topic,
        }


class UsageError(ValueError):
    """The caller asked for something the middleware cannot do (unknown gid, not a member…)."""


class PassphraseRefused(UsageError):
    """A passphrase that does not open the group (``wrong``) or is too weak to create one."""

    def __init__(self, message: str, wrong: bool = False) -> None:
        super().__init__(message)
        self.wrong = wrong


def check_unicode(value: str, what: str) -> str:
    """``value`` if it can be stored and sent as UTF-8; a lone surrogate (which a JSON
    "\\ud800" escape can produce) cannot, and would fail later, after a seqno was spent."""
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise UsageError(f"{what} is not valid Unicode: it holds a lone surrogate") from None
    return value
