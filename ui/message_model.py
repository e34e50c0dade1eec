"""Qt models over one group's messages: the reply tree and the time-ordered list.

:class:`MessageTreeModel` is the thesis's DynaTree as a ``QAbstractItemModel``:
each message is a row under the message it answers.  Messages are only ever
added, so a node's row never changes and ``parent()`` is O(1).  New messages go
in with ``beginInsertRows`` (consecutive siblings in one call); only opening a
group with its whole history is a model reset.  The middleware delivers a
parent before its replies (S_b order), but the model does not rely on it: a
reply whose parent is unknown waits, invisible, until the parent arrives.

The model also keeps which messages are unread, and the arrival order that
:class:`TimelineModel` shows as a flat list in which each reply names what it
answers.

Both models show a window of the newest threads (messages): QTreeView lays
out every visible row again after each insert, asking the Python model about
each, so with 30,000 threads on show every incoming batch would stall the GUI
for a second.  Older threads stay in the model, hidden, until
:meth:`MessageTreeModel.show_older` (or :meth:`reveal`) inserts them at the top.
"""

from __future__ import annotations

from typing import Iterable

from PySide6.QtCore import QAbstractItemModel, QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt, Signal

from middleware.types import ChatMessage, Mid

MessageRole = Qt.ItemDataRole.UserRole + 1
UnreadRole = Qt.ItemDataRole.UserRole + 2
ParentMessageRole = Qt.ItemDataRole.UserRole + 3
DepthRole = Qt.ItemDataRole.UserRole + 4
SearchRole = Qt.ItemDataRole.UserRole + 5
OwnRole = Qt.ItemDataRole.UserRole + 6
ReplyCountRole = Qt.ItemDataRole.UserRole + 7

AnyIndex = QModelIndex | QPersistentModelIndex
ITEM_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable  # computed once: enum | is slow in Python
NO_FLAGS = Qt.ItemFlag.NoItemFlags
THREAD_WINDOW = 500
TIMELINE_WINDOW = 2000


class _Node:
    __slots__ = ("message", "parent", "children", "row", "depth")

    def __init__(self, message: ChatMessage | None, parent: "_Node | None", row: int) -> None:
        self.message = message
        self.parent = parent
        self.children: list[_Node] = []
        self.row = row
        self.depth = parent.depth + 1 if parent is not None else -1


