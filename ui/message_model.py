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

from dataclasses import dataclass
from typing import Iterable

from PySide6.QtCore import QAbstractItemModel, QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt, Signal

from ..middleware.types import ChatMessage, Mid

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
THREAD_WINDOW = 200  # scrolled by pixels, every shown row costs each re-layout
TIMELINE_WINDOW = 600
THREAD_LIST_LIMIT = 1000  # the threads list shows the most recently active ones


class _Node:
    # A thread's root also keeps the thread's figures: replies, senders, unread and the
    # arrival index of its latest message (what the threads list sorts by).
    __slots__ = ("message", "parent", "children", "row", "depth", "root", "replies", "senders", "unread", "last")

    def __init__(self, message: ChatMessage | None, parent: "_Node | None", row: int) -> None:
        self.message = message
        self.parent = parent
        self.children: list[_Node] = []
        self.row = row
        self.depth = parent.depth + 1 if parent is not None else -1
        self.root = self if parent is None or parent.message is None else parent.root
        self.replies = 0
        self.senders: dict[str, str] | None = None
        self.unread = 0
        self.last = 0


class _NodeRows:
    """One column, and data read off the ``_Node`` each index carries (the tree and one thread)."""

    def columnCount(self, parent: AnyIndex = QModelIndex()) -> int:
        return 1

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        return ITEM_FLAGS if index.isValid() else NO_FLAGS

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        node: _Node = index.internalPointer()
        return _message_data(node.message, role, self.tree, node)


class MessageTreeModel(_NodeRows, QAbstractItemModel):
    """The reply tree of one group, one column; see the module docstring."""

    # (first, last) rows appended to ``arrival``; emitted after the tree rows are in.
    arrived = Signal(int, int)
    # mids whose unread flag changed
    read_state_changed = Signal(list)
    updated = Signal(list)  # mids whose message was replaced (edited, deleted, reactions, pinned)
    unread_count_changed = Signal(int)

    older_shown = Signal()

    def __init__(self, own_pid: str = "", parent=None, window: int = THREAD_WINDOW) -> None:
        super().__init__(parent)
        self.tree = self  # what _NodeRows reads unread state and ownership from
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

    def update_messages(self, messages: Iterable[ChatMessage]) -> list[Mid]:
        """Replace known messages by their new state (operations: edits, deletes, reactions, pins).

        A row's place never changes, so this is a data change, not a move.  A
        message still waiting for its parent is updated where it waits.
        """
        changed: list[Mid] = []
        for message in messages:
            node = self._nodes.get(message.mid)
            if node is None:
                waiting = self._waiting.get(message.parent, [])
                for position, held in enumerate(waiting):
                    if held.mid == message.mid:
                        waiting[position] = message._replace(order=held.order)
                continue
            node.message = message._replace(order=node.message.order)
            changed.append(message.mid)
            index = self._index_of(node)
            if index.isValid():
                self.dataChanged.emit(index, index)
        if changed:
            self.updated.emit(changed)
        return changed

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
        root = node.root
        root.last = len(self.arrival)
        if root is node:
            root.senders = {message.sender: message.sender_name}
        else:
            root.replies += 1
            root.senders.setdefault(message.sender, message.sender_name)
        self.arrival.append(node)
        if unread and message.sender != self.own_pid:
            self.unread.add(message.mid)
            root.unread += 1

    def _shown(self, node: _Node) -> bool:
        return node is self._root or node.root.row >= self.hidden_threads

    def show_older(self, count: int | None = None) -> int:
        """Insert up to ``count`` (default: a window's worth) older threads at the top."""
        count = min(self.hidden_threads, count if count is not None else self.window)
        if count > 0:
            self.beginInsertRows(QModelIndex(), 0, count - 1)
            self.hidden_threads -= count
            self.endInsertRows()
            self.older_shown.emit()
        return count

    def hide_oldest(self, keep: int, spare: Mid | Iterable[Mid | None] | None = None) -> int:
        """Hide the oldest shown threads but the newest ``keep`` (and the threads of ``spare``).

        New threads keep adding top-level rows, and every row on show costs each
        re-layout; a reader following the newest talk loses nothing by this.
        """
        count = len(self._root.children) - self.hidden_threads - keep
        spared = [spare] if spare is None or isinstance(spare, tuple) else list(spare)
        for mid in spared:
            node = self._nodes.get(mid) if mid is not None else None
            if node is not None:
                count = min(count, node.root.row - self.hidden_threads)
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
        if node.root.row < self.hidden_threads:
            self.show_older(self.hidden_threads - node.root.row)
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

    def thread_of(self, mid: Mid) -> Mid | None:
        """The mid of the root of ``mid``'s thread."""
        node = self._nodes.get(mid)
        return node.root.message.mid if node is not None else None

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
            node = self._nodes[mid]
            node.root.unread -= 1
            index = self._index_of(node)
            if index.isValid():
                self.dataChanged.emit(index, index, [UnreadRole])
        self.read_state_changed.emit(changed)
        self.unread_count_changed.emit(len(self.unread))

    def set_unread(self, mids: Iterable[Mid]) -> None:
        """Mark known messages of others unread (restoring the read state stored for a group)."""
        added = [mid for mid in mids if mid in self._nodes and mid not in self.unread
                 and self._nodes[mid].message.sender != self.own_pid]
        if not added:
            return
        self.unread.update(added)
        for mid in added:
            node = self._nodes[mid]
            node.root.unread += 1
            index = self._index_of(node)
            if index.isValid():
                self.dataChanged.emit(index, index, [UnreadRole])
        self.read_state_changed.emit(added)
        self.unread_count_changed.emit(len(self.unread))

    def node(self, mid: Mid) -> _Node | None:
        return self._nodes.get(mid)

    def roots(self) -> list[_Node]:
        return self._root.children

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
        tree.updated.connect(self._on_updated)

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


