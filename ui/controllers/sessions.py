"""Sessions and read state: each joined group's session (its models, unread and read marks), and what the
middleware tells about a group.

A group opens with one page of its history from the store (:data:`HISTORY_PAGE` messages, more
back to its first unread), and older pages load as the reader scrolls up (:meth:`load_older`)
or follows a link to an older message (:meth:`load_back_to`): memory holds what was read, not
the whole history.

Arrivals are taken in slices (:meth:`SessionController._drain_inbox`) so that Qt can paint
between them, and the oldest threads are hidden again under a steady stream; what was read goes
to the store at most once a second, so unread survives a restart.  The window shows the current
session; this controller keeps them all.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from PySide6.QtCore import QObject, QTimer

from ...middleware.events import (Event, GroupCreated, GroupsDiscovered, MemberJoined, MemberLeft, MessagesDelivered,
                                  MessagesUpdated, NoticesAdded, TopicChanged)
from ...middleware.files import readable_text
from ...middleware.chatops import MAX_NOTICES
from ...middleware.rangeset import RangeSet
from ...middleware.types import ChatMessage, GroupView, Member, Mid
from ..delegate import snippet
from ..bridge import Backend
from ..message_model import MessageTreeModel, StoredThreadModel, ThreadListModel, TimelineModel
from ..message_tree import MessageTree
from ..notices import is_notice, notice_row, with_notices
from ..model.notify import NOTIFY_LEVELS, NotifyLevels, to_tell
from ..model.sessions import Session, Sessions, member_names
from ..model.state import ComposeTarget, Selection, ThreadFilter

MAX_PER_TURN = 300
INTAKE_MS = 100
TRIM_SLACK = 100  # rows beyond a model's window before the oldest are hidden again
READ_SAVE_MS = 1000  # read marks go to the store at most once a second
HISTORY_PAGE = 200  # messages a group opens with, and that each scroll back loads
JUMP_LOAD_LIMIT = 5_000  # a jump this far back loads the history up to it; further, its thread alone
OPEN_UNREAD_LIMIT = 2_000
HELD_LIMIT = 3_000  # past this many messages held, the reader back at the end lets the older ones go  # a group opens at its first unread if that is at most this far back


@dataclass(eq=False, kw_only=True)
class GroupSession(Session):
    """A session (ui.model) with the Qt item models that show it."""

    tree_model: MessageTreeModel
    timeline: TimelineModel
    threads: ThreadListModel | None = field(default=None, repr=False)
    thread: StoredThreadModel | None = field(default=None, repr=False)  # the thread opened on its own

    def thread_tree(self) -> MessageTree | None:
        return self.thread.tree if self.thread is not None else None


ReaderPlace = tuple[Mid, int]  # the message at the top of the tree view, and its row's top in pixels


class SessionsView(Protocol):
    """What the session controller asks of the window (the conversation on show: :class:`ConversationShown`)."""

    def setWindowTitle(self, title: str) -> None: ...
    def select_group(self, gid: str) -> None: ...
    def group_to_open(self, joined: list[str]) -> str | None: ...
    def focus_compose(self) -> None: ...
    def focus_first_steps(self) -> None: ...
    def show_status(self, text: str, timeout: int) -> None: ...
    def refresh_status(self) -> None: ...
    def fill_members(self) -> None: ...
    def poll_presence(self) -> None: ...
    def start_new_thread(self) -> None: ...
    def messages_shown(self, mids: list[Mid]) -> None: ...
    def notify(self, title: str, text: str, mention: bool = False, target: tuple[str, Mid] | None = None) -> None: ...
    def show_unread(self, count: int) -> None: ...


class ConversationShown(Protocol):
    """What the session controller asks of the conversation pane (ui.panes.conversation)."""

    def select_message(self, mid: Mid) -> bool: ...
    def clear_filter(self) -> None: ...
    def show_heading(self, session: GroupSession) -> None: ...
    def show_topic(self, session: GroupSession) -> None: ...
    def update_pinned_button(self) -> None: ...
    def update_older_button(self) -> None: ...
    def set_divider(self, session: GroupSession) -> None: ...
    def expand_default(self, session: GroupSession) -> None: ...
    def expand_path(self, mid: Mid) -> None: ...
    def open_position(self, session: GroupSession) -> None: ...
    def follow_end(self) -> None: ...
    def schedule_seen(self, *_args: object) -> None: ...
    def reader_place(self, session: GroupSession) -> tuple[bool, ReaderPlace | None]: ...
    def restore_reader_place(self, session: GroupSession, place: ReaderPlace) -> None: ...
    def update_catch_up(self) -> None: ...
    def keep_reader_place(self, session: GroupSession, place: ReaderPlace) -> None: ...
    def hold_place(self, session: GroupSession) -> ReaderPlace | None: ...
    def older_loaded(self, session: GroupSession, place: ReaderPlace | None, mids: list[Mid]) -> None: ...
    def forget_rendered(self, mids: list[Mid]) -> None: ...
    def relayout_messages(self) -> None: ...


class SessionController(QObject):
    """The sessions of the joined groups, kept for as long as the window."""

    conversation: ConversationShown  # the pane showing the current group, given once it is built

    def __init__(self, backend: Backend, selection: Selection[GroupSession], target: ComposeTarget,
                 view_filter: ThreadFilter, view: SessionsView, settings: Any, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.backend = backend
        self.selection = selection
        self.target = target
        self.view_filter = view_filter
        self.notify_levels = NotifyLevels(settings)
        self.sessions: Sessions[GroupSession] = Sessions()
        self.other_unread: Callable[[], int] = lambda: 0
        self.known_groups: dict[str, GroupView] = {}
        self._inbox: deque[tuple[str, list[ChatMessage]]] = deque()
        self._inbox_timer = QTimer(self, singleShot=True, interval=INTAKE_MS)
        self._inbox_timer.timeout.connect(self._drain_inbox)
        self._read_timer = QTimer(self, singleShot=True, interval=READ_SAVE_MS)
        self._read_timer.timeout.connect(self.save_read_marks)
        self.backend.peer_event.connect(self._on_event)

    def _on_event(self, event: Event) -> None:
        match event:
            case MessagesDelivered(gid, messages):
                self._on_messages(gid, messages)
            case MessagesUpdated(gid, messages):
                self._on_updated(gid, messages)
            case GroupsDiscovered(views):
                self._on_groups_discovered(views)
            case GroupCreated(gid):
                self._on_group_created(gid)
            case MemberJoined(gid, member) | MemberLeft(gid, member):
                self._on_member_changed(gid, member)
            case TopicChanged(gid, topic, by):
                self._on_topic_changed(gid, topic, by)
            case NoticesAdded(gid, notices):  # through the inbox: in their place among the messages
                rows: list[ChatMessage] = [notice_row(notice) for notice in notices]
                if (session := self.sessions.get(gid)) is not None:
                    # (kept so a page of older history loaded again shows them again; as many as the
                    # middleware keeps, so a member pinning in a loop cannot grow them)
                    session.notices = (session.notices + rows)[-MAX_NOTICES:]
                self._on_messages(gid, rows)

    def load(self) -> None:
        """Open a session for every joined group and load its history (asynchronously)."""
        self.backend.call(lambda peer: peer.groups(), on_result=self._on_initial_groups)

    def _on_initial_groups(self, views: list[GroupView]) -> None:
        self._on_groups_discovered(views)
        joined = [view for view in views if view.joined]
        for view in joined:
            self.session(view.gid, load_history=True)
        first = self.view.group_to_open([view.gid for view in joined]) if self.selection.session is None else None
        if first is not None:
            self.view.select_group(first)
            self.view.focus_compose()
        elif not joined:
            # The main window's empty page offers Find / Create / Join from invite, and has the keys,
            # so Enter finds groups; the discovery window is not pushed over the main window.
            self.view.focus_first_steps()

    def session(self, gid: str, load_history: bool = True) -> GroupSession:
        session = self.sessions.get(gid)
        if session is not None:
            return session
        tree = MessageTree(self.backend.pid)
        tree.paged = True
        tree_model = MessageTreeModel(tree, self)
        session = GroupSession(gid, tree, self.known_groups.get(gid), tree_model=tree_model,
                               timeline=TimelineModel(tree_model, self))
        session.threads = ThreadListModel(tree_model, lambda before, limit, done: self.backend.call(
            lambda peer: peer.threads(gid, before, limit), on_result=done, on_error=lambda _e: None), self)
        self.sessions.add(session)
        tree_model.unread_count_changed.connect(lambda _count, s=session: self._on_unread_count(s))
        tree_model.read_state_changed.connect(lambda _mids, s=session: self.read_changed(s))
        if load_history:
            self.backend.call(lambda peer: peer.notices(gid), on_error=lambda _e: None,
                              on_result=lambda notices: setattr(session, "notices", list(map(notice_row, notices))))
            self.backend.call(lambda peer: peer.read_marks(gid),
                              on_result=lambda marks: self._load_history(session, marks),
                              on_error=lambda _e: self._load_history(session, None))
        return session

    def _load_history(self, session: GroupSession, marks: list | None) -> None:
        gid, own = session.gid, self.backend.pid
        read = RangeSet.from_ranges(marks or [])

        def opening(peer) -> tuple[list[ChatMessage], bool, list[ChatMessage], int]:
            # The last page, and older ones while its oldest message is unread: the group opens
            # at its first unread message if that is not too far back, else at its end.
            page = peer.history_page(gid, limit=HISTORY_PAGE)
            complete = len(page) < HISTORY_PAGE
            while (not complete and len(page) < OPEN_UNREAD_LIMIT
                   and page[0].order not in read and page[0].sender != own):
                older = peer.history_page(gid, before=page[0].order, limit=HISTORY_PAGE)
                complete = len(older) < HISTORY_PAGE
                page = older + page
            beyond = peer.unread_before(gid, page[0].order) if page and not complete else 0
            return page, complete, peer.pinned(gid), beyond  # pinned ones, however old

        self.backend.call(opening, on_result=lambda result: self._on_history(session, *result, marks=marks))

    def _on_history(self, session: GroupSession, messages: list[ChatMessage], complete: bool = True,
                    pinned: list[ChatMessage] | None = None, beyond: int = 0, marks: list | None = None) -> None:
        # What the stored read marks do not cover is unread: a group with none (their answer lost,
        # or a group the store has no row for) reads as nothing read.  A data dir from before read
        # marks had its history marked read by the store when it was first opened.
        tree = session.tree
        # Live messages may have come first.  (Not a notice: one applied late carries its operation's
        # old place in the delivery order, and the page would be cut short there.)
        held = min((node.message.order for node in tree.arrival if node.message.order and not is_notice(node.message)),
                   default=None)
        older = [m for m in messages if held is None or m.order < held]
        older = self._with_notices(session, older, complete, held)
        if held is None:
            tree.add_messages(older, unread=False)
        else:
            tree.add_older(older)
        session.history_complete = complete
        session.oldest_order = messages[0].order if messages else held
        session.unread_beyond = beyond
        if session.threads is not None:
            session.threads.refresh()
        self._look_up_absent_parents(session, messages)
        session.pinned = {m.mid: m for m in (pinned if pinned is not None else messages) if m.pinned}
        stored = session.read_marks = RangeSet.from_ranges(marks or [])
        session.tree.set_unread(m.mid for m in messages if m.order and m.order not in stored)
        self._on_unread_count(session)
        unread = session.tree.unread_in_arrival_order()
        session.divider = unread[0] if unread else None
        session.loaded = True
        if self.selection.is_current(session):
            self.conversation.set_divider(session)
            self.conversation.expand_default(session)
            self.conversation.open_position(session)
            self.view.refresh_status()
            self.conversation.update_pinned_button()  # pinned long ago: known from the store, not the page

    def load_older(self, session: GroupSession, then: Callable[[], None] | None = None) -> bool:
        """Ask the store for the page before the oldest message held; False if there is none to ask for.
        ``then`` runs once it is in."""
        if session.loading_older or session.history_complete or session.oldest_order is None:
            return False
        session.loading_older = True
        gid, before = session.gid, session.oldest_order
        self.backend.call(lambda peer: peer.history_page(gid, before=before, limit=HISTORY_PAGE),
                          on_result=lambda page: self._on_older(session, page, HISTORY_PAGE, then),
                          on_error=lambda _e: setattr(session, "loading_older", False))
        return True

    def load_back_to(self, session: GroupSession, mid: Mid, then: Callable[[bool], object]) -> None:
        """Load the history from the page around ``mid`` up to what is held (a link or a search result
        older than the pages loaded); ``then(found)`` runs once it is in."""
        gid, before = session.gid, session.oldest_order

        def back_to(peer) -> list[ChatMessage]:
            around = peer.history_around(gid, mid, HISTORY_PAGE)
            if not around or before is None or around[-1].order >= before:
                return [m for m in around if before is None or m.order < before]
            if before - around[-1].order > JUMP_LOAD_LIMIT:
                return []  # too far back to hold all the way: its thread alone is shown, from the store
            return around + peer.history_page(gid, after=around[-1].order, before=before,
                                              limit=before - around[-1].order)

        def loaded(page: list[ChatMessage]) -> None:
            self._on_older(session, page, 0)
            then(session.tree.node(mid) is not None)

        def failed(_error: Exception) -> None:
            session.loading_older = False
            then(False)

        if session.loading_older:
            then(False)
            return
        session.loading_older = True
        self.backend.call(back_to, on_result=loaded, on_error=failed)

    def _on_older(self, session: GroupSession, page: list[ChatMessage], asked: int,
                  then: Callable[[], None] | None = None) -> None:
        session.loading_older = False
        if asked and len(page) < asked:
            session.history_complete = True
        page = [m for m in page if session.oldest_order is None or m.order < session.oldest_order]
        if page:
            page = self._with_notices(session, page, session.history_complete, session.oldest_order)
            session.oldest_order = page[0].order
            place = self.conversation.hold_place(session)
            read = session.read_marks or RangeSet()
            session.unread_beyond = 0 if session.history_complete else max(
                0, session.unread_beyond - sum(1 for m in page if m.order not in read))
            session.tree.add_older(page, [m.mid for m in page
                                          if m.order not in read and m.sender != self.backend.pid])
            session.pinned.update({m.mid: m for m in page if m.pinned})
            self._look_up_absent_parents(session, page)
            if self.selection.is_current(session):
                self.conversation.older_loaded(session, place, [m.mid for m in page])
        if then is not None:
            then()

    @staticmethod
    def _with_notices(session: GroupSession, page: list[ChatMessage], complete: bool,
                      below: int | None) -> list[ChatMessage]:
        """``page`` with the group's notices that fall among it: from its first message's place in the
        delivery order (from the start when nothing is older) up to ``below`` (the oldest held)."""
        first = 0 if complete or not page else page[0].order
        return with_notices(page, [row for row in session.notices
                                   if row.order >= first and (below is None or row.order < below)])

    def let_older_go(self, session: GroupSession) -> bool:
        """Back at the end after reading far back: hold the newest page again (memory stays bounded
        whatever was scrolled through); the store keeps the rest for the next scroll back."""
        tree = session.tree
        if len(tree) <= HELD_LIMIT or session.thread is not None or session.loading_older:
            return False
        tree.keep_newest(HISTORY_PAGE)
        session.oldest_order = tree.arrival[0].message.order if tree.arrival else session.oldest_order
        session.history_complete = False
        self._look_up_absent_parents(session, [node.message for node in tree.arrival])
        return True

    def _look_up_absent_parents(self, session: GroupSession, page: list[ChatMessage]) -> None:
        """The messages answered by replies of ``page`` that are not held, for their reply banners."""
        tree = session.tree
        wanted = sorted({m.parent for m in page if m.parent is not None and tree.node(m.parent) is None
                         and m.parent not in tree.absent_parents})
        if not wanted:
            return
        gid = session.gid

        def found(messages: list[ChatMessage]) -> None:
            tree.absent_parents.update({m.mid: m for m in messages})
            if self.selection.is_current(session):
                self.conversation.relayout_messages()

        self.backend.call(lambda peer: peer.messages(gid, wanted), on_result=found, on_error=lambda _e: None)

    def _on_messages(self, gid: str, messages: list[ChatMessage]) -> None:
        # Taken in slices: every insert makes QTreeView lay out all its visible rows again
        # (asking the Python model about each), so arrivals are gathered for up to INTAKE_MS
        # and added together, at most MAX_PER_TURN per turn, with Qt free to paint between.
        self._inbox.append((gid, list(messages)))
        if not self._inbox_timer.isActive():
            self._inbox_timer.start()

    def _drain_inbox(self) -> None:
        budget = MAX_PER_TURN
        while self._inbox and budget > 0:
            gid, messages = self._inbox.popleft()
            while self._inbox and self._inbox[0][0] == gid and len(messages) < budget:
                messages.extend(self._inbox.popleft()[1])
            if len(messages) > budget:
                self._inbox.appendleft((gid, messages[budget:]))
                messages = messages[:budget]
            budget -= len(messages)
            self._add_messages(gid, messages)
        if self._inbox:
            self._inbox_timer.start()

    def _add_messages(self, gid: str, messages: list[ChatMessage]) -> None:
        session = self.sessions.get(gid)
        if session is None:
            session = self.session(gid, load_history=True)
        at_bottom, reading = self.conversation.reader_place(session)
        if session.thread is not None:
            for message in session.thread.add_live(messages):
                if message.parent is not None and self.selection.is_current(session):
                    self.conversation.expand_path(message.mid)
        shown = session.tree.add_messages(messages, unread=True)
        if not shown:
            return
        self._trim(session, at_bottom, reading)
        if reading is not None and self.selection.is_current(session):
            self.conversation.keep_reader_place(session, reading)  # replies above (a join's sync) must not move it
        if self.selection.is_current(session):
            for message in shown:
                if message.parent is not None:
                    self.conversation.expand_path(message.mid)
            self.view.messages_shown([m.mid for m in shown])  # the banner may name one of them now
            if at_bottom:
                # Only follow the end when the user is already there; otherwise keep their place.
                # Deferred and coalesced: scrolling forces a layout, once per burst is enough.
                self.conversation.follow_end()
            self.conversation.schedule_seen()
        others = [m for m in shown if m.sender != self.backend.pid and not is_notice(m)]
        told, mentioning = to_tell(self.notify_level(gid), self.backend.pid, others) if others else ([], False)
        if told:
            last = told[-1]
            extra = f" (+{len(told) - 1} more)" if len(told) > 1 else ""
            how = "mentioned you in" if mentioning else "in"
            text = readable_text(last.text, member_names(session.view))
            self.view.notify(f"{last.sender_name} {how} {session.title}", snippet(text, 120) + extra,
                             mention=mentioning, target=(gid, last.mid))

    def _trim(self, session: GroupSession, at_bottom: bool, reading: ReaderPlace | None = None) -> None:
        # A steady stream adds rows without end, and each re-layout costs every row on show
        # (scrolled by pixels, the tree needs every row's height): hide the oldest threads
        # again, never the selected message's, the open one's or those from the top of the
        # view on; the view is put back where the reader was.
        current = self.selection.is_current(session)
        spare = self.target.reply if current else None
        opened = session.thread.root.message.mid if session.thread is not None else None
        tree, timeline = session.tree, session.timeline
        if tree.shown_thread_count() > tree.window + TRIM_SLACK:
            hidden = tree.hide_oldest(tree.window, [spare, opened, reading[0] if reading else None])
            if hidden and reading is not None:
                self.conversation.restore_reader_place(session, reading)
        if ((at_bottom or not current or not self.view_filter.time_ordered)
                and timeline.rowCount() > timeline.window + TRIM_SLACK):
            timeline.hide_oldest(timeline.window, spare)
        if self.selection.is_current(session):
            self.conversation.update_older_button()

    def _on_groups_discovered(self, views: list[GroupView]) -> None:
        for view in views:
            self.known_groups[view.gid] = view
            session = self.sessions.get(view.gid)
            if session is not None:
                self.sessions.set_view(session, view)
                if self.selection.is_current(session):
                    self.conversation.show_heading(session)
                    self.view.fill_members()
        self.view.refresh_status()

    def on_group_view(self, view: GroupView) -> None:
        self._on_groups_discovered([view])

    def refresh_group_view(self, gid: str) -> None:
        """Ask the middleware for ``gid``'s view again (members, names, topic)."""
        self.backend.call(lambda peer: peer.group(gid), on_result=self.on_group_view, on_error=lambda _e: None)

    def _on_updated(self, gid: str, messages: list[ChatMessage]) -> None:
        session = self.sessions.get(gid)
        if session is None:
            return
        by_mid = {m.mid: m for m in messages}
        for queued_gid, queued in self._inbox:  # not in the tree yet: update them where they wait
            if queued_gid == gid:
                queued[:] = [by_mid.get(m.mid, m) for m in queued]
        for message in messages:
            if message.pinned:
                session.pinned[message.mid] = message
            else:
                session.pinned.pop(message.mid, None)
        self.conversation.forget_rendered([m.mid for m in messages])
        changed = session.tree.update_messages(messages)
        if session.thread is not None:
            changed += session.thread.tree.update_messages(messages)
        if self.selection.is_current(session):
            if changed:
                self.conversation.relayout_messages()
            self.conversation.update_pinned_button()
            self.view.messages_shown(list(by_mid))  # the reply banner names an edited message anew
            edited = by_mid.get(self.target.edit) if self.target.edit is not None else None
            if edited is not None and edited.deleted:
                self.view.start_new_thread()

    def _on_topic_changed(self, gid: str, topic: str, by: str) -> None:
        session = self.sessions.get(gid)
        if session is None:
            return
        session.topic = topic
        if self.selection.is_current(session):
            self.conversation.show_topic(session)

    def _on_group_created(self, gid: str) -> None:
        session = self.session(gid, load_history=False)
        session.loaded = session.history_complete = True  # made here just now: there is nothing older to load
        self.view.select_group(gid)

    def _on_member_changed(self, gid: str, _member: Member) -> None:
        if gid in self.sessions:
            self.refresh_group_view(gid)
            if self.selection.is_current(self.sessions[gid]):
                # Its JOIN was just heard: asked now, a new member showed offline until the next poll,
                # up to 5 s (issue 45).
                self.view.poll_presence()

    def _on_unread_count(self, session: GroupSession) -> None:
        self.sessions.unread_changed(session)
        if self.selection.is_current(session):
            self.conversation.update_catch_up()
        self.update_title()

    def update_title(self) -> None:
        """The window's title counts what is unread, in the groups and in ``other_unread()`` (direct messages)."""
        total = self.sessions.unread_total() + self.other_unread()
        self.view.setWindowTitle(f"({total}) M2MC chat" if total else "M2MC chat")
        self.view.show_unread(total)

    def read_changed(self, session: GroupSession) -> None:
        """Something was read: its marks go to the store within READ_SAVE_MS."""
        if session.read_unsaved and not self._read_timer.isActive():
            self._read_timer.start()

    def save_read_marks(self) -> None:
        """Send what was read since the last time to the store (it survives a restart)."""
        for gid, ranges in self.sessions.take_read_ranges().items():
            self._save_marks(gid, ranges)

    def _save_marks(self, gid: str, ranges: list[tuple[int, int]]) -> None:
        self.backend.call(lambda peer: peer.mark_read(gid, ranges), on_error=lambda _e: None)

    def mark_all_read(self) -> None:
        session = self.selection.session
        if session is None:
            return
        older = session.mark_all_read()
        if older:  # also what is not loaded
            self._save_marks(session.gid, older)
        self._on_unread_count(session)

    def next_unread(self, others: Callable[[], bool] = lambda: False) -> bool:
        """Select the oldest unread message, in this group or the next one with news; failing that,
        ``others()`` (the direct conversations) may select one.  Whether one was selected."""
        current = self.selection.session
        for session, oldest in self.sessions.with_unread_first(current)[:1]:
            if session is not current:
                self.view.select_group(session.gid)
            self.conversation.clear_filter()
            self.conversation.select_message(oldest)
            return True
        if others():
            return True
        self.view.show_status("No unread messages", 3000)
        return False

    def notify_level(self, gid: str) -> str:
        """``all``, ``mentions`` (only messages that mention me) or ``nothing`` (ui.model.notify)."""
        return self.notify_levels.level(gid)

    def set_notify_level(self, gid: str, level: str) -> None:
        self.notify_levels.set_level(gid, level)
        session = self.sessions.get(gid)
        title = session.title if session is not None else gid
        self.view.show_status(f"Notifications for {title}: {NOTIFY_LEVELS[level]}", 3000)
