"""Search everywhere (Ctrl+Shift+F): one query over the stored text of every group and direct
conversation (the store's search indexes).

What the user types becomes an FTS5 query of its words, all required, the last one a prefix
while it is being typed (:func:`query_of`).  The store's search runs on the middleware's thread;
its newest results are listed grouped by conversation, the one with the newest match first,
with the matched words marked; a direct conversation is titled with the peer's name, as the Direct
messages list names it.  Enter or a click on a result asks the main window to show that message in
its thread (``open_message``, the same path an ``m2mc://message/…`` link takes), or a direct
message in its conversation.
"""

from __future__ import annotations

import html
from typing import Callable, Mapping

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QAbstractItemView, QLabel, QLineEdit, QTreeWidgetItem, QVBoxLayout, QWidget

from ..middleware.mentions import shown_text
from ..middleware.names import shown
from ..middleware.store_api import MATCH_END, MATCH_START, SearchHit, search_words
from ..middleware.types import Mid

from .bridge import Backend
from .controllers.direct import Conversation
from .controllers.sessions import GroupSession
from .model.sessions import member_names
from .delegate import clock
from .resources import app_icon, icon
from .search_results import ResultHtmlRole, ResultList

RESULT_LIMIT = 100
TYPING_PAUSE_MS = 250  # a search runs once typing pauses this long (Enter runs it at once)
PREFIX_FROM = 3  # the word being typed matches as a prefix from this many letters (fewer match too much)
HitRole = Qt.ItemDataRole.UserRole + 1


def query_of(text: str) -> str | None:
    """The FTS5 query for what the user typed: its words (as the index cuts and folds them), all
    required, the last one also as a prefix; None when there is no word.  Folded words are plain
    FTS5 barewords, so nothing typed is ever a syntax error (no quotes, operators or columns)."""
    found = list(search_words(text))
    if not found:
        return None
    words = [word for _, _, word in found]
    if len(words[-1]) >= PREFIX_FROM and found[-1][1] == len(text):  # still being typed
        words[-1] += "*"
    return " ".join(words)


def marked_html(snippet: str) -> str:
    """``snippet`` as HTML, the matches (between MATCH_START and MATCH_END) in bold, of class "match"
    (:mod:`ui.search_results` colours them)."""
    escaped = html.escape(snippet)
    return (escaped.replace(MATCH_START, '<b class="match">')
            .replace(MATCH_END, "</b>").replace("\n", " "))


