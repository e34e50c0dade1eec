"""One group's reply tree and its read state, without Qt: the thesis's DynaTree.

Each message is a node under the message it answers.  Messages are only ever
added, so a node's row never changes.  The middleware delivers a parent before
its replies (S_b order), but the tree does not rely on it: a reply whose parent
is unknown waits, invisible, until the parent arrives.  The tree also keeps
which messages are unread, and the arrival order that the time-ordered view
shows.

A tree fed page by page from the store (``paged``) holds only part of the history:
:meth:`MessageTree.add_older` puts an older page at the top, and a reply whose parent
is not held (older than the pages loaded) is shown at the top level, its parent looked up
in ``absent_parents`` for the reply banner; it stays there when the parent's page comes.

The tree shows a window of the newest threads: the oldest ``hidden_threads``
top-level nodes are not rows until :meth:`MessageTree.show_older` (or
:meth:`MessageTree.reveal`) brings them back.  Every change is told to one
:class:`TreeListener` as a pair of calls before and after it, in the shown row
numbers, as napari's evented models do: :class:`~ui.message_model.MessageTreeModel`
maps them one to one onto ``beginInsertRows``/``endInsertRows`` and the like.
"""

from __future__ import annotations

from typing import Iterable, Protocol, cast

from ..middleware.rangeset import RangeSet
from ..middleware.types import ChatMessage, Mid
from .notices import is_notice

THREAD_WINDOW = 200  # scrolled by pixels, every shown row costs each re-layout


class Node:
    # A thread's root also keeps the thread's figures: replies, senders, unread and the
    # arrival index of its latest message (what the threads list sorts by).
    __slots__ = ("message", "parent", "children", "row", "depth", "root", "replies", "senders", "unread", "last")

    def __init__(self, message: ChatMessage | None, parent: Node | None, row: int) -> None:
        # None for the tree's top node alone, which no index ever carries (see MessageTree.top).
        self.message = cast(ChatMessage, message)
        self.parent = parent
        self.children: list[Node] = []
        self.row = row
        self.depth: int = parent.depth + 1 if parent is not None else -1
        self.root: Node = self if parent is None or parent.parent is None else parent.root
        self.replies = 0
        self.senders: dict[str, str] | None = None  # a root's alone: one dict per message would cost memory and GC
        self.unread = 0
        self.last = 0


class TreeListener(Protocol):
    """What a view of the tree hears; each ``*ing`` call is followed by its ``*ed`` call."""

    def tree_resetting(self) -> None: ...
    def tree_reset(self) -> None: ...
    def rows_inserting(self, parent: Node, first: int, last: int) -> None: ...
    def rows_inserted(self) -> None: ...
    def rows_removing(self, parent: Node, first: int, last: int) -> None: ...
    def rows_removed(self) -> None: ...
    def node_changed(self, node: Node, read_state_only: bool) -> None: ...
    def messages_arrived(self, first: int, last: int) -> None: ...
    def read_marks_changed(self, mids: list[Mid]) -> None: ...
    def messages_updated(self, mids: list[Mid]) -> None: ...
    def unread_total_changed(self, count: int) -> None: ...
    def older_threads_shown(self) -> None: ...
    def older_messages_added(self, count: int) -> None: ...


class SilentListener:
    """The listener of a tree that nothing shows."""

    def tree_resetting(self) -> None: pass
    def tree_reset(self) -> None: pass
    def rows_inserting(self, parent: Node, first: int, last: int) -> None: pass
    def rows_inserted(self) -> None: pass
    def rows_removing(self, parent: Node, first: int, last: int) -> None: pass
    def rows_removed(self) -> None: pass
    def node_changed(self, node: Node, read_state_only: bool) -> None: pass
    def messages_arrived(self, first: int, last: int) -> None: pass
    def read_marks_changed(self, mids: list[Mid]) -> None: pass
    def messages_updated(self, mids: list[Mid]) -> None: pass
    def unread_total_changed(self, count: int) -> None: pass
    def older_threads_shown(self) -> None: pass
    def older_messages_added(self, count: int) -> None: pass


