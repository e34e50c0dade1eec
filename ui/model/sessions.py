"""The joined groups' sessions without Qt: each group's reply tree, what its reader has read and has yet
to read, where its history is loaded back to, and the warnings not seen yet; and the sessions together,
whose changes are told to listeners as the reply tree tells its own (:mod:`ui.message_tree`).

The groups list of the window mirrors these (:class:`ui.panes.groups.GroupsPane`): it holds no state
of its own, so everything here is tested without a display (tests/ui/test_app_model.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ...middleware.rangeset import RangeSet
from ...middleware.types import ChatMessage, GroupView, Mid
from ..message_tree import MessageTree


@dataclass(eq=False)
class Session:
    """One joined group as its reader sees it.  Compared by identity: two sessions are never the same."""

    gid: str
    tree: MessageTree
    view: GroupView | None = None
    loaded: bool = False
    sync: tuple[int, int] | None = None
    pending: int = 0
    expanded_once: bool = False
    warnings: list[str] = field(default_factory=list)
    warning_dismissed: bool = False
    unseen_warning: str | None = None  # the last warning, while the reader has not opened the group since
    divider: Mid | None = None  # "New messages" above this one: the first unread when opened
    opened: bool = False  # scrolled to where it opens
    presence: dict[str, str] = field(default_factory=dict)
    direct: set[str] = field(default_factory=set)  # members reached by unicast (reach: multicast misses them)
    topic: str | None = None  # None: not heard yet (the group view has it)
    pinned: dict[Mid, ChatMessage] = field(default_factory=dict)
    catch_up_dismissed: bool = False  # the reader chose to keep a big join's history unread
    notices: list[ChatMessage] = field(default_factory=list)  # its notice rows (ui.notices): stored, then live
    # Scroll-back: the oldest delivery order held, whether the store holds anything older, what
    # the store's read marks said when the group was opened (older pages' unread), and a page on its way.
    oldest_order: int | None = None
    history_complete: bool = False
    read_marks: RangeSet | None = None
    loading_older: bool = False
    unread_beyond: int = 0  # about how many unread the store holds before the messages loaded

    @property
    def title(self) -> str:
        return self.view.desc if self.view is not None else self.gid

    @property
    def shown_topic(self) -> str:
        return self.topic if self.topic is not None else (self.view.topic if self.view else "")

    @property
    def private(self) -> bool:
        return self.view is not None and self.view.private

    @property
    def unread(self) -> int:
        """What its reader has not read: in the messages held and, about, in the store before them."""
        return len(self.tree.unread) + self.unread_beyond

    def thread_tree(self) -> MessageTree | None:
        """The tree of the thread opened on its own, when it holds messages the group's tree does not."""
        return None

    @property
    def read_unsaved(self) -> bool:
        thread = self.thread_tree()
        return bool(self.tree.read_unsaved or (thread is not None and thread.read_unsaved))

    def take_read_ranges(self) -> list[tuple[int, int]]:
        """What was read since the last time, as ranges of the delivery order, for the store."""
        ranges = self.tree.take_read_ranges()
        thread = self.thread_tree()
        if thread is not None:  # what was read in a thread the group's tree does not hold
            ranges += thread.take_read_ranges()
        return ranges

    def mark_all_read(self) -> list[tuple[int, int]]:
        """Everything read, also what the store holds before the messages loaded: the ranges of the
        latter, for the store (the tree's own come from :meth:`take_read_ranges`)."""
        older: list[tuple[int, int]] = []
        if self.unread_beyond and self.oldest_order is not None:
            older = [(1, self.oldest_order - 1)]
            if self.read_marks is not None:
                self.read_marks.add_range(1, self.oldest_order)
            self.unread_beyond = 0
        self.tree.mark_all_read()
        return older


def member_names(view: GroupView | None) -> dict[str, str]:
    """pid -> name of the group's members, current and former: what mention tokens are shown as."""
    return {m.pid: m.name for m in (*view.members, *view.left)} if view is not None else {}


SessionT = TypeVar("SessionT", bound=Session)


class SessionsListener(Protocol):
    """What a view of the sessions hears."""

    def session_added(self, session: Session) -> None: ...
    def session_removed(self, session: Session) -> None: ...
    def session_changed(self, session: Session) -> None: ...  # its title, privacy or unseen warning
    def unread_changed(self, session: Session, total: int) -> None: ...  # total: over all the sessions


class Sessions(Mapping[str, SessionT], Generic[SessionT]):
    """The sessions of the joined groups by gid, in the order they were opened; every change goes
    through a method here, which tells the listeners."""

    def __init__(self) -> None:
        self._by_gid: dict[str, SessionT] = {}
        self._listeners: list[SessionsListener] = []

    def listen(self, listener: SessionsListener) -> None:
        self._listeners.append(listener)

    def __getitem__(self, gid: str) -> SessionT:
        return self._by_gid[gid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_gid)

    def __len__(self) -> int:
        return len(self._by_gid)

    def add(self, session: SessionT) -> None:
        self._by_gid[session.gid] = session
        for listener in self._listeners:
            listener.session_added(session)

    def remove(self, session: SessionT) -> None:
        if self._by_gid.get(session.gid) is not session:
            return
        del self._by_gid[session.gid]
        for listener in self._listeners:
            listener.session_removed(session)
        self.unread_changed(session)

    def set_view(self, session: SessionT, view: GroupView) -> None:
        session.view = view
        self.changed(session)

    def warned(self, session: SessionT, text: str) -> None:
        """A warning about ``session`` that its reader has not seen (the group is not on show)."""
        session.warnings.append(text)
        session.warning_dismissed = False
        session.unseen_warning = text
        self.changed(session)

    def warning_seen(self, session: SessionT) -> None:
        if session.unseen_warning is not None:
            session.unseen_warning = None
            self.changed(session)

    def changed(self, session: SessionT) -> None:
        if self._by_gid.get(session.gid) is session:
            for listener in self._listeners:
                listener.session_changed(session)

    def unread_changed(self, session: SessionT) -> None:
        """``session``'s unread count may have changed (its tree's, or what the store holds before it)."""
        total = self.unread_total()
        for listener in self._listeners:
            listener.unread_changed(session, total)

    def unread_total(self) -> int:
        return sum(session.unread for session in self._by_gid.values())

    def with_unread_first(self, current: SessionT | None) -> list[tuple[SessionT, Mid]]:
        """Each session with something unread and its oldest unread message: ``current`` first, then
        the others in the order they were opened (where "next unread" goes)."""
        order = ([current] if current is not None else []) + [s for s in self._by_gid.values() if s is not current]
        found = []
        for session in order:
            unread = session.tree.unread_in_arrival_order()
            if unread:
                found.append((session, unread[0]))
        return found

    def take_read_ranges(self) -> dict[str, list[tuple[int, int]]]:
        """What was read in each session since the last time, for the store."""
        taken = {gid: session.take_read_ranges() for gid, session in self._by_gid.items()}
        return {gid: ranges for gid, ranges in taken.items() if ranges}
