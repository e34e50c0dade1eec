"""A peer's store held in memory: the :class:`~middleware.store_api.PeerStore` contract without a file.

It serves the simulator (``tests/testbed/peer_sim.py``), which runs whole peers and
restarts them after a crash, and any test that wants a peer without SQLite.
Writes go into the live state at once and are noted in an undo log;
:meth:`MemoryStore.commit` forgets the log, :meth:`MemoryStore.rollback` plays
it backwards.  :meth:`MemoryStore.crash` is what a killed process leaves: the
committed state only.  ``fail_commits`` makes :meth:`MemoryStore.commit` raise
as SQLite does on a full disk.
"""

from __future__ import annotations

import functools
import sqlite3
from dataclasses import dataclass
from typing import Callable, Iterable

from . import kinds, wire
from .crypto import Identity
from .gjlp import GroupRecord
from .addresses import Endpoint
from .direct import DROPPED, StoredDirect, conversation_id
from .store_api import (MATCH_END, MATCH_START, MAX_CACHED_PEERS, MAX_READ_RANGES, PeerStore, SearchHit, StoredThread,
                        in_branch, merged_read_marks, plain_match, searched_text)
from .rangeset import RangeSet
from .roles import Cuts, past_cut
from .types import ChatMessage, Mid, shown_sent_at

_MISSING = object()


@dataclass
class _GroupRow:
    descriptor: wire.GroupDescriptor
    next_seqno: int = 1
    key: bytes | None = None


