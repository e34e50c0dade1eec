"""Direct messages in the store: their rows, their conversations' states and settings, and their search index.

The tables (direct_messages, direct_conversations, direct_settings: :data:`middleware.store_schema.SCHEMA`)
live in the store's database and are written in the store's transactions
(:class:`DirectMessages` shares :class:`middleware.store.Store`'s connection; the commit is the
store's).  What the rows mean, and who may write them, is :mod:`middleware.direct`'s.
"""

from __future__ import annotations

import sqlite3
from typing import Callable, Iterable

from .crypto import Identity
from .direct import DROPPED, StoredDirect, conversation_id
from .store_api import SearchHit, searched_text
from .store_search import SEARCH_TOKENIZER, Snippets, query_error
from .types import Mid, shown_sent_at

# Direct messages have an index of their own, alike, written with their rows (save_direct), in
# the same transaction.  Their rows have no integer key, so direct_search_rows gives each shown
# message one (the index's rowid) when it is first indexed; a message saved again as its status
# changes is not indexed twice.  Direct messages are never edited, so nothing is kept aside.
DIRECT_SEARCH_SCHEMA = f"""
CREATE VIRTUAL TABLE direct_search USING fts5(
    text, content='', columnsize=0, tokenize = "{SEARCH_TOKENIZER}"
);
CREATE TABLE direct_search_rows (
    row INTEGER PRIMARY KEY, peer TEXT NOT NULL, sender TEXT NOT NULL, seqno INTEGER NOT NULL,
    UNIQUE (peer, sender, seqno)
);
"""
DIRECT_COLUMNS = ("peer, sender, seqno, parent_sender, parent_seqno, name, text, sent_at, received_at, ord, "
                  "status, late, stamp")


def direct_row(row: tuple) -> StoredDirect:
    """A direct_messages row (its :data:`DIRECT_COLUMNS`) as the message it keeps."""
    peer, sender, seqno, parent_sender, parent_seqno, name, text, sent_at, received_at, order, status, late, \
        stamp = row
    parent = (parent_sender, parent_seqno) if parent_sender is not None else None
    return StoredDirect(peer, sender, seqno, parent, name, text, sent_at, received_at, order, status, bool(late),
                        stamp)