@dataclass(frozen=True, slots=True)
class ThreadSummary:
    """One line of the threads list."""

    root: ChatMessage
    replies: int
    participants: tuple[str, ...]  # names, the root's sender first
    unread: int
    last: ChatMessage  # the thread's latest message by arrival


class ThreadListModel(QAbstractListModel):
    """The group's threads, the most recently active first, following the tree live.

    At most ``limit`` threads are rows; an old thread that gets a reply comes
    back at the top.  A batch of arrivals costs one insert at the top for the
    threads that are new to the list and one layout change to bring the others
    up, whatever the number of threads in the group.
    """

    def __init__(self, tree: MessageTreeModel, parent=None, limit: int = THREAD_LIST_LIMIT) -> None:
        super().__init__(parent)
        self.tree = tree
        self.limit = limit
        self._rows: list[_Node] = []
        tree.modelReset.connect(self._rebuild)
        tree.arrived.connect(self._on_arrived)
        tree.read_state_changed.connect(self._on_read_changed)
        tree.updated.connect(self._on_read_changed)  # a root's text may have changed
        self._rebuild()

    def _rebuild(self) -> None:
        self.beginResetModel()
        self._rows = sorted(self.tree.roots(), key=lambda node: node.last, reverse=True)[: self.limit]
        self.endResetModel()

    def _on_arrived(self, first: int, last: int) -> None:
        if last < first or first == 0:  # from 0: the tree was just filled by a reset, rebuilt already
            return
        touched: list[_Node] = []  # most recent first
        seen: set[int] = set()
        for node in reversed(self.tree.arrival[first:last + 1]):
            root = node.root
            if id(root) not in seen:
                seen.add(id(root))
                touched.append(root)
        on_list = {id(node) for node in self._rows}
        entering = [node for node in touched if id(node) not in on_list]
        if entering:
            self.beginInsertRows(QModelIndex(), 0, len(entering) - 1)
            self._rows[:0] = entering
            self.endInsertRows()
        self.layoutAboutToBeChanged.emit()
        old = self._rows
        self._rows = touched + [node for node in old if id(node) not in seen]
        position = {id(node): row for row, node in enumerate(self._rows)}
        for index in self.persistentIndexList():
            self.changePersistentIndex(index, self.index(position[id(old[index.row()])]))
        self.layoutChanged.emit()
        if len(self._rows) > self.limit:
            self.beginRemoveRows(QModelIndex(), self.limit, len(self._rows) - 1)
            del self._rows[self.limit:]
            self.endRemoveRows()

    def _on_read_changed(self, mids: list) -> None:
        roots = {id(node.root): node.root for node in map(self.tree.node, mids) if node is not None}
        if not roots:
            return
        rows = [row for row, node in enumerate(self._rows) if id(node) in roots]
        if rows:
            self.dataChanged.emit(self.index(min(rows)), self.index(max(rows)))

    def row_of(self, root_mid: Mid) -> int:
        for row, node in enumerate(self._rows):
            if node.message.mid == root_mid:
                return row
        return -1

    def summary(self, row: int) -> ThreadSummary:
        node = self._rows[row]
        names = tuple(node.senders.values()) if node.senders else (node.message.sender_name,)
        return ThreadSummary(node.message, node.replies, names, node.unread, self.tree.arrival[node.last].message)

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self._rows)

    def flags(self, index: AnyIndex) -> Qt.ItemFlag:
        return ITEM_FLAGS if index.isValid() else NO_FLAGS

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid() or index.row() >= len(self._rows):
            return None
        node = self._rows[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return node.message.text
        if role == MessageRole:
            return node.message
        if role == ThreadRole:
            return self.summary(index.row())
        if role == UnreadRole:
            return node.unread
        return None


class ThreadModel(_NodeRows, QAbstractItemModel):
    """One thread of a :class:`MessageTreeModel` on its own: its root is the only top-level row.

    It follows the tree's row inserts under the thread, so the thread stays live;
    the window keeps the thread's rows shown in the tree (``hide_oldest`` spares it).
    """

    def __init__(self, tree: MessageTreeModel, root_mid: Mid, parent=None) -> None:
        super().__init__(parent)
        self.tree = tree
        self.root = tree.node(root_mid)
        if self.root is None:
            raise KeyError(root_mid)
        self._forwarding: list[bool] = []
        tree.rowsAboutToBeInserted.connect(self._before_insert)
        tree.rowsInserted.connect(self._after_insert)
        tree.modelAboutToBeReset.connect(self.beginResetModel)
        tree.modelReset.connect(self.endResetModel)
        tree.dataChanged.connect(self._on_data_changed)

    def detach(self) -> None:
        for signal, slot in ((self.tree.rowsAboutToBeInserted, self._before_insert),
                             (self.tree.rowsInserted, self._after_insert),
                             (self.tree.modelAboutToBeReset, self.beginResetModel),
                             (self.tree.modelReset, self.endResetModel),
                             (self.tree.dataChanged, self._on_data_changed)):
            signal.disconnect(slot)

    def _mine(self, source_parent: AnyIndex) -> _Node | None:
        if not source_parent.isValid():
            return None
        node: _Node = source_parent.internalPointer()
        return node if node.root is self.root else None

    def _before_insert(self, source_parent: QModelIndex, first: int, last: int) -> None:
        node = self._mine(source_parent)
        self._forwarding.append(node is not None)
        if node is not None:
            self.beginInsertRows(self._index_of(node), first, last)

    def _after_insert(self, *_args) -> None:
        if self._forwarding and self._forwarding.pop():
            self.endInsertRows()

    def _on_data_changed(self, top: QModelIndex, bottom: QModelIndex, roles=()) -> None:
        node = top.internalPointer() if top.isValid() else None
        if node is not None and node.root is self.root and top == bottom:
            index = self._index_of(node)
            self.dataChanged.emit(index, index, roles)

    def _index_of(self, node: _Node) -> QModelIndex:
        return self.createIndex(0 if node is self.root else node.row, 0, node)

    def index_for(self, mid: Mid) -> QModelIndex:
        node = self.tree.node(mid)
        return self._index_of(node) if node is not None and node.root is self.root else QModelIndex()

    def index(self, row: int, column: int = 0, parent: AnyIndex = QModelIndex()) -> QModelIndex:
        if column or row < 0:
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(0, 0, self.root) if row == 0 else QModelIndex()
        children = parent.internalPointer().children
        return self.createIndex(row, 0, children[row]) if row < len(children) else QModelIndex()

    def parent(self, index: AnyIndex) -> QModelIndex:  # noqa: A003 - Qt's name
        if not index.isValid():
            return QModelIndex()
        node: _Node = index.internalPointer()
        if node is self.root:
            return QModelIndex()
        return self._index_of(node.parent)

    def rowCount(self, parent: AnyIndex = QModelIndex()) -> int:
        if not parent.isValid():
            return 1
        return len(parent.internalPointer().children) if parent.column() == 0 else 0

    def hasChildren(self, parent: AnyIndex = QModelIndex()) -> bool:
        if not parent.isValid():
            return True
        return len(parent.internalPointer().children) > 0 and parent.column() == 0