class MessageTreeModel(QAbstractItemModel):
    """The reply tree of one group, one column; see the module docstring."""

    # (first, last) rows appended to ``arrival``; emitted after the tree rows are in.
    arrived = Signal(int, int)
    # mids whose unread flag changed
    read_state_changed = Signal(list)
    unread_count_changed = Signal(int)

    older_shown = Signal()

    def __init__(self, own_pid: str = "", parent=None, window: int = THREAD_WINDOW) -> None:
        super().__init__(parent)
        self.own_pid = own_pid
        self.window = window
        self.hidden_threads = 0  # the oldest threads, not (yet) rows of the model
        self._root = _Node(None, None, 0)
        self._nodes: dict[Mid, _Node] = {}
        self._waiting: dict[Mid, list[ChatMessage]] = {}  # parent mid -> replies that came first
        self.arrival: list[_Node] = []
        self.unread: set[Mid] = set()

    # -- feeding -------------------------------------------------------------------------

    def add_messages(self, messages: Iterable[ChatMessage], unread: bool = True) -> list[ChatMessage]:
        """Add delivered messages; returns those that became visible, in insertion order.

        Own messages are never unread.  When the model is empty (a group being
        opened) the whole batch goes in as one reset, which is what makes a
        100,000-message history open quickly.
        """
        ready = self._ready(messages)
        if not ready:
            return []
        if not self._nodes:
            self.beginResetModel()
            for message in ready:
                self._attach(message, unread)
            self.hidden_threads = max(0, len(self._root.children) - self.window)
            self.endResetModel()
            self.arrived.emit(0, len(self.arrival) - 1)
        else:
            first_arrival = len(self.arrival)
            start = 0
            while start < len(ready):
                parent_mid = ready[start].parent
                end = start + 1
                while end < len(ready) and ready[end].parent == parent_mid:
                    end += 1
                parent_node = self._nodes[parent_mid] if parent_mid is not None else self._root
                if not self._shown(parent_node):  # a reply in a hidden old thread: no rows to announce
                    for message in ready[start:end]:
                        self._attach(message, unread)
                    start = end
                    continue
                first = len(parent_node.children) - (self.hidden_threads if parent_node is self._root else 0)
                self.beginInsertRows(self._index_of(parent_node), first, first + end - start - 1)
                for message in ready[start:end]:
                    self._attach(message, unread)
                self.endInsertRows()
                start = end
            self.arrived.emit(first_arrival, len(self.arrival) - 1)
        if unread and any(m.sender != self.own_pid for m in ready):
            self.unread_count_changed.emit(len(self.unread))
        return ready

    def _ready(self, messages: Iterable[ChatMessage]) -> list[ChatMessage]:
        """The messages that can be shown now, parents before replies, without duplicates."""
        ready: list[ChatMessage] = []
        known = set()
        for message in messages:
            if message.mid in self._nodes or message.mid in known:
                continue
            parent = message.parent
            if parent is not None and parent not in self._nodes and parent not in known:
                waiting = self._waiting.setdefault(parent, [])
                if all(w.mid != message.mid for w in waiting):
                    waiting.append(message)
                continue
            pending = [message]
            while pending:
                current = pending.pop()
                ready.append(current)
                known.add(current.mid)
                released = self._waiting.pop(current.mid, [])
                pending.extend(reversed([r for r in released if r.mid not in self._nodes and r.mid not in known]))
        return ready

    def _attach(self, message: ChatMessage, unread: bool) -> None:
        parent_node = self._nodes[message.parent] if message.parent is not None else self._root
        node = _Node(message, parent_node, len(parent_node.children))
        parent_node.children.append(node)
        self._nodes[message.mid] = node
        self.arrival.append(node)
        if unread and message.sender != self.own_pid:
            self.unread.add(message.mid)

    def _shown(self, node: _Node) -> bool:
        if node is self._root:
            return True
        while node.parent is not self._root:
            node = node.parent
        return node.row >= self.hidden_threads

    def show_older(self, count: int | None = None) -> int:
        """Insert up to ``count`` (default: a window's worth) older threads at the top."""
        count = min(self.hidden_threads, count if count is not None else self.window)
        if count > 0:
            self.beginInsertRows(QModelIndex(), 0, count - 1)
            self.hidden_threads -= count
            self.endInsertRows()
            self.older_shown.emit()
        return count

    def hide_oldest(self, keep: int, spare: Mid | None = None) -> int:
        """Hide the oldest shown threads but the newest ``keep`` (and the thread of ``spare``).

        New threads keep adding top-level rows, and every row on show costs each
        re-layout; a reader following the newest talk loses nothing by this.
        """
        count = len(self._root.children) - self.hidden_threads - keep
        node = self._nodes.get(spare) if spare is not None else None
        if node is not None:
            while node.parent is not self._root:
                node = node.parent
            count = min(count, node.row - self.hidden_threads)
        if count <= 0:
            return 0
        self.beginRemoveRows(QModelIndex(), 0, count - 1)
        self.hidden_threads += count
        self.endRemoveRows()
        return count

    def reveal(self, mid: Mid) -> bool:
        """Make sure the message is a row (its old thread shown); False if unknown."""
        node = self._nodes.get(mid)
        if node is None:
            return False
        while node.parent is not self._root:
            node = node.parent
        if node.row < self.hidden_threads:
            self.show_older(self.hidden_threads - node.row)
        return True

    # -- queries ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def waiting_count(self) -> int:
        """Replies held here because their parent has not been added (the middleware holds its own)."""
        return sum(len(w) for w in self._waiting.values())

    def message(self, mid: Mid) -> ChatMessage | None:
        node = self._nodes.get(mid)
        return node.message if node is not None else None

    def index_for(self, mid: Mid) -> QModelIndex:
        node = self._nodes.get(mid)
        return self._index_of(node) if node is not None else QModelIndex()

    def message_at(self, index: AnyIndex) -> ChatMessage | None:
        return index.data(MessageRole) if index.isValid() else None

    def ancestors(self, mid: Mid) -> list[Mid]:
        """The mids from the thread's root down to the parent of ``mid``."""
        path = []
        node = self._nodes.get(mid)
        while node is not None and node.parent is not None and node.parent.message is not None:
            node = node.parent
            path.append(node.message.mid)
        return path[::-1]

    def unread_in_arrival_order(self) -> list[Mid]:
        if not self.unread:
            return []
        return [node.message.mid for node in self.arrival if node.message.mid in self.unread]

    # -- read state ----------------------------------------------------------------------

    def mark_read(self, mids: Iterable[Mid]) -> None:
        changed = [mid for mid in mids if mid in self.unread]
        if not changed:
            return
        self.unread.difference_update(changed)
        for mid in changed:
            index = self.index_for(mid)
            self.dataChanged.emit(index, index, [UnreadRole])
        self.read_state_changed.emit(changed)
        self.unread_count_changed.emit(len(self.unread))

    def mark_all_read(self) -> None:
        self.mark_read(list(self.unread))

    # -- QAbstractItemModel ----------------------------------------------------------------

    # QTreeView calls these for every visible row on every re-layout, so they do as little
    # Python work as they can: our indexes are all column 0 and carry their node.

    def _node(self, index: AnyIndex) -> _Node:
        return index.internalPointer() if index.isValid() else self._root

    def _index_of(self, node: _Node) -> QModelIndex:
        if node is self._root:
            return QModelIndex()
        if node.parent is self._root:
            row = node.row - self.hidden_threads
            return self.createIndex(row, 0, node) if row >= 0 else QModelIndex()
        if not self._shown(node):
            return QModelIndex()
        return self.createIndex(node.row, 0, node)

    def index(self, row: int, column: int = 0, parent: AnyIndex = QModelIndex()) -> QModelIndex:
        if parent.isValid():
            children = parent.internalPointer().children
            offset = 0
        else:
            children = self._root.children
            offset = self.hidden_threads
        if column or row < 0 or row + offset >= len(children):
            return QModelIndex()
        return self.createIndex(row, 0, children[row + offset])

    def parent(self, index: AnyIndex) -> QModelIndex:  # noqa: A003 - Qt's name
        if not index.isValid():
            return QModelIndex()
        parent_node = index.internalPointer().parent
        if parent_node is self._root:
            return QModelIndex()
        return self._index_of(parent_node)

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:
        if parent.isValid():
            return len(parent.internalPointer().children) if parent.column() == 0 else 0
        return len(self._root.children) - self.hidden_threads

    def hasChildren(self, parent: AnyIndex = QModelIndex()) -> bool:
        # One call instead of Qt's rowCount() and columnCount() per row.
        if parent.isValid():
            return len(parent.internalPointer().children) > 0 and parent.column() == 0
        return len(self._root.children) > self.hidden_threads

    def columnCount(self, parent: AnyIndex = QModelIndex()) -> int:
        return 1

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        return ITEM_FLAGS if index.isValid() else NO_FLAGS

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        node: _Node = index.internalPointer()
        return _message_data(node.message, role, self, node)