class SearchWindow(QWidget):
    """The Search everywhere window: a query field over results grouped by conversation."""

    def __init__(self, backend: Backend, sessions: Mapping[str, GroupSession],
                 open_message: Callable[[str, Mid], bool], conversations: Mapping[str, Conversation]) -> None:
        super().__init__(None, Qt.WindowType.Window)
        self.backend = backend
        self.sessions = sessions  # the groups' titles, and their senders' names
        self.conversations = conversations  # the direct conversations', by the peer's pid
        self.open_message = open_message
        self.setWindowTitle("Search everywhere — M2MC")
        self.setWindowIcon(app_icon())
        self.resize(640, 480)
        self.query_edit = QLineEdit(placeholderText="Search every group and direct message…", clearButtonEnabled=True)
        self.query_edit.textEdited.connect(self._typed)
        self.query_edit.returnPressed.connect(lambda: self._search_now(focus_results=True))
        self.query_edit.installEventFilter(self)
        self.status = QLabel(wordWrap=True)  # else its whole text (a long error) is the window's minimum width
        self.results = ResultList()
        self.results.setObjectName("searchResults")
        self.results.setHeaderHidden(True)
        self.results.setRootIsDecorated(False)
        self.results.setIndentation(12)
        self.results.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)  # rows of many lines
        self.results.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.results.itemActivated.connect(self._open)  # Enter, double click
        self.results.itemClicked.connect(self._open)
        self.results.currentItemChanged.connect(self._step_over_heading)
        self.results.installEventFilter(self)
        layout = QVBoxLayout(self)
        layout.addWidget(self.query_edit)
        layout.addWidget(self.status)
        layout.addWidget(self.results, 1)
        self._typing = QTimer(self, singleShot=True, interval=TYPING_PAUSE_MS)
        self._typing.timeout.connect(self._search_now)
        self._asked = 0  # the latest search asked: an older answer arriving late is dropped
        self.shown_query: str | None = None  # the query whose results are listed

    def show_search(self) -> None:
        """Show, raised, with the query selected for typing over (and its results brought up to date,
        the result last chosen still current: Down goes on from it)."""
        if self.query_edit.text():
            self._search_now(refresh=True)
        self.show()
        self.raise_()
        self.activateWindow()
        self.query_edit.setFocus()
        self.query_edit.selectAll()

    def eventFilter(self, watched, event) -> bool:
        if isinstance(event, QKeyEvent) and event.type() == QKeyEvent.Type.KeyPress:
            if watched is self.query_edit and event.key() == Qt.Key.Key_Down and self.results.topLevelItemCount():
                self._focus_results()
                return True
            if watched is self.results and event.key() == Qt.Key.Key_Up \
                    and self.results.currentItem() is next(iter(self.result_items()), None):
                self.query_edit.setFocus()  # back up to the query, as Down came down from it: to add a word
                return True
        return super().eventFilter(watched, event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() == Qt.Key.Key_Escape:
            self.close()
            return
        super().keyPressEvent(event)

    def _typed(self, _text: str) -> None:
        self._typing.start()

    def _search_now(self, focus_results: bool = False, refresh: bool = False) -> None:
        """Search for what is typed, unless its results are listed and not to be brought up to date
        (``refresh``); ``focus_results`` (Enter): the results then take the focus."""
        self._typing.stop()
        query = query_of(self.query_edit.text())
        if query is None:
            self._show(None, [])
            return
        if query == self.shown_query and not refresh:
            if focus_results:
                self._focus_results()
            return
        self._asked += 1
        asked = self._asked
        self.status.setText("Searching…")
        self.backend.call(
            # Newest first: a fraction of what ranking costs (a 3-letter prefix at 1,000,000 messages: 20
            # against 70 ms), and this runs on the middleware's thread, between deliveries.
            lambda peer: peer.search(query, limit=RESULT_LIMIT + 1, by_time=True, direct=True),  # one more: are there older ones?
            on_result=lambda found: self._answered(asked, query, found, focus_results),
            on_error=lambda exc: self._failed(asked, exc),
        )

    def _answered(self, asked: int, query: str, found: list[tuple[SearchHit, Mid]], focus_results: bool) -> None:
        if asked == self._asked:
            self._show(query, [hit for hit, _root in found])
            if focus_results and not self._typing.isActive():
                self._focus_results()

    def _failed(self, asked: int, exc: BaseException) -> None:
        if asked == self._asked:
            self.status.setText(f"Search failed: {exc}")

    def _show(self, query: str | None, hits: list[SearchHit]) -> None:
        current = self.results.currentItem()
        kept = current.data(0, HitRole) if current is not None and query == self.shown_query else None
        scrolled = self.results.verticalScrollBar().value()
        self.shown_query = query
        older = len(hits) > RESULT_LIMIT
        hits = hits[:RESULT_LIMIT]
        self.results.clear()
        if query is None:
            self.status.setText("")
            return
        groups: dict[str, QTreeWidgetItem] = {}
        titles: dict[str, str] = {}
        for hit in hits:
            group = groups.get(hit.gid)
            if group is None:
                group = groups[hit.gid] = QTreeWidgetItem(self.results)
                titles[hit.gid] = self.title_of(hit)
                group.setFlags(Qt.ItemFlag.ItemIsEnabled)  # a heading, not a result
                group.setIcon(0, icon("group" if hit.peer is None else "member"))  # a group, or one person
                font = group.font(0)
                font.setBold(True)
                group.setFont(0, font)
            item = QTreeWidgetItem(group)
            item.setData(0, HitRole, hit)
            sender, sent, snippet = self.sender_of(hit), clock(hit.sent_at), self.snippet_of(hit)
            item.setData(0, ResultHtmlRole, f"<b>{html.escape(sender)}</b> <span class='time'>{sent}</span>"
                                            f"<br>{marked_html(snippet)}")
            # What a screen reader says, and what typing in the list looks for.
            item.setText(0, f"{sender}, {sent}: {snippet.replace(MATCH_START, '').replace(MATCH_END, '')}")
        for gid, group in groups.items():
            count = group.childCount()
            group.setText(0, f"{titles[gid]} — {count} result{'s' if count != 1 else ''}")
        self.results.expandAll()
        if isinstance(kept, SearchHit):  # the same query's results brought up to date: the same place
            self._keep_current(kept, scrolled)
        total, conversations = len(hits), f"{len(groups)} conversation{'s' if len(groups) != 1 else ''}"
        if older:  # the older ones are cut: the headings count only those listed
            self.status.setText(f"The newest {total} results, in {conversations}; older ones are not listed")
        else:
            self.status.setText(f"{total} result{'s' if total != 1 else ''} in {conversations}" if hits else "No results")

    def title_of(self, hit: SearchHit) -> str:
        """The hit's group's title, or its direct conversation's peer's name."""
        if hit.peer is not None:
            conversation = self.conversations.get(hit.peer)
            return shown(conversation.name) if conversation is not None else hit.peer[:8]
        session = self.sessions.get(hit.gid)
        return session.title if session is not None else hit.gid

    def sender_of(self, hit: SearchHit) -> str:
        """The hit's author's name, as its conversation shows it."""
        if hit.peer is None:
            session = self.sessions.get(hit.gid)
            message = session.tree.message(hit.mid) if session is not None else None
            return message.sender_name if message is not None else hit.mid[0][:8]
        return self.direct_names(hit.peer).get(hit.mid[0], hit.mid[0][:8])

    def direct_names(self, peer: str) -> dict[str, str]:
        """pid -> name of the two in the conversation with ``peer``."""
        conversation = self.conversations.get(peer)
        return {self.backend.pid: self.backend.name, **({peer: shown(conversation.name)} if conversation is not None else {})}

    def snippet_of(self, hit: SearchHit) -> str:
        """The hit's snippet with mention tokens shown as @Name."""
        if hit.peer is not None:
            return shown_text(hit.snippet, self.direct_names(hit.peer))
        session = self.sessions.get(hit.gid)
        return shown_text(hit.snippet, member_names(session.view if session is not None else None))

    def result_items(self) -> list[QTreeWidgetItem]:
        """The listed results, in the order shown."""
        items = []
        for index in range(self.results.topLevelItemCount()):
            group = self.results.topLevelItem(index)
            if group is not None:
                items += [child for row in range(group.childCount()) if (child := group.child(row)) is not None]
        return items

    def _keep_current(self, hit: SearchHit, scrolled: int) -> None:
        item = next((item for item in self.result_items() if (found := item.data(0, HitRole)) is not None
                     and (found.gid, found.mid) == (hit.gid, hit.mid)), None)
        if item is None:
            return
        self.results.setCurrentItem(item)
        self.results.doItemsLayout()  # the rows' heights, for the scroll bar's range
        self.results.verticalScrollBar().setValue(scrolled)
        self.results.scrollToItem(item)  # if it has moved out of view

    def _focus_results(self) -> None:
        """The focus to the results: on the current one, else the first."""
        items = self.result_items()
        if items:
            if self.results.currentItem() not in items:
                self.results.setCurrentItem(items[0])
            self.results.setFocus()

    def _step_over_heading(self, current: QTreeWidgetItem | None, previous: QTreeWidgetItem | None) -> None:
        """The arrow keys go from result to result: a conversation's heading passes the move on."""
        if current is None or current.parent() is not None or not current.childCount():
            return
        items = self.result_items()
        heading_first = current.child(0)
        if heading_first is None:
            return
        first = items.index(heading_first)
        down = previous is None or previous not in items or items.index(previous) < first
        self.results.setCurrentItem(items[first] if down or first == 0 else items[first - 1])

    def _open(self, item: QTreeWidgetItem, _column: int = 0) -> None:
        hit = item.data(0, HitRole)
        if isinstance(hit, SearchHit):
            self.open_message(hit.gid, hit.mid)
