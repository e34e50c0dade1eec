"""What the layers of one group's channel share: the group, its orderer, the per-sender
records, the outputs (datagrams, deliveries, events, counters) and message sizes."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from sys import getsizeof
from typing import Callable, Iterable, Iterator, TypeVar

from .. import wire
from ..crypto import Identity
from ..events import SyncProgress  # told to the application as it is
from ..mop import SbOrderer
from ..types import ChatMessage, Mid
from .senders import Senders

Fetch = Callable[[str, list[Mid]], list[wire.StoredMessage]]
"""``fetch(gid, mids)`` -> the stored messages among ``mids``, in delivery order."""
MemberCheck = Callable[[str], bool]

CHUNK_BYTES = 60_000
ANSWER_SLOT = 0.010  # the next responder in line waits this long per member before it (s)
# What holding one message costs beyond its text and proof (payload tuple, mid, node, index, and
# the display name, at most 64 characters).
HELD_OVERHEAD = 700
MAX_SENDERS = 10_000  # per group, authors who are not members: relayed or restored

STATS = ("naks_sent", "repairs_sent", "repaired", "gaps_reported", "sync_messages_sent", "foreign_dropped",
         "conflicts", "bad_signature_dropped", "stranger_dropped", "requests_over_budget",
         "sync_requests_refused", "rate_cuts", "sent_at_clamped")


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


def _held_size(payload: tuple) -> int:
    """What holding a message costs (called by the orderer only for the messages it holds)."""
    _, text, _, sig, _ = payload
    return HELD_OVERHEAD + getsizeof(text) + len(sig)


class GroupState:
    """One group's state that every layer reads: who we are, who the members are, the orderer,
    the sender records, and what the layers produced since the facade was last drained."""

    def __init__(self, gid: str, identity: Identity, fetch: Fetch | None, rng: random.Random | None,
                 max_held: int, max_held_bytes: int, is_member: MemberCheck | None,
                 members: Callable[[], Iterable[str]] | None) -> None:
        self.gid = gid
        self.identity = identity
        self.pid = identity.pid
        self.orderer = SbOrderer(max_held=max_held, max_held_bytes=max_held_bytes, size_of=_held_size)
        self.fetch: Fetch = fetch or (lambda gid, mids: [])
        self.rng = rng or random.Random()
        self.group_size = 1
        self.is_member: MemberCheck = is_member or (lambda pid: True)
        self.members: Callable[[], Iterable[str]] = members or (lambda: ())
        self.senders = Senders()
        self.wall = 0.0  # the wall-clock stamp of the input being handled (received_at, sent_at)
        self.outbox: list[wire.Message] = []
        self.deliveries: list[ChatMessage] = []
        self.events: list[Event] = []
        self.stats = dict.fromkeys(STATS, 0)

    def has_received(self, mid: Mid) -> bool:
        seen = self.senders.received(mid[0])
        return seen is not None and mid[1] in seen

    def rank(self, key: bytes, exclude: tuple[str, ...]) -> int:
        """This peer's place in the line of responders to a request: the members ordered by a
        hash of the request and their pid, so every member works out the same line."""
        mine = _score(key, self.pid)
        members = self.members()
        if not members:  # no member list: a place drawn from the same hash
            return int.from_bytes(mine, "big") * self.group_size >> 64
        return sum(1 for pid in members if pid not in exclude and pid != self.pid and _score(key, pid) < mine)


def rank_key(*parts: object) -> bytes:
    return "\x1f".join(map(str, parts)).encode()


def _score(key: bytes, pid: str) -> bytes:
    return hashlib.blake2b(key + pid.encode(), digest_size=8).digest()


def approx_size(message: wire.StoredMessage) -> int:
    return 120 + len(message.public_key) + len(message.sig) + len(message.sender) + len(message.name) \
        + len(message.text.encode())


Item = TypeVar("Item")


def chunks(messages: list[Item], size: Callable[[Item], int], limit: int = CHUNK_BYTES,
           max_items: int = wire.MAX_ITEMS) -> Iterator[list[Item]]:
    """``messages`` in runs of at most ``limit`` bytes (by ``size``) and ``max_items`` items."""
    chunk: list[Item] = []
    total = 0
    for message in messages:
        cost = size(message)
        if chunk and (total + cost > limit or len(chunk) >= max_items):
            yield chunk
            chunk, total = [], 0
        chunk.append(message)
        total += cost
    if chunk:
        yield chunk


def first_chunk(messages: list[wire.StoredMessage]) -> list[wire.StoredMessage]:
    """What of ``messages`` goes in one REPAIR or SYNC_RESP."""
    return next(chunks(messages, approx_size), [])