class MessageTree:
    """The reply tree of one group with its unread marks; see the module docstring."""

    def __init__(self, own_pid: str = "", window: int = THREAD_WINDOW) -> None:
        self.own_pid = own_pid
        self.window = window
        self.hidden_threads = 0  # the oldest threads, not (yet) rows
        self.top = Node(None, None, 0)  # the parent of every thread's root
        self._nodes: dict[Mid, Node] = {}
        self._waiting: dict[Mid, list[ChatMessage]] = {}  # parent mid -> replies that came first
        self.arrival: list[Node] = []
        self.unread: set[Mid] = set()
        self.read_unsaved: list[int] = []  # the delivery orders of messages read since take_read_ranges()
        self.listener: TreeListener = SilentListener()
        self.paged = False  # holds pages of the history: a reply to a message not held is shown at once
        self.absent_parents: dict[Mid, ChatMessage] = {}  # parents not held, for the reply banners

    # -- feeding -------------------------------------------------------------------------

    def add_messages(self, messages: Iterable[ChatMessage], unread: bool = True) -> list[ChatMessage]:
        """Add delivered messages; returns those that became visible, in insertion order.

        Own messages are never unread.  When the tree is empty (a group being
        opened) the whole batch goes in as one reset, which is what makes a
        100,000-message history open quickly.
        """
        ready = self._ready(messages)
        if not ready:
            return []
        listener = self.listener
        if not self._nodes:
            listener.tree_resetting()
            for message in ready:
                self._attach(message, unread)
            self.hidden_threads = max(0, len(self.top.children) - self.window)
            listener.tree_reset()
            listener.messages_arrived(0, len(self.arrival) - 1)
        else:
            first_arrival = len(self.arrival)
            start = 0
            while start < len(ready):
                parent_mid = ready[start].parent
                end = start + 1
                while end < len(ready) and ready[end].parent == parent_mid:
                    end += 1
                # a reply whose parent is not held (paged) goes to the top level
                parent_node = self._nodes.get(parent_mid, self.top) if parent_mid is not None else self.top
                if not self.shown(parent_node):  # a reply in a hidden old thread: no rows to announce
                    for message in ready[start:end]:
                        self._attach(message, unread)
                    start = end
                    continue
                first = len(parent_node.children) - (self.hidden_threads if parent_node is self.top else 0)
                listener.rows_inserting(parent_node, first, first + end - start - 1)
                for message in ready[start:end]:
                    self._attach(message, unread)
                listener.rows_inserted()
                start = end
            listener.messages_arrived(first_arrival, len(self.arrival) - 1)
        if unread and any(m.sender != self.own_pid for m in ready):
            listener.unread_total_changed(len(self.unread))
        return ready

    def update_messages(self, messages: Iterable[ChatMessage]) -> list[Mid]:
        """Replace known messages by their new state (operations: edits, deletes, reactions, pins).

        A node's place never changes, so this is a data change, not a move.  A
        message still waiting for its parent is updated where it waits.
        """
        changed: list[Mid] = []
        for message in messages:
            node = self._nodes.get(message.mid)
            if node is None:
                waiting = self._waiting.get(message.parent, []) if message.parent is not None else []
                for position, held in enumerate(waiting):
                    if held.mid == message.mid:
                        waiting[position] = message._replace(order=held.order)
                continue
            node.message = message._replace(order=node.message.order)
            changed.append(message.mid)
            self.listener.node_changed(node, False)
        if changed:
            self.listener.messages_updated(changed)
        return changed

    def _ready(self, messages: Iterable[ChatMessage]) -> list[ChatMessage]:
        """The messages that can be shown now, parents before replies, without duplicates."""
        ready: list[ChatMessage] = []
        known = set()
        for message in messages:
            if message.mid in self._nodes or message.mid in known:
                continue
            parent = message.parent
            if parent is not None and parent not in self._nodes and parent not in known and not self.paged:
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

    def add_older(self, messages: Iterable[ChatMessage], unread: Iterable[Mid] = ()) -> int:
        """Put a page of messages delivered before every one held at the top (scroll-back);
        returns how many were added.  Their threads are rows at once unless older threads are
        hidden (then they join the hidden ones); ``unread`` are marked unread."""
        page = [m for m in messages if m.mid not in self._nodes]
        if not page:
            return 0
        if not self._nodes:
            self.add_messages(page, unread=False)
            self.set_unread(unread)
            return len(page)
        roots: list[Node] = []
        added: list[Node] = []
        for message in page:
            parent_node = self._nodes.get(message.parent) if message.parent is not None else None
            if parent_node is None:
                node = Node(message, self.top, len(roots))
                roots.append(node)
                node.senders = {message.sender: message.sender_name}
            else:
                node = Node(message, parent_node, len(parent_node.children))
                parent_node.children.append(node)
                root = node.root
                root.replies += 1
                assert root.senders is not None
                root.senders.setdefault(message.sender, message.sender_name)
            node.root.last = len(added)
            self._nodes[message.mid] = node
            added.append(node)
        count = len(added)
        hidden = self.hidden_threads > 0 or not roots
        if not hidden:
            self.listener.rows_inserting(self.top, 0, len(roots) - 1)
        for node in self.top.children:
            node.row += len(roots)
            node.last += count
        self.top.children[:0] = roots
        self.arrival[:0] = added
        if hidden:
            self.hidden_threads += len(roots)  # joins the hidden ones: the shown rows keep their numbers
        else:
            self.listener.rows_inserted()
        self.listener.older_messages_added(count)
        self.set_unread(unread)
        return count

    def keep_newest(self, count: int) -> int:
        """Hold only the newest ``count`` messages (as one reset), their unread marks and the read
        marks not yet saved kept; returns how many were let go.  Replies whose parent goes are
        shown at the top level, as in a page loaded from the store."""
        if not self.paged:
            raise ValueError("only a paged tree lets its oldest messages go: the others' replies need them")
        dropped = len(self.arrival) - count
        if dropped <= 0:
            return 0
        kept = [node.message for node in self.arrival[dropped:]]
        unread = [m.mid for m in kept if m.mid in self.unread]
        self.listener.tree_resetting()
        self.top.children = []
        self._nodes.clear()
        self._waiting.clear()
        self.arrival = []
        self.unread = set()
        self.hidden_threads = 0
        for message in kept:
            self._attach(message, False)
        self.hidden_threads = max(0, len(self.top.children) - self.window)
        self.listener.tree_reset()
        self.listener.messages_arrived(0, len(self.arrival) - 1)
        self.set_unread(unread)
        self.listener.unread_total_changed(len(self.unread))
        return dropped

    def _attach(self, message: ChatMessage, unread: bool) -> None:
        parent_node = (self._nodes.get(message.parent, self.top) if self.paged else self._nodes[message.parent]) \
            if message.parent is not None else self.top
        node = Node(message, parent_node, len(parent_node.children))
        parent_node.children.append(node)
        self._nodes[message.mid] = node
        root = node.root
        root.last = len(self.arrival)
        if root is node:
            root.senders = {message.sender: message.sender_name}
        else:
            root.replies += 1
            senders = root.senders
            assert senders is not None  # given when the root came
            senders.setdefault(message.sender, message.sender_name)
        self.arrival.append(node)
        if unread and message.sender != self.own_pid and not is_notice(message):
            self.unread.add(message.mid)
            root.unread += 1

    # -- the window of shown threads -----------------------------------------------------

    def shown(self, node: Node) -> bool:
        return node is self.top or node.root.row >= self.hidden_threads

    def show_older(self, count: int | None = None) -> int:
        """Show up to ``count`` (default: a window's worth) older threads at the top."""
        count = min(self.hidden_threads, count if count is not None else self.window)
        if count > 0:
            self.listener.rows_inserting(self.top, 0, count - 1)
            self.hidden_threads -= count
            self.listener.rows_inserted()
            self.listener.older_threads_shown()
        return count

    def hide_oldest(self, keep: int, spare: Mid | Iterable[Mid | None] | None = None) -> int:
        """Hide the oldest shown threads but the newest ``keep`` (and the threads of ``spare``).

        New threads keep adding top-level rows, and every row on show costs each
        re-layout; a reader following the newest talk loses nothing by this.
        """
        count = len(self.top.children) - self.hidden_threads - keep
        spared: list[Mid | None] = [spare] if spare is None or isinstance(spare, tuple) else list(spare)
        for mid in spared:
            node = self._nodes.get(mid) if mid is not None else None
            if node is not None:
                count = min(count, node.root.row - self.hidden_threads)
        if count <= 0:
            return 0
        self.listener.rows_removing(self.top, 0, count - 1)
        self.hidden_threads += count
        self.listener.rows_removed()
        return count

    def reveal(self, mid: Mid) -> bool:
        """Make sure the message is shown (its old thread too); False if unknown."""
        node = self._nodes.get(mid)
        if node is None:
            return False
        if node.root.row < self.hidden_threads:
            self.show_older(self.hidden_threads - node.root.row)
        return True

    def shown_thread_count(self) -> int:
        return len(self.top.children) - self.hidden_threads

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

    def node(self, mid: Mid | None) -> Node | None:
        return self._nodes.get(mid) if mid is not None else None

    def roots(self) -> list[Node]:
        return self.top.children

    def thread_of(self, mid: Mid) -> Mid | None:
        """The mid of the root of ``mid``'s thread."""
        node = self._nodes.get(mid)
        return node.root.message.mid if node is not None else None

    def ancestors(self, mid: Mid) -> list[Mid]:
        """The mids from the thread's root down to the parent of ``mid``."""
        path = []
        node = self._nodes.get(mid)
        while node is not None and node.parent is not None and node.parent is not self.top:
            node = node.parent
            path.append(node.message.mid)
        return path[::-1]

    # -- read state ----------------------------------------------------------------------

    def unread_in_arrival_order(self) -> list[Mid]:
        if not self.unread:
            return []
        return [node.message.mid for node in self.arrival if node.message.mid in self.unread]

    def caught_up_unread(self, lag_ms: int) -> list[Mid]:
        """Unread messages that reached this peer ``lag_ms`` or more after they were written: history
        synced in on a join or a return, rather than talk heard as it happened."""
        return [mid for mid in self.unread
                if (node := self._nodes.get(mid)) is not None
                and node.message.received_at - node.message.sent_at >= lag_ms]

    def mark_read(self, mids: Iterable[Mid]) -> None:
        changed = [mid for mid in mids if mid in self.unread]
        if not changed:
            return
        self.unread.difference_update(changed)
        for mid in changed:
            node = self._nodes[mid]
            node.root.unread -= 1
            if node.message.order:
                self.read_unsaved.append(node.message.order)
            self.listener.node_changed(node, True)
        self.listener.read_marks_changed(changed)
        self.listener.unread_total_changed(len(self.unread))

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
            self.listener.node_changed(node, True)
        self.listener.read_marks_changed(added)
        self.listener.unread_total_changed(len(self.unread))

    def mark_all_read(self) -> None:
        self.mark_read(list(self.unread))

    def take_read_ranges(self) -> list[tuple[int, int]]:
        """What was read since the last call, as ranges of delivery orders for the store's read marks."""
        if not self.read_unsaved:
            return []
        ranges = RangeSet(self.read_unsaved).ranges()
        self.read_unsaved = []
        return ranges
