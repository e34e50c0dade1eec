"""What a peer needs of its store: the :class:`PeerStore` protocol, and the read-marks rule both stores share.

Two stores honour it: :class:`middleware.store.Store` (SQLite, one file per data
dir) and :class:`middleware.memory_store.MemoryStore` (for the simulator and
tests).  The contract, tested against both in ``tests/core/test_store_contract.py``:

- writes are a transaction: nothing is kept until :meth:`PeerStore.commit`;
  :meth:`PeerStore.rollback` drops every write since the last commit (and what
  the store remembered of them), so the same writes can be tried again;
- :meth:`PeerStore.commit` raises ``sqlite3.Error`` or ``OSError`` when it
  cannot keep the writes (a full disk); the caller then rolls back;
- a message is stored once per (gid, mid); :meth:`PeerStore.add_messages`
  returns the new ones with their place in the delivery order (``order``),
  which counts up from 1 across groups;
- the identity and the display name are committed at once.
"""

from __future__ import annotations

from typing import Iterable, Protocol

from . import wire
from .addresses import Endpoint
from .crypto import Identity
from .direct import StoredDirect
from .gjlp import GroupRecord
from .rangeset import RangeSet
from .types import ChatMessage, Mid

# Past this many read ranges per group, the oldest gaps count as read.
MAX_READ_RANGES = 10_000


MAX_CACHED_PEERS = 256


class PeerStore(Protocol):
    def identity(self) -> Identity:
        """This peer's signing key (and so its pid), made and committed on first use."""
        ...

    def name(self) -> str | None: ...

    def set_name(self, name: str) -> None:
        """Kept and committed at once."""
        ...

    def save_group(self, record: GroupRecord) -> None:
        """A verified group (its descriptor never changes: a second save keeps the first)."""
        ...

    def save_members(self, gid: str, records: Iterable[wire.MemberRecord]) -> None:
        """Members' own signed records, each replacing that member's previous one."""
        ...

    def load_groups(self) -> list[tuple[GroupRecord, int]]:
        """Every stored group with its members, and this peer's next seqno in it."""
        ...

    def group_key(self, gid: str) -> bytes | None: ...

    def set_group_key(self, gid: str, key: bytes) -> None: ...

    def next_seqno(self, gid: str) -> int: ...

    def set_next_seqno(self, gid: str, next_seqno: int) -> None: ...

    def add_messages(self, messages: Iterable[ChatMessage]) -> list[ChatMessage]:
        """Store delivered messages in delivery order; returns the new ones with ``order`` set."""
        ...

    def history(self, gid: str | None = None) -> list[ChatMessage]:
        """Delivered messages (of one group, or all) in delivery order."""
        ...

    def fetch(self, gid: str, mids: list[Mid]) -> list[wire.StoredMessage]:
        """The stored messages among ``mids``, in delivery order (for repairs and sync)."""
        ...

    def messages(self, gid: str, mids: list[Mid]) -> list[ChatMessage]:
        """The stored messages among ``mids`` as delivered: arrival time and delivery order included."""
        ...

    def delivered_mids(self, gid: str) -> list[Mid]: ...

    def save_conflict(self, gid: str, kept: wire.StoredMessage, other: wire.StoredMessage) -> None: ...

    def conflicts(self, gid: str) -> list[tuple[wire.StoredMessage, wire.StoredMessage]]:
        """``(kept, other)`` of every equivocation known in ``gid``, by sender and seqno."""
        ...

    def replace_message(self, gid: str, message: wire.StoredMessage) -> bool:
        """Put ``message`` in place of the stored version of its mid; False if none is stored."""
        ...

    def read_marks(self, gid: str) -> list[tuple[int, int]] | None: ...

    def add_read_marks(self, gid: str, ranges: Iterable[tuple[int, int]]) -> None:
        """Add inclusive delivery-order ranges (ValueError for a bad one); commit is the caller's."""
        ...

    def cached_peers(self) -> list[tuple[str, Endpoint, float]]:
        """The peer cache: ``(pid, last proven endpoint, wall time last seen)``, newest first."""
        ...

    def cache_peer(self, pid: str, endpoint: Endpoint, wall: float) -> None:
        """Keep ``pid``'s proven endpoint (at most MAX_CACHED_PEERS rows; the oldest give way)."""
        ...

    def save_direct(self, rows: Iterable[StoredDirect]) -> None:
        """Direct messages (:mod:`middleware.direct`), each replacing its (peer, mid)'s stored version."""
        ...

    def direct_history(self, peer: str, before: int | None = None, limit: int | None = None) -> list[StoredDirect]:
        """The conversation's shown messages (``order`` above 0) before ``before``: the newest ``limit``, in order."""
        ...

    def direct_unsettled(self) -> list[StoredDirect]:
        """Outgoing messages not acknowledged yet, and incoming ones held for their causes (oldest first)."""
        ...

    def direct_unread(self, peer: str, after_order: int) -> list[tuple[int, int]]:
        """(order, seqno) of the conversation's incoming shown messages past ``after_order``, in order."""
        ...

    def direct_message(self, peer: str, mid: Mid) -> StoredDirect | None: ...

    def direct_conversations(self) -> dict[str, bytes]:
        """Each conversation's state (:class:`middleware.direct.Conversation`, packed)."""
        ...

    def save_direct_conversation(self, peer: str, state: bytes) -> None: ...

    def direct_setting(self, key: str) -> bytes | None: ...

    def set_direct_setting(self, key: str, value: bytes) -> None: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def close(self) -> None: ...


def merged_read_marks(marks: list[tuple[int, int]], ranges: Iterable[tuple[int, int]],
                      max_ranges: int = MAX_READ_RANGES) -> list[tuple[int, int]]:
    """``marks`` with ``ranges`` added (inclusive), at most ``max_ranges`` of them: past that
    the oldest gaps count as read.  A range that is not two ordered naturals is a ValueError."""
    merged = RangeSet.from_ranges(marks)
    for first, last in ranges:
        if not (isinstance(first, int) and isinstance(last, int)) or last < first or first < 0:
            raise ValueError(f"bad read range {first!r}..{last!r}")
        merged.add_range(first, last + 1)
    result = merged.ranges()
    if len(result) > max_ranges:
        keep = result[-(max_ranges - 1):]
        result = RangeSet.from_ranges([(0, keep[0][0] - 1)] + keep).ranges()
    return result