class DirectMessages:
    """The direct messages kept in ``db``; ``snippets`` cut search results (the store's, shared with
    the groups' index) and ``identity`` is this peer's (a result names its conversation by both pids)."""

    def __init__(self, db: sqlite3.Connection, snippets: Snippets, identity: Callable[[], Identity]) -> None:
        self._db = db
        self._snippets = snippets
        self._identity = identity
        db.create_function("search_shown_at", 2, shown_sent_at, deterministic=True)

    @staticmethod
    def search_index_present(tables: set[str]) -> bool:
        """Whether a database with ``tables`` has the direct messages' index."""
        return {"direct_search", "direct_search_rows"} <= tables

    def build_search_index(self) -> None:
        """Index the direct messages stored before their index was (in one transaction)."""
        self._db.execute("BEGIN")
        for statement in DIRECT_SEARCH_SCHEMA.split(";")[:-1]:
            self._db.execute(statement)
        self._index([direct_row(row) for row in self._db.execute(
            f"SELECT {DIRECT_COLUMNS} FROM direct_messages WHERE ord > 0 ORDER BY received_at")])
        self._db.commit()

    def save(self, rows: Iterable[StoredDirect], *, index: bool) -> None:
        """Direct messages, each replacing the stored version of its (peer, mid); those shown are
        indexed for search (once).  A row with the status ``dropped`` deletes its (peer, mid) instead."""
        saved = []
        for r in rows:
            if r.status == DROPPED:
                self._delete(r.peer, r.mid)
            else:
                saved.append(r)
        self._db.executemany(
            f"INSERT OR REPLACE INTO direct_messages ({DIRECT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(r.peer, r.sender, r.seqno, *(r.parent or (None, None)), r.name, r.text, r.sent_at, r.received_at,
              r.order, r.status, int(r.late), r.stamp) for r in saved])
        if index:
            self._index(saved)

    def _delete(self, peer: str, mid: Mid) -> None:
        """A direct message gone, and its search index entry: a contentless index forgets an entry
        only when handed the text it indexed, which is read back from the row itself."""
        key = (peer, *mid)
        found = self._db.execute("SELECT r.row, m.text FROM direct_search_rows r JOIN direct_messages m ON "
                                 "m.peer = r.peer AND m.sender = r.sender AND m.seqno = r.seqno "
                                 "WHERE r.peer = ? AND r.sender = ? AND r.seqno = ?", key).fetchone()
        if found is not None:
            row, text = found
            indexed = searched_text(text)
            if indexed is not None:
                self._db.execute("INSERT INTO direct_search (direct_search, rowid, text) VALUES ('delete', ?, ?)",
                                 (row, indexed))
            self._db.execute("DELETE FROM direct_search_rows WHERE row = ?", (row,))
        self._db.execute("DELETE FROM direct_messages WHERE peer = ? AND sender = ? AND seqno = ?", key)

    def _index(self, rows: list[StoredDirect]) -> None:
        """Index the shown ones of ``rows`` (order above 0: not held) not indexed yet."""
        for r in rows:
            text = searched_text(r.text) if r.order > 0 else None
            if text is None:
                continue
            cursor = self._db.execute("INSERT OR IGNORE INTO direct_search_rows (peer, sender, seqno) VALUES (?, ?, ?)",
                                      (r.peer, r.sender, r.seqno))
            if cursor.rowcount == 1:
                self._db.execute("INSERT INTO direct_search (rowid, text) VALUES (?, ?)", (cursor.lastrowid, text))

    def history(self, peer: str, before: int | None = None, limit: int | None = None) -> list[StoredDirect]:
        """The conversation's shown messages (order above 0) before ``before``: the newest ``limit``, in order."""
        rows = self._db.execute(
            f"SELECT {DIRECT_COLUMNS} FROM direct_messages WHERE peer = ? AND ord > 0 AND ord < ? "
            "ORDER BY ord DESC LIMIT ?", (peer, before if before is not None else 2**63 - 1,
                                          limit if limit is not None else -1)).fetchall()
        return [direct_row(row) for row in reversed(rows)]

    def unsettled(self) -> list[StoredDirect]:
        """Outgoing messages not yet acknowledged, and incoming ones held for their causes."""
        return [direct_row(row) for row in self._db.execute(
            f"SELECT {DIRECT_COLUMNS} FROM direct_messages WHERE status IN ('queued', 'sent', 'held') "
            "ORDER BY received_at, sender, seqno")]

    def unread(self, peer: str, after_order: int) -> list[tuple[int, int]]:
        """(order, seqno) of the conversation's incoming shown messages past ``after_order``, in order."""
        return self._db.execute("SELECT ord, seqno FROM direct_messages WHERE peer = ? AND sender = peer AND ord > ? "
                                "ORDER BY ord", (peer, after_order)).fetchall()

    def message(self, peer: str, mid: Mid) -> StoredDirect | None:
        row = self._db.execute(f"SELECT {DIRECT_COLUMNS} FROM direct_messages WHERE peer = ? AND sender = ? "
                               "AND seqno = ?", (peer, *mid)).fetchone()
        return direct_row(row) if row else None

    def conversations(self) -> dict[str, bytes]:
        return dict(self._db.execute("SELECT peer, state FROM direct_conversations"))

    def save_conversation(self, peer: str, state: bytes) -> None:
        self._db.execute("INSERT OR REPLACE INTO direct_conversations (peer, state) VALUES (?, ?)", (peer, state))

    def setting(self, key: str) -> bytes | None:
        row = self._db.execute("SELECT value FROM direct_settings WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_setting(self, key: str, value: bytes) -> None:
        self._db.execute("INSERT OR REPLACE INTO direct_settings (key, value) VALUES (?, ?)", (key, value))

    def search(self, query: str, *, peer: str | None = None, sender: str | None = None,
               since: int | None = None, until: int | None = None, limit: int = 20, offset: int = 0,
               by_time: bool = False) -> list[SearchHit]:
        """Matches of ``query`` among the direct messages shown, best first or, ``by_time``, newest
        first by shown time.  Conversations hold far fewer messages than groups: filters and the
        time order are worked out over every match."""
        where = "direct_search MATCH ?"
        args: list = [query]
        for test, value in (("r.peer = ?", peer), ("r.sender = ?", sender),
                            ("search_shown_at(m.sent_at, m.received_at) >= ?", since),
                            ("search_shown_at(m.sent_at, m.received_at) <= ?", until)):
            if value is not None:
                where += f" AND {test}"
                args.append(value)
        order, rank = (("search_shown_at(m.sent_at, m.received_at) DESC, direct_search.rowid DESC", "0.0")
                       if by_time else ("direct_search.rank, direct_search.rowid DESC", "direct_search.rank"))
        try:
            found = self._db.execute(
                f"SELECT direct_search.rowid, {rank}, {', '.join('m.' + c for c in DIRECT_COLUMNS.split(', '))} "
                "FROM direct_search JOIN direct_search_rows r ON r.row = direct_search.rowid "
                "JOIN direct_messages m ON m.peer = r.peer AND m.sender = r.sender AND m.seqno = r.seqno "
                f"WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
        except sqlite3.OperationalError as exc:
            raise query_error(exc) from None
        rows = {row: (rank_of, direct_row(stored)) for row, rank_of, *stored in found}
        snippets = self._snippets.of(query, {row: searched_text(stored.text) or "" for row, (_, stored) in rows.items()})
        me = self._identity().pid
        return [SearchHit(conversation_id(me, stored.peer), stored.mid, stored.order,
                          shown_sent_at(stored.sent_at, stored.received_at), snippets[row], peer=stored.peer,
                          rank=rank_of) for row, (rank_of, stored) in rows.items()]