class TimelineModel(QAbstractListModel):
    """The same messages as a flat list in arrival (delivery) order."""

    def __init__(self, tree: MessageTreeModel, parent=None, window: int = TIMELINE_WINDOW) -> None:
        super().__init__(parent)
        self.tree = tree
        self.window = window
        self.hidden = 0  # the oldest messages, not (yet) rows
        self._count = 0  # arrivals known to this model, hidden ones included
        self._rows: dict[Mid, int] = {}
        tree.modelAboutToBeReset.connect(self.beginResetModel)
        tree.modelReset.connect(self._after_reset)
        tree.arrived.connect(self._on_arrived)
        tree.read_state_changed.connect(self._on_read_changed)

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

    def index_for(self, mid: Mid) -> QModelIndex:
        row = self._rows.get(mid)
        return self.index(row - self.hidden) if row is not None and row >= self.hidden else QModelIndex()

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else self._count - self.hidden

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        return ITEM_FLAGS if index.isValid() else NO_FLAGS

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= self._count - self.hidden:
            return None
        node = self.tree.arrival[index.row() + self.hidden]
        if role == DepthRole:
            return 0
        return _message_data(node.message, role, self.tree, node)


def _message_data(message: ChatMessage, role: int, tree: MessageTreeModel, node: _Node):
    if role == Qt.ItemDataRole.DisplayRole:
        return message.text
    if role == MessageRole:
        return message
    # Flags are ints, not bools: PySide6 6.12 on Python 3.11 mis-counts references to
    # True/False returned from data() at high call rates ("bool_dealloc" at exit).
    if role == UnreadRole:
        return int(message.mid in tree.unread)
    if role == SearchRole:
        return f"{message.sender_name}\n{message.text}"
    if role == ParentMessageRole:
        return node.parent.message if node.parent is not None else None
    if role == DepthRole:
        return node.depth
    if role == OwnRole:
        return int(message.sender == tree.own_pid)
    if role == ReplyCountRole:
        return len(node.children)
    if role == Qt.ItemDataRole.ToolTipRole:
        return f"{message.sender_name} ({message.sender[:8]}…), message {message.mid[1]}"
    return None
