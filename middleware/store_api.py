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

import unicodedata
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Protocol

from . import wire
from .addresses import Endpoint
from .crypto import Identity
from .direct import StoredDirect
from . import chatops, files, kinds  # noqa: F401  (the modules that implement their kinds: kinds.implement)
from .gjlp import GroupRecord
from .rangeset import RangeSet
from .roles import Cuts
from .types import ChatMessage, Mid, UsageError

# Past this many read ranges per group, the oldest gaps count as read.
MAX_READ_RANGES = 10_000


MAX_CACHED_PEERS = 256

# A search snippet marks each matched word with these (control characters never appear in chat text).
MATCH_START = "\x02"
MATCH_END = "\x03"
SNIPPET_TOKENS = 16
"""Words of context a snippet shows around the matches."""


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One message a search found: where it is, who wrote it when, and its text around the matches."""

    gid: str  # a direct message's: its conversation, dm:<pid>:<pid> (middleware.direct.conversation_id)
    mid: Mid
    order: int  # in its group's (or conversation's) delivery order
    sent_at: int  # ms since the epoch, as readers are shown it (ChatMessage.shown_at)
    snippet: str
    peer: str | None = None  # a direct message's other party; None in a group
    rank: float = 0.0  # FTS5's bm25 (lower is better) in a search by relevance, else 0


@dataclass(frozen=True, slots=True)
class StoredThread:
    """One thread of a group as the store counts it: its root, its replies, its latest message."""

    root: ChatMessage
    replies: int
    last: ChatMessage  # the latest delivered of the thread (the root itself when no reply came)


class SearchQueryError(UsageError):
    """A search query the index cannot read (bad FTS5 syntax)."""


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

    def of_kind(self, gid: str, kind: str) -> list[ChatMessage]:
        """The group's messages of ``kind`` (not chat: :mod:`middleware.kinds`), in delivery order."""
        ...

    def file_offers(self, gid: str) -> list[ChatMessage]:
        """``gid``'s stored file offers (middleware.files), in delivery order, as :meth:`messages` gives them."""
        ...

    def mentions(self, pid: str, limit: int, cuts: Cuts = {}) -> list[ChatMessage]:
        """The stored messages (not operations) whose text mentions ``pid`` (middleware.mentions),
        newest delivered first, at most ``limit``; as :meth:`messages` gives them.  None that
        ``cuts`` puts past a removal's cut (:func:`middleware.roles.past_cut`)."""
        ...

    def delivered_mids(self, gid: str) -> list[Mid]: ...

    def save_conflict(self, gid: str, kept: wire.StoredMessage, other: wire.StoredMessage) -> None: ...

    def conflicts(self, gid: str) -> list[tuple[wire.StoredMessage, wire.StoredMessage]]:
        """``(kept, other)`` of every equivocation known in ``gid``, by sender and seqno."""
        ...

    def replace_message(self, gid: str, message: wire.StoredMessage) -> bool:
        """Put ``message`` in place of the stored version of its mid; False if none is stored."""
        ...

    def history_page(self, gid: str, before: int | None = None, after: int | None = None,
                     limit: int = 50) -> list[ChatMessage]:
        """Up to ``limit`` of ``gid``'s messages (operations left out) in delivery order, those after
        ``after`` and before ``before`` (delivery orders, both exclusive): the first ones after
        ``after`` if it is given, else the last ones before ``before`` (or the end)."""
        ...

    def message_count(self, gid: str) -> int:
        """Stored messages of ``gid``, operations included."""
        ...

    def unread_before(self, gid: str, below: int) -> int:
        """How many of ``gid``'s stored messages delivered before the order ``below`` its read marks do
        not cover (operations and this peer's own included: a count for a badge, not a list)."""
        ...

    def thread(self, gid: str, root: Mid) -> list[ChatMessage]:
        """``root`` and every reply under it, in delivery order (empty if ``root`` is not stored)."""
        ...

    def thread_root(self, gid: str, mid: Mid) -> Mid | None:
        """The root of ``mid``'s thread (``mid`` itself for a root); None if ``mid`` is not stored.
        A reply is in its parent's thread when the parent was delivered before it, as S_b order
        delivers; the version kept of an equivocation may name a later message as its parent (even
        one of its own replies), and then starts a thread, so a thread never loops."""
        ...

    def threads(self, gid: str, before: int | None = None, limit: int = 50) -> list[StoredThread]:
        """``gid``'s threads, the most recently active first: those whose latest message was delivered
        before the order ``before`` (a page's last ``last.order``), at most ``limit``."""
        ...

    def search(self, query: str, *, gid: str | None = None, sender: str | None = None,
               since: int | None = None, until: int | None = None, limit: int = 20, offset: int = 0,
               by_time: bool = False, cuts: Cuts = {}) -> list[SearchHit]:
        """Messages whose current text matches ``query`` (FTS5 syntax: words, "phrases", prefix*,
        AND/OR/NOT), best first or, ``by_time``, newest first; ``since``/``until`` bound the shown
        time (ms, inclusive); none that ``cuts`` puts past a removal's cut
        (:func:`middleware.roles.past_cut`).  SearchQueryError for a query that does not parse."""
        ...

    def search_direct(self, query: str, *, peer: str | None = None, sender: str | None = None,
                      since: int | None = None, until: int | None = None, limit: int = 20, offset: int = 0,
                      by_time: bool = False) -> list[SearchHit]:
        """As :meth:`search`, over the direct messages shown (all conversations, or the one with
        ``peer``); newest first by shown time with ``by_time``.  Each hit has ``peer`` set."""
        ...

    def set_search_text(self, gid: str, mid: Mid, text: str | None) -> None:
        """The text ``mid`` is found by from now on (an edit's), or None to find it no more (deleted)."""
        ...

    def read_marks(self, gid: str) -> list[tuple[int, int]] | None: ...

    def add_read_marks(self, gid: str, ranges: Iterable[tuple[int, int]]) -> None:
        """Add inclusive delivery-order ranges (ValueError for a bad one); commit is the caller's."""
        ...

    def cached_peers(self) -> list[tuple[str, Endpoint, float]]:
        """The peer cache: ``(pid, last proven endpoint, wall time last seen)``, newest first."""
        ...

    def cache_peer(self, pid: str, endpoint: Endpoint, wall: float,
                   keep: Callable[[str], bool] | None = None) -> None:
        """Keep ``pid``'s proven endpoint (at most MAX_CACHED_PEERS rows).  Past the cap the oldest
        row of a pid for which ``keep`` is false (a stranger's) gives way, and a row it keeps (a
        peer sharing a group) only when no other is left: fresh keys cost nothing, and a
        stranger proving many must not push out the peers this one needs after a restart."""
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


