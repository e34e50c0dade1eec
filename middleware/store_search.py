"""The groups' full-text search index (FTS5): its schema, its merging, building and rewriting it, and searches.

The index lives in the store's database and is written in the store's transactions
(:class:`SearchIndex` shares :class:`middleware.store.Store`'s connection): the store hands it
each segment's rows as it writes them (:meth:`SearchIndex.index_rows`), a new text for a message
kept in another version or edited (:meth:`SearchIndex.reindex`), and tells it of every commit
(:meth:`SearchIndex.before_commit`), where it merges.  The text stays in the segments
(:mod:`middleware.store_segments`), where results and snippets are read from.
"""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
from collections import OrderedDict
from pathlib import Path
from typing import Mapping

import msgpack

from . import kinds
from .roles import Cuts, past_cut
from .store_api import MATCH_END, MATCH_START, SNIPPET_TOKENS, SearchHit, SearchQueryError, searched_text
from .store_segments import read_segments
from .types import shown_sent_at

log = logging.getLogger(__name__)

# The full-text index: one entry per chat message (operations are not), its rowid the delivery
# order, over the current text (edits replace it, deletes remove it).  It is written with the
# segment, in the same transaction.  A database without it gets it built on open.
# It holds the index alone (content=''): the text stays in the segments, where snippets and
# results are read from, so it is not stored twice; no per-message sizes (columnsize=0), so a
# message costs one entry in the terms' doclists and nothing else (bm25 then ranks by how often
# the words occur, not by the message's length).  Together they halve what indexing adds to storing
# a message (resources/docs/benchmarks.md).  FTS5 writes each commit's entries as a small b-tree
# of their own and merges them as it goes (automerge), a third of what indexing adds to a busy
# peer's commits: here the merging waits for a commit that indexes nothing (an idle peer's:
# timers, presence), a step of it each, and only a peer busy for MERGE_BACKLOG commits in a
# row merges as it goes (Store.commit).  A contentless index can only forget a text it is handed
# back, so message_search_changed keeps the indexed text of the few messages whose current text
# is not their stored one (edited; NULL when deleted).
SEARCH_TOKENIZER = "unicode61 remove_diacritics 2"
SEARCH_SCHEMA = f"""
CREATE VIRTUAL TABLE message_search USING fts5(
    text, content='', columnsize=0, tokenize = "{SEARCH_TOKENIZER}"
);
CREATE TABLE message_search_changed (delivery_order INTEGER PRIMARY KEY, text TEXT);
"""
# FTS5's own merging (automerge) as a busy peer's index gets it (16: less often than FTS5's 4,
# an eighth less indexing cost), and what it merges while idle: a step of about this many pages
# a commit.  An index holds at most 2,000 b-trees (past that FTS5 refuses writes as "disk
# full"): crisismerge merges a level that reaches CRISIS_MERGE at once, above MERGE_BACKLOG's
# one a commit and far below the limit.  A store opens merging as it goes, as its index may
# hold a backlog it cannot count (a peer restarted while busy): the first idle commit ends it.
AUTOMERGE = 16
MERGE_BACKLOG = 1000
IDLE_MERGE_PAGES = 64
CRISIS_MERGE = 1200
RELEVANCE_WINDOW = 10_000
"""A search by relevance ranks the newest this many matches (older ones are found by time order)."""
SEARCH_BUILD_REPORT = 100_000
"""Building the index for an old data dir logs its progress every this many messages."""


def query_error(exc: sqlite3.OperationalError) -> Exception:
    """A search's error: SearchQueryError for a query FTS5 cannot parse, which it reports as an
    OperationalError ("fts5: syntax error near ...", "no such column: ..."), else the disk's own."""
    message = str(exc)
    if any(sign in message for sign in ("fts5", "no such column", "unterminated", "malformed MATCH",
                                        "special query")):
        return SearchQueryError(message)
    return exc


def cuts_argument(cuts: Cuts) -> str:
    """``cuts`` as one SQL argument, for the ``past_cut`` and ``search_past_cut`` functions."""
    return json.dumps(cuts, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=8)
def _cuts_of(argument: str) -> dict[str, dict[str, int]]:
    return json.loads(argument)  # one query's argument, parsed once for all the rows it tests