class MemoryStore:
    MAX_READ_RANGES = MAX_READ_RANGES

    def __init__(self, identity: Identity | None = None) -> None:
        self._settings: dict[str, object] = {} if identity is None else {"identity": identity}
        self._groups: dict[str, _GroupRow] = {}
        self._members: dict[tuple[str, str], wire.MemberRecord] = {}
        self._messages: dict[tuple[str, Mid], ChatMessage] = {}
        self._delivered: list[tuple[str, Mid]] = []  # delivery order
        self._keys: dict[str, bytes] = {}  # pid -> public key, as first stored
        self._conflicts: dict[tuple[str, Mid], tuple[wire.StoredMessage, wire.StoredMessage]] = {}
        self._read_marks: dict[str, list[tuple[int, int]]] = {}
        self._search_text: dict[tuple[str, Mid], str | None] = {}  # edited (str) or deleted (None)
        self._peer_cache: dict[str, tuple[Endpoint, float]] = {}
        self._direct: dict[tuple[str, Mid], StoredDirect] = {}
        self._direct_conversations: dict[str, bytes] = {}
        self._direct_settings: dict[str, bytes] = {}
        self._undo: list[Callable[[], object]] = []
        self.fail_commits: str | None = None  # a reason: commit raises as on a full disk
        self.commits = 0

    # -- the transaction ------------------------------------------------------------

    def _put(self, table: dict, key: object, value: object) -> None:
        old = table.get(key, _MISSING)
        self._undo.append(lambda: table.pop(key, None) if old is _MISSING else table.__setitem__(key, old))
        table[key] = value

    def commit(self) -> None:
        if self.fail_commits is not None:
            raise sqlite3.OperationalError(self.fail_commits)
        self._undo.clear()
        self.commits += 1

    def rollback(self) -> None:
        while self._undo:
            self._undo.pop()()

    def crash(self) -> None:
        """What a killed process leaves: every write since the last commit is gone."""
        self.rollback()

    def close(self) -> None:
        try:
            self.commit()
        except sqlite3.Error:  # as SQLite's: what was committed stays, the rest is dropped
            self.rollback()

    # -- identity -------------------------------------------------------------------

    def identity(self) -> Identity:
        identity = self._settings.get("identity")
        if not isinstance(identity, Identity):
            identity = self._settings["identity"] = Identity.generate()  # committed at once, as SQLite's
        return identity

    def name(self) -> str | None:
        name = self._settings.get("name")
        return name if isinstance(name, str) else None

    def set_name(self, name: str) -> None:
        self._put(self._settings, "name", name)
        self.commit()

    # -- groups -----------------------------------------------------------------------

    def save_group(self, record: GroupRecord) -> None:
        if record.descriptor is not None and record.gid not in self._groups:
            self._put(self._groups, record.gid, _GroupRow(record.descriptor))

    def save_members(self, gid: str, records: Iterable[wire.MemberRecord]) -> None:
        for record in records:
            self._put(self._members, (gid, record.pid), record)

    def load_groups(self) -> list[tuple[GroupRecord, int]]:
        result = []
        for gid, row in self._groups.items():
            record = GroupRecord.from_descriptor(gid, row.descriptor)
            record.members.update((pid, member) for (g, pid), member in self._members.items() if g == gid)
            record.sources = {"local"}
            result.append((record, row.next_seqno))
        return result

    def _update(self, gid: str, **fields: object) -> None:
        row = self._groups.get(gid)
        if row is not None:  # as SQL's UPDATE: a group not stored is left alone
            self._put(self._groups, gid, _GroupRow(**{**vars(row), **fields}))

    def group_key(self, gid: str) -> bytes | None:
        row = self._groups.get(gid)
        return row.key if row else None

    def set_group_key(self, gid: str, key: bytes) -> None:
        self._update(gid, key=key)

    def next_seqno(self, gid: str) -> int:
        row = self._groups.get(gid)
        return row.next_seqno if row else 1

    def set_next_seqno(self, gid: str, next_seqno: int) -> None:
        self._update(gid, next_seqno=next_seqno)

    # -- messages -------------------------------------------------------------------------

    def add_messages(self, messages: Iterable[ChatMessage]) -> list[ChatMessage]:
        stored = []
        for gid, mid, parent, name, text, sent_at, received_at, _, signature, public_key, *_ in messages:
            if (gid, mid) in self._messages:
                continue
            message = ChatMessage(gid, mid, parent, name, text, sent_at, received_at, len(self._delivered) + 1,
                                  signature, public_key)
            self._put(self._messages, (gid, mid), message)
            self._delivered.append((gid, mid))
            self._undo.append(self._delivered.pop)
            if public_key and mid[0] not in self._keys:
                self._put(self._keys, mid[0], public_key)
            stored.append(message)
        return stored

    def _with_key(self, message: ChatMessage) -> ChatMessage:
        return message._replace(public_key=self._keys.get(message.mid[0], b""))

    def history(self, gid: str | None = None) -> list[ChatMessage]:
        return [self._with_key(self._messages[key]) for key in self._delivered if gid is None or key[0] == gid]

    def fetch(self, gid: str, mids: list[Mid]) -> list[wire.StoredMessage]:
        found = [self._messages[(gid, mid)] for mid in set(mids) if (gid, mid) in self._messages]
        return [wire.StoredMessage(m.mid[0], m.mid[1], m.parent, m.sent_at, m.sender_name, m.text,
                                   self._keys.get(m.mid[0], b""), m.signature)
                for m in sorted(found, key=lambda m: m.order)]

    def messages(self, gid: str, mids: list[Mid]) -> list[ChatMessage]:
        found = [self._messages[(gid, mid)] for mid in set(mids) if (gid, mid) in self._messages]
        return [self._with_key(m) for m in sorted(found, key=lambda m: m.order)]

    def of_kind(self, gid: str, kind: str) -> list[ChatMessage]:
        return [m for m in self.history(gid) if m.kind == kind]

    def file_offers(self, gid: str) -> list[ChatMessage]:
        return self.of_kind(gid, kinds.FILE_OFFER)

    def mentions(self, pid: str, limit: int, cuts: Cuts = {}) -> list[ChatMessage]:
        """A scan, newest first: this store serves simulations and tests, not 100,000-message histories."""
        found: list[ChatMessage] = []
        for key in reversed(self._delivered):
            if len(found) >= limit:
                break
            message = self._messages[key]
            if pid in message.mentions and kinds.listed(message.text) and \
                    not past_cut(cuts.get(message.gid, {}), *message.mid):
                found.append(self._with_key(message))
        return found

    def delivered_mids(self, gid: str) -> list[Mid]:
        return [mid for g, mid in self._delivered if g == gid]

    # -- equivocation --------------------------------------------------------------------

    def save_conflict(self, gid: str, kept: wire.StoredMessage, other: wire.StoredMessage) -> None:
        self._put(self._conflicts, (gid, (kept.sender, kept.seqno)), (kept, other))

    def conflicts(self, gid: str) -> list[tuple[wire.StoredMessage, wire.StoredMessage]]:
        return [pair for (g, _), pair in sorted(self._conflicts.items(), key=lambda item: item[0][1]) if g == gid]

    def replace_message(self, gid: str, message: wire.StoredMessage) -> bool:
        key = (gid, (message.sender, message.seqno))
        old = self._messages.get(key)
        if old is None:
            return False
        self._put(self._messages, key, old._replace(parent=message.parent, sender_name=message.name,
                                                    text=message.text, sent_at=message.sent_at,
                                                    signature=message.sig))
        if (gid, (message.sender, message.seqno)) in self._search_text:  # as the SQLite index: the new text
            self._put(self._search_text, (gid, (message.sender, message.seqno)), message.text)
        return True

    # -- paging and search: plain scans, with the SQLite store's answers ---------------------

    def history_page(self, gid: str, before: int | None = None, after: int | None = None,
                     limit: int = 50) -> list[ChatMessage]:
        rows = [m for m in self.history(gid) if (before is None or m.order < before)
                and (after is None or m.order > after) and kinds.listed(m.text)]
        return rows[:limit] if after is not None else rows[-limit:] if limit else []

    def message_count(self, gid: str) -> int:
        return sum(1 for g, _ in self._delivered if g == gid)

    def _chat_history(self, gid: str) -> list[ChatMessage]:
        return [m for m in self.history(gid) if kinds.listed(m.text)]

    def unread_before(self, gid: str, below: int) -> int:
        read = RangeSet.from_ranges(self._read_marks.get(gid, []))
        return sum(1 for g, mid in self._delivered
                   if g == gid and self._messages[(g, mid)].order < below and self._messages[(g, mid)].order not in read)

    def thread_root(self, gid: str, mid: Mid) -> Mid | None:
        message = self._messages.get((gid, mid))
        while message is not None and message.parent is not None and kinds.listed(message.text):
            parent = self._messages.get((gid, message.parent))
            if parent is None or parent.order >= message.order:  # see PeerStore.thread_root (or itself)
                break
            message = parent
        return message.mid if message is not None else None

    def thread(self, gid: str, root: Mid) -> list[ChatMessage]:
        top = self._messages.get((gid, root))
        if top is None:
            return []
        members = {root}  # its answers come after it (see PeerStore.thread_root)
        return [m for m in self._chat_history(gid)
                if m.mid == root or m.order > top.order and in_branch(m, members)]

    def threads(self, gid: str, before: int | None = None, limit: int = 50) -> list[StoredThread]:
        found: dict[Mid, list] = {}  # root -> [root message, replies, last]
        for message in self._chat_history(gid):
            root = self.thread_root(gid, message.mid)
            if root == message.mid:
                found[root] = [message, 0, message]
            elif root in found:
                found[root][1] += 1
                found[root][2] = message
        ranked = sorted(found.values(), key=lambda t: t[2].order, reverse=True)
        return [StoredThread(*t) for t in ranked if before is None or t[2].order < before][:limit]

    def search(self, query: str, *, gid: str | None = None, sender: str | None = None,
               since: int | None = None, until: int | None = None, limit: int = 20, offset: int = 0,
               by_time: bool = False, cuts: Cuts = {}) -> list[SearchHit]:
        """A scan of every message: FTS5's words and prefixes, all required; newest first in both
        orders (the plain scan has no relevance rank)."""
        matches = plain_match(query)
        hits = []
        for message in reversed(self.history(gid)):
            edited = self._search_text.get((message.gid, message.mid), message.text)
            text = None if edited is None else searched_text(edited)
            if text is None or (sender is not None and message.mid[0] != sender) \
                    or (since is not None and message.shown_at < since) \
                    or (until is not None and message.shown_at > until) \
                    or past_cut(cuts.get(message.gid, {}), *message.mid):
                continue
            snippet = _marked(text, matches(text))
            if snippet is not None:
                hits.append(SearchHit(message.gid, message.mid, message.order, message.shown_at, snippet))
        return hits[offset:offset + limit]

    def search_direct(self, query: str, *, peer: str | None = None, sender: str | None = None,
                      since: int | None = None, until: int | None = None, limit: int = 20, offset: int = 0,
                      by_time: bool = False) -> list[SearchHit]:
        """A scan of the direct messages shown, newest first by shown time in both orders."""
        matches = plain_match(query)
        me = self.identity().pid
        hits = []
        for row in self._direct.values():
            shown_at = shown_sent_at(row.sent_at, row.received_at)
            text = searched_text(row.text) if row.order > 0 else None
            if text is None or (peer is not None and row.peer != peer) or (sender is not None and row.sender != sender) \
                    or (since is not None and shown_at < since) or (until is not None and shown_at > until):
                continue
            snippet = _marked(text, matches(text))
            if snippet is not None:
                hits.append(SearchHit(conversation_id(me, row.peer), row.mid, row.order, shown_at, snippet,
                                      peer=row.peer))
        hits.sort(key=lambda hit: hit.sent_at, reverse=True)
        return hits[offset:offset + limit]

    def set_search_text(self, gid: str, mid: Mid, text: str | None) -> None:
        if (gid, mid) in self._messages:
            self._put(self._search_text, (gid, mid), text)

    # -- read marks -----------------------------------------------------------------------

    def read_marks(self, gid: str) -> list[tuple[int, int]] | None:
        marks = self._read_marks.get(gid)
        return list(marks) if marks is not None else None

    def add_read_marks(self, gid: str, ranges: Iterable[tuple[int, int]]) -> None:
        self._put(self._read_marks, gid, merged_read_marks(self._read_marks.get(gid, []), ranges,
                                                            self.MAX_READ_RANGES))

    # -- the peer cache -----------------------------------------------------------------

    def cached_peers(self) -> list[tuple[str, Endpoint, float]]:
        rows = [(pid, endpoint, seen) for pid, (endpoint, seen) in self._peer_cache.items()]
        return sorted(rows, key=lambda row: -row[2])

    def cache_peer(self, pid: str, endpoint: Endpoint, wall: float,
                   keep: Callable[[str], bool] | None = None) -> None:
        self._put(self._peer_cache, pid, (endpoint, wall))
        if len(self._peer_cache) > MAX_CACHED_PEERS:
            kept = keep or (lambda _pid: False)  # a stranger's oldest row first (Store.cache_peer)
            oldest = min(self._peer_cache, key=lambda p: (kept(p), self._peer_cache[p][1]))
            row = self._peer_cache.pop(oldest)
            self._undo.append(lambda: self._peer_cache.__setitem__(oldest, row))

    # -- direct messages ------------------------------------------------------------------

    def save_direct(self, rows: Iterable[StoredDirect]) -> None:
        for row in rows:
            key = (row.peer, (row.sender, row.seqno))
            if row.status == DROPPED:
                old = self._direct.pop(key, None)
                if old is not None:
                    self._undo.append(functools.partial(self._direct.__setitem__, key, old))
            else:
                self._put(self._direct, key, row)

    def direct_history(self, peer: str, before: int | None = None, limit: int | None = None) -> list[StoredDirect]:
        rows = sorted((r for (p, _), r in self._direct.items()
                       if p == peer and r.order > 0 and (before is None or r.order < before)), key=lambda r: r.order)
        return rows[-limit:] if limit is not None and limit > 0 else [] if limit is not None else rows

    def direct_unsettled(self) -> list[StoredDirect]:
        return sorted((r for r in self._direct.values() if r.status in ("queued", "sent", "held")),
                      key=lambda r: (r.received_at, r.sender, r.seqno))

    def direct_unread(self, peer: str, after_order: int) -> list[tuple[int, int]]:
        return sorted((r.order, r.seqno) for (p, (sender, _)), r in self._direct.items() if p == peer
                      and sender == peer and r.order > after_order)

    def direct_message(self, peer: str, mid: Mid) -> StoredDirect | None:
        return self._direct.get((peer, mid))

    def direct_conversations(self) -> dict[str, bytes]:
        return dict(self._direct_conversations)

    def save_direct_conversation(self, peer: str, state: bytes) -> None:
        self._put(self._direct_conversations, peer, state)

    def direct_setting(self, key: str) -> bytes | None:
        return self._direct_settings.get(key)

    def set_direct_setting(self, key: str, value: bytes) -> None:
        self._put(self._direct_settings, key, value)


def _marked(text: str, spans: list[tuple[int, int]]) -> str | None:
    """``text`` with each of ``spans`` between MATCH_START and MATCH_END; None without spans."""
    if not spans:
        return None
    snippet, last = "", 0
    for start, end in spans:
        snippet += text[last:start] + MATCH_START + text[start:end] + MATCH_END
        last = end
    return snippet + text[last:]


def _as_peer_store(store: MemoryStore) -> PeerStore:
    return store  # mypy holds MemoryStore to the protocol here