def in_branch(message: ChatMessage, members: set[Mid]) -> bool:
    """Whether ``message`` answers one of ``members`` (a branch's mids so far, in delivery order);
    if so it joins them."""
    if message.parent in members:
        members.add(message.mid)
        return True
    return False


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


def searched_text(text: str) -> str | None:
    """What the search index holds for a message's text: the text; a file offer's file name alone
    (its JSON's hashes and fields would match queries and show in snippets); None for an operation
    (an edit, reaction...: the text it changes is what is found); as its kind says (:func:`kinds.indexed`)."""
    return kinds.indexed(text)


def _is_token_char(char: str) -> bool:
    # SQLite's unicode61: letters, numbers and private-use characters make words
    return unicodedata.category(char)[0] in "LN" or unicodedata.category(char) == "Co"


def search_words(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, folded word)`` of each word in ``text``, as FTS5's ``unicode61
    remove_diacritics 2`` cuts and folds them (the plain scan's half of the contract)."""
    start = None
    for index, char in enumerate(text + " "):
        if _is_token_char(char) and index < len(text):
            if start is None:
                start = index
        elif start is not None:
            yield start, index, fold_word(text[start:index])
            start = None


def fold_word(word: str) -> str:
    """Lower case, Latin letters without diacritics (é -> e), as unicode61 folds: it leaves
    other scripts' marks (ё, ά) in place."""
    folded = []
    for char in word:
        decomposed = unicodedata.normalize("NFD", char.lower())
        if ord(decomposed[0]) < 0x250 or 0x1E00 <= ord(decomposed[0]) < 0x1F00:  # Latin
            folded.append("".join(c for c in decomposed if unicodedata.category(c) != "Mn"))
        else:
            folded.append(char.lower())
    return "".join(folded)


def plain_match(query: str) -> Callable[[str], list[tuple[int, int]]]:
    """A plain-scan matcher for ``query`` (words, each maybe ending in ``*``, all required: the part of
    the FTS5 syntax the memory store takes); it returns a text's matched spans, [] if it does not match.
    SearchQueryError for anything else (phrases, operators, columns)."""
    terms: list[tuple[str, bool]] = []
    for part in query.split():
        prefix = part.endswith("*")
        body = part[:-1] if prefix else part
        words = [word for _, _, word in search_words(body)]
        if len(words) != 1 or body in ("AND", "OR", "NOT", "NEAR") or any(not _is_token_char(c) for c in body):
            raise SearchQueryError(f"the plain scan takes words and prefix* only, not {part!r}")
        terms.append((words[0], prefix))
    if not terms:
        raise SearchQueryError("an empty query")

    def matches(text: str) -> list[tuple[int, int]]:
        spans = []
        found = set()
        for start, end, word in search_words(text):
            for index, (term, prefix) in enumerate(terms):
                if word == term or (prefix and word.startswith(term)):
                    spans.append((start, end))
                    found.add(index)
        return spans if len(found) == len(terms) else []

    return matches