def sql_past_cut(gid: str, sender: str, seqno: int, cuts: str) -> bool:
    """:func:`middleware.roles.past_cut` in SQL: ``cuts`` made by :func:`cuts_argument`."""
    return past_cut(_cuts_of(cuts).get(gid, {}), sender, seqno)


class Snippets:
    """Snippets of found messages, made by FTS5 itself on a scratch in-memory index of just those
    messages (the store's index keeps no text to make them from), so the words marked are the
    ones the query matched, tokenized alike."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:")
        self._db.execute(f"CREATE VIRTUAL TABLE hits USING fts5(text, tokenize = \"{SEARCH_TOKENIZER}\")")

    def of(self, query: str, texts: dict[int, str]) -> dict[int, str]:
        """Each text of ``texts`` (by delivery order) cut around its matches of ``query``, marked."""
        with self._db:
            self._db.executemany("INSERT INTO hits (rowid, text) VALUES (?, ?)", texts.items())
            found = dict(self._db.execute(
                "SELECT rowid, snippet(hits, 0, ?, ?, '…', ?) FROM hits WHERE hits MATCH ?",
                (MATCH_START, MATCH_END, SNIPPET_TOKENS, query)))
            self._db.execute("DELETE FROM hits")
        return {order: found.get(order, text) for order, text in texts.items()}

    def close(self) -> None:
        self._db.close()


class SearchIndex:
    """The index of the chat messages stored in the segments of ``db``, by delivery order.

    ``decoded`` is the store's own cache of decoded segments (segment -> rows), read here so that
    a search over what delivery just read decodes nothing again; searches keep their own few
    segments, decoded without the proofs, which must not push out the ones delivery and repairs
    are reading."""

    SEARCHED_SEGMENTS = 64

    def __init__(self, db: sqlite3.Connection, decoded: Mapping[int, list]) -> None:
        self._db = db
        self._decoded = decoded
        self._searched: OrderedDict[int, list] = OrderedDict()  # segment -> rows without proofs
        self.snippets = Snippets()
        self.written = False  # whether the transaction under way wrote to the index
        self._merging = True
        self._unmerged_commits = 0  # commits that indexed something since the index was last merged
        db.create_function("search_sender", 1, functools.partial(self._search_field, "sender"), deterministic=True)
        db.create_function("search_sent_at", 1, functools.partial(self._search_field, "sent_at"), deterministic=True)
        db.create_function("search_past_cut", 2, self._search_past_cut, deterministic=True)
        db.create_function("past_cut", 4, sql_past_cut, deterministic=True)

    def close(self) -> None:
        self.snippets.close()

    # -- made, rebuilt and opened --------------------------------------------------------

    @staticmethod
    def present(tables: set[str]) -> bool:
        """Whether a database with ``tables`` has the index as this version keeps it."""
        return {"message_search", "message_search_changed"} <= tables

    def build(self, path: Path) -> None:
        """Index every stored chat message (a data dir from before the index), in one transaction."""
        total = self._db.execute("SELECT COALESCE(SUM(count), 0) FROM segments").fetchone()[0]
        if total:
            log.info("building the search index of %s: %d messages", path, total)
        self._db.execute("BEGIN")
        self._db.execute("DROP TABLE IF EXISTS message_search")
        self._db.execute("DROP TABLE IF EXISTS message_search_changed")
        for statement in SEARCH_SCHEMA.split(";")[:-1]:
            self._db.execute(statement)
        self._set_automerge(AUTOMERGE)  # built in one go: merged as it goes
        done = reported = 0
        for _, gid, first_order, rows in read_segments(self._db, "1", ()):
            self.index_rows(first_order, rows)
            done += len(rows)
            if done - reported >= SEARCH_BUILD_REPORT:
                log.info("search index: %d of %d messages", done, total)
                reported = done
        self._db.commit()
        if total:
            log.info("search index built: %d messages", total)

    def reindex_offers(self) -> None:
        """A version-3 index holds file offers' whole texts: put their file names in their place.
        Only where it does: an older build that opened a version-4 store set it back to 3, and a
        contentless index handed a text it does not hold is damaged.  An offer's JSON has the words
        of its keys, which a file name alone hardly does."""
        changed = {order for (order,) in self._db.execute("SELECT delivery_order FROM message_search_changed")}
        for first_order, blob in self._db.execute("SELECT first_order, messages FROM segments"):  # one at a time
            if not any(mark in blob for mark in kinds.MARKS):  # most segments: no decoding
                continue
            for order, row in enumerate(msgpack.unpackb(blob, raw=False)[0], first_order):
                if kinds.kind_of(row[5]) == kinds.FILE_OFFER and order not in changed and self._db.execute(
                        "SELECT 1 FROM message_search WHERE message_search MATCH 'mime sha256 chunk root' AND rowid = ?",
                        (order,)).fetchone():
                    self.reindex(order, row[5], searched_text(row[5]), row[5])
        self._db.commit()

    def open_merging(self) -> None:
        """At open (the commit is the caller's): merge as it goes, as the index may hold a backlog it
        cannot count (a peer restarted while busy), until the first idle commit."""
        self._merging = True
        self._unmerged_commits = MERGE_BACKLOG
        self._set_automerge(AUTOMERGE)
        self._db.execute("INSERT INTO message_search (message_search, rank) VALUES ('crisismerge', ?)",
                         (CRISIS_MERGE,))

    # -- written with the messages --------------------------------------------------------

    def index_rows(self, first_order: int, rows: list) -> None:
        """Index a segment's rows of (sender, seqno, parent_sender, parent_seqno, name, text, ...)
        delivered from ``first_order`` on."""
        entries = [(order, row[5]) for order, row in enumerate(rows, first_order)]
        if any(text[:1] == "\x00" for _, text in entries):  # operations and file offers: see searched_text
            entries = [(order, searched) for order, text in entries if (searched := searched_text(text)) is not None]
        self._db.executemany("INSERT INTO message_search (rowid, text) VALUES (?, ?)", entries)
        self.written = True

    def indexed_text(self, order: int, stored_text: str) -> str | None:
        """The text the index holds for the message delivered as ``order``, stored as ``stored_text``."""
        changed = self._db.execute("SELECT text FROM message_search_changed WHERE delivery_order = ?",
                                   (order,)).fetchone()
        if changed is not None:
            return changed[0]
        return searched_text(stored_text)

    def reindex(self, order: int, old: str | None, new: str | None, stored_text: str) -> None:
        """Index ``new`` (None: nothing) for ``order`` in place of ``old``, what the index holds."""
        if old == new:
            return
        self.written = True
        if old is not None:
            self._db.execute("INSERT INTO message_search (message_search, rowid, text) VALUES ('delete', ?, ?)",
                             (order, old))
        if new is not None:
            self._db.execute("INSERT INTO message_search (rowid, text) VALUES (?, ?)", (order, new))
        if new == searched_text(stored_text):
            self._db.execute("DELETE FROM message_search_changed WHERE delivery_order = ?", (order,))
        else:
            self._db.execute("INSERT OR REPLACE INTO message_search_changed VALUES (?, ?)", (order, new))

    def forget_segment(self, segment: int) -> None:
        """A segment rewritten: what a search decoded of it is stale."""
        self._searched.pop(segment, None)

    def forget(self) -> None:
        """The transaction under way rolled back: nothing written, nothing decoded kept."""
        self.written = False
        self._searched.clear()

    # -- merging, in the store's commits ------------------------------------------------------

    def before_commit(self) -> None:
        """The store is about to commit: count a commit that indexed something, and past
        MERGE_BACKLOG of them in a row merge as it goes; a commit that indexed nothing merges a step."""
        if self.written:
            self._unmerged_commits += 1
            self._merging = True
            if self._unmerged_commits == MERGE_BACKLOG:  # never idle: merge as it goes, as FTS5 does
                self._set_automerge(AUTOMERGE)
        elif self._merging:
            self._merge_step()

    def _set_automerge(self, segments: int) -> None:
        self._db.execute("INSERT INTO message_search (message_search, rank) VALUES ('automerge', ?)", (segments,))

    def _merge_step(self) -> None:
        """A step of merging the index's b-trees, in the commit under way; once there is nothing
        left to merge (FTS5 then changes fewer than two rows), none until the index is written."""
        before = self._db.total_changes
        self._db.execute("INSERT INTO message_search (message_search, rank) VALUES ('merge', ?)", (IDLE_MERGE_PAGES,))
        if self._db.total_changes - before < 2:
            self._merging = False
            if self._unmerged_commits >= MERGE_BACKLOG:
                self._set_automerge(0)
            self._unmerged_commits = 0

    # -- searches ------------------------------------------------------------------------------

    def search(self, query: str, *, gid: str | None = None, sender: str | None = None,
               since: int | None = None, until: int | None = None, limit: int = 20, offset: int = 0,
               by_time: bool = False, cuts: Cuts = {}) -> list[SearchHit]:
        """Matches of ``query`` (FTS5 syntax) in the current text of chat messages, best first
        (FTS5's bm25 rank) or, ``by_time``, newest first; none past a removal's cut in ``cuts``."""
        where = "message_search MATCH ?"
        args: list = [query]
        # The index holds no column but the text: a match's group is its segment's, found by
        # delivery order; sender and time are read from the segment (a decode per segment touched).
        for test, value in (("(SELECT gid FROM segments WHERE first_order <= message_search.rowid "
                             "ORDER BY first_order DESC LIMIT 1) = ?", gid),
                            ("search_sender(rowid) = ?", sender), ("search_sent_at(rowid) >= ?", since),
                            ("search_sent_at(rowid) <= ?", until),
                            ("NOT search_past_cut(rowid, ?)", cuts_argument(cuts) if cuts else None)):
            if value is not None:
                where += f" AND {test}"
                args.append(value)
        order, rank = ("rowid DESC", "0.0") if by_time else ("rank, rowid DESC", "rank")
        try:
            if not by_time:
                # Ranking scores every match: a common word's 300,000 take half a second.  Only the
                # newest RELEVANCE_WINDOW matches are ranked, found first in rowid order (cheap).
                oldest = self._db.execute(
                    f"SELECT rowid FROM message_search WHERE {where} ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                    [*args, RELEVANCE_WINDOW - 1]).fetchone()
                if oldest is not None:
                    where += " AND rowid >= ?"
                    args.append(oldest[0])
            ranks = dict(self._db.execute(
                f"SELECT rowid, {rank} FROM message_search WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
                [*args, limit, offset]).fetchall())
        except sqlite3.OperationalError as exc:
            raise query_error(exc) from None
        found = [(order, self.message_at(order)) for order in ranks]
        messages = {order: (at[0], at[1], self.indexed_text(order, at[1][5])) for order, at in found if at}
        snippets = self.snippets.of(query, {order: text or "" for order, (_, _, text) in messages.items()})
        return [SearchHit(g, (row[0], row[1]), order, shown_sent_at(row[6], row[7]), snippets[order],
                          rank=ranks[order]) for order, (g, row, _) in messages.items()]

    def message_at(self, order: int) -> tuple[str, tuple] | None:
        """(gid, row without its proof) of the message delivered as ``order``."""
        found = self._db.execute("SELECT segment, gid, first_order FROM segments WHERE first_order <= ? "
                                 "ORDER BY first_order DESC LIMIT 1", (order,)).fetchone()
        if found is None:
            return None
        segment, gid, first_order = found
        rows = self._decoded.get(segment) or self._searched.get(segment)
        if rows is None:
            # Searches keep their own few segments, decoded without the proofs: they must not push
            # out the ones delivery and repairs are reading.
            (blob,) = self._db.execute("SELECT messages FROM segments WHERE segment = ?", (segment,)).fetchone()
            rows = self._searched[segment] = msgpack.unpackb(blob, raw=False)[0]
            if len(self._searched) > self.SEARCHED_SEGMENTS:
                self._searched.popitem(last=False)
        return (gid, rows[order - first_order]) if order - first_order < len(rows) else None

    def _search_past_cut(self, order: int, cuts: str) -> bool:
        """Whether the message delivered as ``order`` is past a removal's cut (:func:`sql_past_cut`)."""
        found = self.message_at(order)
        return found is not None and sql_past_cut(found[0], found[1][0], found[1][1], cuts)

    def _search_field(self, field: str, order: int) -> str | int | None:
        """The sender or shown time of the message delivered as ``order`` (search filters in SQL)."""
        found = self.message_at(order)
        if found is None:
            return None
        row = found[1]
        return row[0] if field == "sender" else shown_sent_at(row[6], row[7])

