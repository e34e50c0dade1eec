"""Qt models over one group's messages: the reply tree, the time-ordered list, the threads list and one thread.

The threads list reads the store (:class:`ThreadListModel`), and so does one thread opened on its
own (:class:`StoredThreadModel`): neither needs the whole history in memory.

The messages themselves, their reply tree, the read state and the window of shown
threads are a Qt-free :class:`~ui.message_tree.MessageTree`; the models here only
adapt it, as napari's Qt models adapt its evented ones.  :class:`MessageTreeModel`
turns each change the tree tells into the matching ``beginInsertRows``/``endInsertRows``
(consecutive siblings in one call; only opening a group with its whole history is a
reset), and ``parent()`` is O(1) since a node's row never changes.
:class:`TimelineModel` shows the arrival order as a flat list in which each reply
names what it answers.

Both show a window of the newest threads (messages): QTreeView lays out every
visible row again after each insert, asking the Python model about each, so with
30,000 threads on show every incoming batch would stall the GUI for a second.
Older threads stay in the tree, hidden, until ``show_older`` (or ``reveal``)
inserts them at the top.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

from PySide6.QtCore import (QAbstractItemModel, QAbstractListModel, QModelIndex, QObject, QPersistentModelIndex, Qt,
                            QTimer, Signal)

from ..middleware.files import readable_text
from ..middleware.kinds import CHAT, kind_of
from ..middleware.store_api import StoredThread, in_branch
from ..middleware.types import ChatMessage, Mid
from .clock import clock
from .message_tree import MessageTree, Node
from .notices import is_notice, notice_sentence, pinned_target

MessageRole = Qt.ItemDataRole.UserRole + 1
UnreadRole = Qt.ItemDataRole.UserRole + 2
ParentMessageRole = Qt.ItemDataRole.UserRole + 3
DepthRole = Qt.ItemDataRole.UserRole + 4
SearchRole = Qt.ItemDataRole.UserRole + 5
OwnRole = Qt.ItemDataRole.UserRole + 6
ReplyCountRole = Qt.ItemDataRole.UserRole + 7
ThreadRole = Qt.ItemDataRole.UserRole + 8  # the threads list: a ThreadSummary

AnyIndex = QModelIndex | QPersistentModelIndex
ITEM_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable  # computed once: enum | is slow in Python
NO_FLAGS = Qt.ItemFlag.NoItemFlags
TIMELINE_WINDOW = 600
THREAD_LIST_PAGE = 100  # threads the list asks the store for at a time
THREAD_LIST_REFRESH_MS = 300  # arrivals ask for the list's first page again at most this often



class NodeRows:
    """One column, and data read off the :class:`Node` each index carries (the tree and one thread)."""

    tree: MessageTree

    def columnCount(self, parent: AnyIndex = QModelIndex()) -> int:
        return 1

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        # A notice is not selectable, and disabled so that the keyboard passes over it (QTreeView skips
        # disabled rows); the view still follows a click on its link.
        return ITEM_FLAGS if index.isValid() and not is_notice(index.internalPointer().message) else NO_FLAGS

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if not index.isValid():
            return None
        node: Node = index.internalPointer()
        return _message_data(node.message, role, self.tree, node)


class MessageTreeModel(NodeRows, QAbstractItemModel):
    """A :class:`~ui.message_tree.MessageTree` as a one-column Qt model; see the module docstring.

    The tree tells each change before and after it; this model passes each on as the
    matching ``begin*``/``end*`` call or signal, and holds no state of its own.
    """

    # (first, last) rows appended to ``arrival``; emitted after the tree rows are in.
    arrived = Signal(int, int)
    # mids whose unread flag changed
    read_state_changed = Signal(list)
    updated = Signal(list)  # mids whose message was replaced (edited, deleted, reactions, pinned)
    unread_count_changed = Signal(int)

    older_shown = Signal()
    older_arrived = Signal(int)  # this many messages were put before every one held (a page of scroll-back)

    def __init__(self, tree: MessageTree, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tree = tree
        self._top = tree.top
        tree.listener = self

    # -- what the tree tells ----------------------------------------------------------------

    def tree_resetting(self) -> None:
        self.beginResetModel()

    def tree_reset(self) -> None:
        self.endResetModel()

    def rows_inserting(self, parent: Node, first: int, last: int) -> None:
        self.beginInsertRows(self._index_of(parent), first, last)

    def rows_inserted(self) -> None:
        self.endInsertRows()

    def rows_removing(self, parent: Node, first: int, last: int) -> None:
        self.beginRemoveRows(self._index_of(parent), first, last)

    def rows_removed(self) -> None:
        self.endRemoveRows()

    def node_changed(self, node: Node, read_state_only: bool) -> None:
        index = self._index_of(node)
        if index.isValid():
            if read_state_only:
                self.dataChanged.emit(index, index, [UnreadRole])
            else:
                self.dataChanged.emit(index, index)

    def messages_arrived(self, first: int, last: int) -> None:
        self.arrived.emit(first, last)

    def read_marks_changed(self, mids: list[Mid]) -> None:
        self.read_state_changed.emit(mids)

    def messages_updated(self, mids: list[Mid]) -> None:
        self.updated.emit(mids)

    def unread_total_changed(self, count: int) -> None:
        self.unread_count_changed.emit(count)

    def older_threads_shown(self) -> None:
        self.older_shown.emit()

    def older_messages_added(self, count: int) -> None:
        self.older_arrived.emit(count)

    # -- indexes ----------------------------------------------------------------------------

    def index_for(self, mid: Mid) -> QModelIndex:
        node = self.tree.node(mid)
        return self._index_of(node) if node is not None else QModelIndex()

    def message_at(self, index: AnyIndex) -> ChatMessage | None:
        return index.data(MessageRole) if index.isValid() else None

    # -- QAbstractItemModel ----------------------------------------------------------------

    # QTreeView calls these for every visible row on every re-layout, so they do as little
    # Python work as they can: our indexes are all column 0 and carry their node.

    def _index_of(self, node: Node) -> QModelIndex:
        if node is self._top:
            return QModelIndex()
        if node.parent is self._top:
            row = node.row - self.tree.hidden_threads
            return self.createIndex(row, 0, node) if row >= 0 else QModelIndex()
        if not self.tree.shown(node):
            return QModelIndex()
        return self.createIndex(node.row, 0, node)

    def index(self, row: int, column: int = 0, parent: AnyIndex = QModelIndex()) -> QModelIndex:
        if parent.isValid():
            children = parent.internalPointer().children
            offset = 0
        else:
            children = self._top.children
            offset = self.tree.hidden_threads
        if column or row < 0 or row + offset >= len(children):
            return QModelIndex()
        return self.createIndex(row, 0, children[row + offset])

    # Qt's parent(index); QObject's parent() is never asked of a model.
    def parent(self, index: AnyIndex) -> QModelIndex:  # type: ignore[override]  # noqa: A003 - Qt's name
        if not index.isValid():
            return QModelIndex()
        parent_node = index.internalPointer().parent
        if parent_node is self._top:
            return QModelIndex()
        return self._index_of(parent_node)

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:
        if parent.isValid():
            return len(parent.internalPointer().children) if parent.column() == 0 else 0
        return len(self._top.children) - self.tree.hidden_threads

    def hasChildren(self, parent: AnyIndex = QModelIndex()) -> bool:
        # One call instead of Qt's rowCount() and columnCount() per row.
        if parent.isValid():
            return len(parent.internalPointer().children) > 0 and parent.column() == 0
        return len(self._top.children) > self.tree.hidden_threads


class TimelineModel(QAbstractListModel):
    """The same messages as a flat list in arrival (delivery) order."""

    def __init__(self, tree_model: MessageTreeModel, parent: QObject | None = None,
                 window: int = TIMELINE_WINDOW) -> None:
        super().__init__(parent)
        self.tree = tree_model.tree
        self.window = window
        self.hidden = 0  # the oldest messages, not (yet) rows
        self._count = 0  # arrivals known to this model, hidden ones included
        self._rows: dict[Mid, int] = {}
        tree_model.modelAboutToBeReset.connect(self.beginResetModel)
        tree_model.modelReset.connect(self._after_reset)
        tree_model.arrived.connect(self._on_arrived)
        tree_model.read_state_changed.connect(self._on_read_changed)
        tree_model.updated.connect(self._on_updated)
        tree_model.older_arrived.connect(self._on_older)

    def _on_older(self, count: int) -> None:
        # Older messages come in hidden, above the rows: show_older() makes them rows.
        self._rows = {node.message.mid: row for row, node in enumerate(self.tree.arrival)}
        self._count += count
        self.hidden += count

    def _after_reset(self) -> None:
        # The tree's reset fills ``arrival``; ``arrived`` then reports the new rows.
        self._count = 0
        self.hidden = 0
        self._rows.clear()
        self.endResetModel()

    def _on_arrived(self, first: int, last: int) -> None:
        if last < first:
            return
        for row in range(self._count, last + 1):
            self._rows[self.tree.arrival[row].message.mid] = row
        hidden = max(0, last + 1 - self.window) if self._count == 0 else self.hidden  # opening: newest only
        self.beginInsertRows(QModelIndex(), max(0, self._count - hidden), last - hidden)
        self.hidden = hidden
        self._count = last + 1
        self.endInsertRows()

    def show_older(self, count: int | None = None) -> int:
        count = min(self.hidden, count if count is not None else self.window)
        if count > 0:
            self.beginInsertRows(QModelIndex(), 0, count - 1)
            self.hidden -= count
            self.endInsertRows()
        return count

    def hide_oldest(self, keep: int, spare: Mid | None = None) -> int:
        """Hide the oldest shown rows but the newest ``keep`` (and from ``spare`` on)."""
        count = self._count - self.hidden - keep
        row = self._rows.get(spare) if spare is not None else None
        if row is not None:
            count = min(count, row - self.hidden)
        if count <= 0:
            return 0
        self.beginRemoveRows(QModelIndex(), 0, count - 1)
        self.hidden += count
        self.endRemoveRows()
        return count

    def reveal(self, mid: Mid) -> bool:
        row = self._rows.get(mid)
        if row is None:
            return False
        if row < self.hidden:
            self.show_older(self.hidden - row)
        return True

    def _on_read_changed(self, mids: list) -> None:
        for mid in mids:
            index = self.index_for(mid)
            if index.isValid():
                self.dataChanged.emit(index, index, [UnreadRole])

    def _on_updated(self, mids: list) -> None:
        for mid in mids:
            index = self.index_for(mid)
            if index.isValid():
                self.dataChanged.emit(index, index)

    def index_for(self, mid: Mid) -> QModelIndex:
        row = self._rows.get(mid)
        return self.index(row - self.hidden) if row is not None and row >= self.hidden else QModelIndex()

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else self._count - self.hidden

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        if not index.isValid() or index.row() >= self._count - self.hidden:
            return NO_FLAGS
        return NO_FLAGS if is_notice(self.tree.arrival[index.row() + self.hidden].message) else ITEM_FLAGS

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= self._count - self.hidden:
            return None
        node = self.tree.arrival[index.row() + self.hidden]
        if role == DepthRole:
            return 0
        return _message_data(node.message, role, self.tree, node)


def _message_data(message: ChatMessage, role: int, tree: MessageTree, node: Node) -> object:
    if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.AccessibleTextRole) and is_notice(message):
        author = "You" if message.sender == tree.own_pid else message.sender_name
        return notice_sentence(message, author, tree.message(pinned_target(message) or ("", 0)), {})
    if role == Qt.ItemDataRole.DisplayRole:  # a file offer as its caption, not JSON
        return message.text if kind_of(message.text) == CHAT else readable_text(message.text, {})  # as its kind shows
    if role == Qt.ItemDataRole.AccessibleTextRole:  # what a screen reader reads for the row
        return spoken(message, tree, len(node.children))
    if role == MessageRole:
        return message
    # Flags are ints, not bools: PySide6 6.12 on Python 3.11 mis-counts references to
    # True/False returned from data() at high call rates ("bool_dealloc" at exit).
    if role == UnreadRole:
        return int(message.mid in tree.unread)
    if role == SearchRole:
        return f"{message.sender_name}\n{message.text}"
    if role == ParentMessageRole:
        shown = node.parent.message if node.parent is not None else None  # the top node's is None
        if shown is None and message.parent is not None:  # its parent is not held (an older page)
            return tree.absent_parents.get(message.parent)
        return shown
    if role == DepthRole:
        return node.depth
    if role == OwnRole:
        return int(message.sender == tree.own_pid)
    if role == ReplyCountRole:
        return len(node.children)
    return None  # no tooltip over the text: the time and the reactions have their own (ui.delegate)


SPOKEN_TEXT = 200  # characters of a message a screen reader reads with its row


def spoken(message: ChatMessage, tree: MessageTree, replies: int) -> str:
    """A message's row as a screen reader names it: "Message from Ann, 14:09: the walrus report…,
    2 replies, pinned, unread"."""
    text = message.text if kind_of(message.text) == CHAT else readable_text(message.text, {})
    text = text if len(text) <= SPOKEN_TEXT else text[:SPOKEN_TEXT - 1] + "…"
    who = "you" if message.sender == tree.own_pid else message.sender_name
    parts = [f"{'Reply' if message.parent is not None else 'Message'} from {who}, {clock(message.shown_at)}: "
             + ("deleted" if message.deleted else text)]
    if replies:
        parts.append(f"{replies} repl{'ies' if replies != 1 else 'y'}")
    if message.pinned:
        parts.append("pinned")
    if message.mid in tree.unread:
        parts.append("unread")
    return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One line of the threads list."""

    root: ChatMessage
    replies: int
    participants: tuple[str, ...]  # names, the root's sender first
    unread: int
    last: ChatMessage  # the thread's latest message by arrival


ThreadPages = Callable[[int | None, int, Callable[[list[StoredThread]], None]], None]
"""``fetch(before, limit, done)``: ask the store for a page of threads (PeerStore.threads); ``done`` gets it."""


class ThreadListModel(QAbstractListModel):
    """The group's threads from the store, the most recently active first, a page at a time.

    The store counts every thread, whatever part of the history the tree holds: the first
    page comes at once, later ones as the list is scrolled (``fetchMore``).  Arrivals ask for
    the first page again (coalesced): threads that moved come to the top, the rest keep
    their rows.  Unread counts are the tree's (what the reader can see and mark).
    """

    def __init__(self, tree_model: MessageTreeModel, fetch: ThreadPages, parent: QObject | None = None,
                 page: int = THREAD_LIST_PAGE) -> None:
        super().__init__(parent)
        self.tree = tree_model.tree
        self.fetch = fetch
        self.page = page
        self._rows: list[ThreadSummary] = []
        self._complete = False
        self._fetching = False
        self._refresh = QTimer(self, singleShot=True, interval=THREAD_LIST_REFRESH_MS)
        self._refresh.timeout.connect(self.refresh)
        # Started by the first arrival and left to run: restarted by each, it never fired while messages
        # came more often than its interval.
        tree_model.arrived.connect(lambda *_args: self._refresh.isActive() or self._refresh.start())
        tree_model.read_state_changed.connect(self._on_changed)
        tree_model.updated.connect(self._on_changed)  # a root's text may have changed

    def refresh(self) -> None:
        """Ask for the first page again; what it holds replaces those threads' rows, on top."""
        self.fetch(None, self.page, self._on_first_page)

    def _on_first_page(self, threads: list[StoredThread]) -> None:
        fresh = [self._summary(thread) for thread in threads]
        if not self._rows:
            if fresh:
                self.beginInsertRows(QModelIndex(), 0, len(fresh) - 1)
                self._rows = fresh
                self.endInsertRows()
            self._complete = len(threads) < self.page
            return
        oldest = fresh[-1].last.order if len(threads) == self.page else 0
        moved = {summary.root.mid for summary in fresh}
        kept = [row for row in self._rows if row.root.mid not in moved and row.last.order < oldest]
        self.layoutAboutToBeChanged.emit()
        old = self._rows
        self._rows = fresh + kept
        position = {summary.root.mid: row for row, summary in enumerate(self._rows)}
        for index in self.persistentIndexList():
            row = position.get(old[index.row()].root.mid, -1)
            self.changePersistentIndex(index, self.index(row) if row >= 0 else QModelIndex())
        self.layoutChanged.emit()

    def canFetchMore(self, parent: AnyIndex = QModelIndex()) -> bool:
        return not parent.isValid() and not self._complete and not self._fetching and bool(self._rows)

    def fetchMore(self, parent: AnyIndex = QModelIndex()) -> None:
        if not self.canFetchMore(parent):
            return
        self._fetching = True
        self.fetch(self._rows[-1].last.order, self.page, self._on_more)

    def _on_more(self, threads: list[StoredThread]) -> None:
        self._fetching = False
        self._complete = len(threads) < self.page
        listed = {summary.root.mid for summary in self._rows}
        more = [self._summary(thread) for thread in threads if thread.root.mid not in listed]
        if more:
            self.beginInsertRows(QModelIndex(), len(self._rows), len(self._rows) + len(more) - 1)
            self._rows += more
            self.endInsertRows()

    def _summary(self, thread: StoredThread) -> ThreadSummary:
        node = self.tree.node(thread.root.mid)
        held = node is not None and node.root is node and node.senders
        names = tuple(node.senders.values()) if held and node is not None and node.senders else tuple(
            dict.fromkeys((thread.root.sender_name, thread.last.sender_name)))
        return ThreadSummary(thread.root, thread.replies, names, 0, thread.last)

    def _unread(self, summary: ThreadSummary) -> int:
        node = self.tree.node(summary.root.mid)
        return node.unread if node is not None and node.root is node else 0

    def _on_changed(self, mids: list) -> None:
        if self._rows:
            self.dataChanged.emit(self.index(0), self.index(len(self._rows) - 1))

    def row_of(self, root_mid: Mid) -> int:
        for row, summary in enumerate(self._rows):
            if summary.root.mid == root_mid:
                return row
        return -1

    def summary(self, row: int) -> ThreadSummary:
        summary = self._rows[row]
        node = self.tree.node(summary.root.mid)
        message = node.message if node is not None else summary.root  # the tree's is the latest (edits)
        return replace(summary, root=message, unread=self._unread(summary))

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        return ITEM_FLAGS if index.isValid() else NO_FLAGS

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return self.summary(index.row()).root.text
        if role == Qt.ItemDataRole.AccessibleTextRole:
            summary = self.summary(index.row())
            root = summary.root
            text = root.text if kind_of(root.text) == CHAT else readable_text(root.text, {})
            unread = f", {summary.unread} unread" if summary.unread else ""
            return (f"Thread from {root.sender_name}: {text[:SPOKEN_TEXT]}, {summary.replies} "
                    f"repl{'ies' if summary.replies != 1 else 'y'}{unread}")
        if role == MessageRole:
            return self.summary(index.row()).root
        if role == ThreadRole:
            return self.summary(index.row())
        if role == UnreadRole:
            return self._unread(self._rows[index.row()])
        return None


class StoredThreadModel(MessageTreeModel):
    """One thread read from the store (PeerStore.thread), on a tree of its own: its root is the only
    top-level row, whether or not the group's tree holds it.

    The session feeds it what arrives in the thread (:meth:`add_live`) and what changes
    (``tree.update_messages``); reading it marks its own tree, whose read marks go to the
    store like the group's.
    """

    def __init__(self, messages: list[ChatMessage], own_pid: str, unread: Iterable[Mid] = (),
                 parent: QObject | None = None) -> None:
        if not messages:
            raise ValueError("a thread holds at least its root")
        super().__init__(MessageTree(own_pid, window=len(messages) + 1_000_000), parent)
        self.tree.add_messages(messages, unread=False)
        self.tree.set_unread(unread)
        self.root = self.tree.top.children[0]

    def add_live(self, messages: Iterable[ChatMessage], unread: bool = True) -> list[ChatMessage]:
        """Add the arrivals that answer a message of this thread (an answer to an answer in the same batch too)."""
        members = {node.message.mid for node in self.tree.arrival}
        mine = [m for m in messages if m.parent is not None and in_branch(m, members)]
        return self.tree.add_messages(mine, unread) if mine else []


