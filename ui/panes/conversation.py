"""The conversation pane: a group's conversation with its header (title and topic, pinned messages, older
ones to show, the filter and the tree / time-order switch), the warning and catch-up bars, the bar of a
thread open on its own, the first steps shown while there is no group, and the compose box.

It owns the reading: which model each view shows, where the reader is and stays as rows come and go,
what is seen (and so read), the filter's matches, and a thread opened on its own.  What the session
controller asks of it is :class:`ui.controllers.sessions.ConversationShown`; what it asks of the window
around it is :class:`ConversationHooks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterator

from PySide6.QtCore import QAbstractItemModel, QItemSelectionModel, QModelIndex, QPoint, QSortFilterProxyModel, Qt, QTimer
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (QAbstractItemView, QFrame, QHBoxLayout, QLabel, QLineEdit, QMenu, QPushButton,
                               QStackedWidget, QToolButton, QVBoxLayout, QWidget)

from ...middleware.types import ChatMessage, Mid
from ..bridge import Backend
from ..controllers.compose import ComposeController
from ..controllers.sessions import GroupSession, ReaderPlace, SessionController
from ..delegate import MessageDelegate, root_text
from ..files_view import FilesView
from ..focus import Navigation
from ..mentions import MentionCompleter
from ..message_model import MessageRole, SearchRole, StoredThreadModel
from ..model.sessions import member_names
from ..model.state import Selection, ThreadFilter
from ..notices import is_notice
from ..resources import icon
from ..widgets import CatchUpBar, ComposeBox, ConversationView, SharedField, WarningBanner, title_label

AT_END = 4  # pixels from the bottom that still count as the end (scrolling to the last row can stop short)
SCROLL_BACK_MARGIN = 200  # pixels from the top at which the older history loads
EXPAND_ALL_LIMIT = 5000  # bigger groups open with only their recent threads expanded
EXPAND_RECENT = 150
SEEN_DELAY_MS = 1500
# A group holding this many unread messages that reached this peer CATCH_UP_LAG_MS or more
# after they were written (a big join's history, a long absence) offers to mark those read.
CATCH_UP_MIN = 200
CATCH_UP_LAG_MS = 10 * 60 * 1000
EMPTY_GROUP_HINT = ("No messages here yet.\n\nWrite the first one below: it starts a thread. "
                    "Replies show under the message they answer (Reply, or a click on ↩).")


@dataclass
class ConversationHooks:
    """What the conversation pane asks of the window around it."""

    place_keys: Callable[[Navigation], None]  # where the keys go after a navigation (ui.focus)
    open_link: Callable[[str], None]
    link_title: Callable[[str], str | None]
    menu_for: Callable[[ChatMessage], QMenu]  # a message's context menu
    show_status: Callable[[str, int], None]
    restored_thread: Callable[[str], Mid | None]  # the thread of group gid open at the last close, once


class ConversationHeader(QWidget):
    """``shown_topic()``: the topic everyone sees, which the topic field puts back when left unsaved."""

    def __init__(self, shown_topic: Callable[[], str]) -> None:
        super().__init__()
        self.title_label = title_label("conversationTitle")
        self.filter_edit = QLineEdit()
        self.filter_edit.setObjectName("filter")
        self.filter_edit.setPlaceholderText("Filter (Ctrl+F)")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition)
        self.filter_edit.setMaximumWidth(260)
        # What a screen reader calls each control without a label of its own (tests/ui/test_accessibility.py).
        self.filter_edit.setAccessibleName("Filter the conversation")
        self.match_label = QLabel()
        self.match_label.setObjectName("matchCount")
        self.match_label.hide()
        self.tree_button = QToolButton()
        self.tree_button.setIcon(icon("tree"))
        self.tree_button.setCheckable(True)
        self.tree_button.setChecked(True)
        self.tree_button.setToolTip("Reply tree (Ctrl+T toggles)")
        self.tree_button.setAccessibleName("Reply tree")
        self.time_button = QToolButton()
        self.time_button.setIcon(icon("timeline"))
        self.time_button.setCheckable(True)
        self.time_button.setToolTip("Time order: each reply shows what it answers (Ctrl+T toggles)")
        self.time_button.setAccessibleName("Time order")
        # Out of the Tab chain, and it takes the keys only when clicked or chosen from the menu
        # (ui.focus, rule 3): a stray Enter or letter there would change the topic for everyone.
        self.topic_edit = SharedField(shown_topic)
        self.topic_edit.setObjectName("topicEdit")
        self.topic_edit.setPlaceholderText("Add a topic for everyone…")
        self.topic_edit.setFrame(False)
        self.topic_edit.setMaxLength(300)
        self.topic_edit.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.topic_edit.setToolTip("The group's topic: any member may change it (Enter saves, Esc undoes)")
        self.topic_edit.setAccessibleName("Topic")
        self.pinned_button = QToolButton()
        self.pinned_button.setObjectName("pinnedButton")
        self.pinned_button.setAutoRaise(True)
        self.pinned_button.setToolTip("Pinned messages")
        self.pinned_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.pinned_menu = QMenu(self.pinned_button)
        self.pinned_button.setMenu(self.pinned_menu)
        self.pinned_button.hide()
        self.older_button = QPushButton()
        self.older_button.setFlat(True)
        self.older_button.setToolTip("Big groups open with their newest threads; show older ones too")
        self.older_button.hide()
        title_box = QVBoxLayout()
        title_box.setSpacing(0)
        title_box.addWidget(self.title_label)
        title_box.addWidget(self.topic_edit)
        header = QHBoxLayout(self)
        header.setContentsMargins(8, 6, 8, 6)
        header.setSpacing(0)  # as it had nested in the conversation's layout, whose spacing it took
        header.addLayout(title_box, 1)
        header.addWidget(self.pinned_button)
        header.addWidget(self.older_button)
        header.addWidget(self.filter_edit)
        header.addWidget(self.match_label)
        header.addWidget(self.tree_button)
        header.addWidget(self.time_button)

    def show_topic(self, topic: str) -> None:
        """``topic`` in the field, unless the reader is typing another there."""
        if not self.topic_edit.hasFocus() or self.topic_edit.text() == topic:
            self.topic_edit.setText(topic)
            self.topic_edit.setCursorPosition(0)

    def show_pinned(self, count: int) -> None:
        self.pinned_button.setText(f"Pinned ({count})")
        self.pinned_button.setVisible(count > 0)

    def show_older(self, hidden: int, what: str, stored: bool) -> None:
        """``hidden`` rows (``what``: threads or messages) kept out of view, and whether the store holds older."""
        self.older_button.setText(f"⤒ {hidden:,} older {what}" if hidden else "⤒ Older messages")
        self.older_button.setVisible(hidden > 0 or stored)

    def show_match_count(self, pattern: str, count: int) -> None:
        if not pattern:
            self.match_label.hide()
            return
        self.match_label.setText(f"{count} match{'es' if count != 1 else ''}" if count else "no matches")
        self.match_label.show()

    def show_time_ordered(self, on: bool) -> None:
        self.tree_button.setChecked(not on)
        self.time_button.setChecked(on)

    def clear_filter(self, quietly: bool = False) -> None:
        """Empty the filter; ``quietly``: without telling (a group opened anew)."""
        self.filter_edit.blockSignals(quietly)
        self.filter_edit.clear()
        self.filter_edit.blockSignals(False)


class ThreadBar(QFrame):
    """Shown while one thread is open on its own: what it is, and the way back to all threads."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("threadBar")
        self.back_button = QPushButton("← All threads")
        self.back_button.setFlat(True)
        self.back_button.setToolTip("Back to the whole conversation (Alt+Left)")
        self.thread_label = QLabel()
        self.thread_label.setTextFormat(Qt.TextFormat.PlainText)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 8, 2)
        layout.addWidget(self.back_button)
        layout.addWidget(self.thread_label, 1)
        self.hide()


class FirstSteps(QWidget):
    """What the conversation shows with no group: how to start, with a button for each way."""

    def __init__(self, steps: list[tuple[str, str, Callable[[], object]]]) -> None:
        """``steps``: (text, icon name, what it does) of each button."""
        super().__init__()
        self.empty_label = QLabel("Join a group (Find groups…) or create one to start talking.")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addWidget(self.empty_label)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.buttons: list[QPushButton] = []
        for text, icon_name, slot in steps:
            button = QPushButton(icon(icon_name), text)
            button.clicked.connect(slot)
            button.setAutoDefault(True)  # Enter presses the button with the keys, as Space does
            buttons.addWidget(button)
            self.buttons.append(button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        layout.addStretch(1)


class ConversationPane(QWidget):
    """A group's conversation: the header, the warning and catch-up bars, the reply tree or the time order
    (or the first steps while there is no group), a thread open on its own, and the compose box.  What
    the session controller asks of it is :class:`ui.controllers.sessions.ConversationShown`."""

    def __init__(self, backend: Backend, selection: Selection[GroupSession], view_filter: ThreadFilter,
                 sessions: SessionController, composer: ComposeController, files: FilesView,
                 first_steps: list[tuple[str, str, Callable[[], object]]], hooks: ConversationHooks) -> None:
        super().__init__()
        self.backend, self.selection, self.view_filter = backend, selection, view_filter
        self.sessions, self.composer, self.files_view = sessions, composer, files
        self.place_keys, self.open_link, self.link_title = hooks.place_keys, hooks.open_link, hooks.link_title
        self.menu_for, self.show_status, self.restored_thread = hooks.menu_for, hooks.show_status, hooks.restored_thread
        self.time_action: QAction | None = None  # the window's menu entry, kept in step with the buttons
        self._placing = False  # the view is being put back where the reader was: not a scroll of theirs

        self.header = header = ConversationHeader(lambda: self.current.shown_topic if self.current is not None else "")
        self.title_label, self.topic_edit, self.filter_edit = header.title_label, header.topic_edit, header.filter_edit
        self.pinned_menu, self.match_label = header.pinned_menu, header.match_label
        self.filter_edit.textChanged.connect(self._apply_filter)
        header.tree_button.clicked.connect(lambda: self.set_time_ordered(False))
        header.time_button.clicked.connect(lambda: self.set_time_ordered(True))
        self.topic_edit.saved.connect(composer.save_topic)
        self.topic_edit.done.connect(lambda: self.place_keys(Navigation.FIELD_LEFT))
        self.pinned_menu.aboutToShow.connect(self._fill_pinned_menu)
        header.older_button.clicked.connect(self.show_older)

        self.tree_view = ConversationView(tree=True)
        self.tree_view.setItemDelegate(MessageDelegate(self.tree_view, tree=True))
        self.tree_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        # Both views scroll by pixels: that needs every shown row's height, which the
        # models' windows of newest threads keep to a few thousand rows (app.bench.gui).
        self.timeline_view = ConversationView(tree=False)
        self.timeline_view.setObjectName("timeline")
        self.timeline_view.setItemDelegate(MessageDelegate(self.timeline_view, show_parent=True))
        self.timeline_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.tree_view.setAccessibleName("Conversation, as a reply tree")  # for a screen reader (test_accessibility)
        self.timeline_view.setAccessibleName("Conversation, in time order")
        for view in (self.tree_view, self.timeline_view):
            view.verticalScrollBar().valueChanged.connect(self.schedule_seen)
            view.verticalScrollBar().valueChanged.connect(self._scrolled)
            view.reply_requested.connect(composer.reply_to)
            view.link_activated.connect(self.open_link)
            view.reaction_clicked.connect(composer.toggle_reaction)
            view.file_clicked.connect(files.act)
            view.message_entered.connect(files.act_by_key)
            delegate = self._message_delegate(view)
            delegate.files, delegate.own_pid, delegate.link_title = files, backend.pid, self.link_title
            files.views.append(view)
            view.customContextMenuRequested.connect(partial(self._message_menu, view))
        self.tree_proxy = QSortFilterProxyModel(self)
        self.tree_proxy.setRecursiveFilteringEnabled(True)
        self.timeline_proxy = QSortFilterProxyModel(self)
        for proxy in (self.tree_proxy, self.timeline_proxy):
            proxy.setFilterRole(SearchRole)
            proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.tree_view)
        self.stack.addWidget(self.timeline_view)
        self.empty_page = FirstSteps(first_steps)
        self.stack.addWidget(self.empty_page)
        self.thread_bar = ThreadBar()
        self.thread_label = self.thread_bar.thread_label
        self.thread_bar.back_button.clicked.connect(self.close_thread)

        self.compose_box = box = ComposeBox(attach_button=files.attach_button())
        self.compose = box.compose
        box.reply_banner.cancelled.connect(composer.start_new_thread)
        box.compose.submitted.connect(composer.send_message)
        box.compose.textChanged.connect(composer.keep_draft)
        box.compose.edit_last_requested.connect(composer.edit_last)
        box.send_button.clicked.connect(composer.send_message)
        box.compose.files_given.connect(files.attach)
        box.compose.image_given.connect(files.attach_image)
        self.mention_completer = MentionCompleter(box.compose)
        box.compose.setAccessibleName("Message to the group")  # until a group is shown (show_session)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(header)
        self.warning_banner = WarningBanner()
        self.catch_up_bar = CatchUpBar()
        self.catch_up_bar.mark_read.connect(self.mark_caught_up_read)
        self.catch_up_bar.dismissed.connect(self._keep_caught_up_unread)
        for bar in (self.warning_banner, self.catch_up_bar):
            row = QHBoxLayout()
            row.setContentsMargins(8, 0, 8, 4)
            row.addWidget(bar)
            layout.addLayout(row)
        layout.addWidget(self.thread_bar)
        layout.addWidget(self.stack, 1)
        layout.addWidget(box)
        # Counted once a burst of arrivals is in (a scan of the unread), not per arrival.
        self._catch_up_timer = QTimer(self, singleShot=True, interval=300)
        self._catch_up_timer.timeout.connect(self._count_caught_up)
        self._seen_timer = QTimer(self, singleShot=True, interval=SEEN_DELAY_MS)
        self._seen_timer.timeout.connect(lambda: self.mark_visible_read())  # looked up when due (tests replace it)
        self._follow_timer = QTimer(self, singleShot=True, interval=100)
        self._follow_timer.timeout.connect(lambda: self.current_view().scrollToBottom())

    @property
    def current(self) -> GroupSession | None:
        """The session of the group shown."""
        return self.selection.session

    @property
    def time_ordered(self) -> bool:
        return self.view_filter.time_ordered

    def _shown(self) -> GroupSession:
        """The current session, for what is only done while a group is shown."""
        session = self.selection.session
        assert session is not None, "no group is shown"
        return session

    def show_session(self, session: GroupSession | None) -> None:
        """The group just opened (None: none is): its heading, its conversation where it opens, and a
        compose box that writes to it."""
        self.header.clear_filter(quietly=True)
        self.view_filter.set_text("")
        self._apply_highlight("")
        header, box = self.header, self.compose_box
        enabled = session is not None
        for widget in (box.compose, box.send_button, box.attach_button, header.filter_edit, header.tree_button,
                       header.time_button, header.topic_edit):
            if widget is not None:
                widget.setEnabled(enabled)
        header.topic_edit.setVisible(enabled)  # no group, no topic: "Add a topic for everyone…" would offer one
        if session is None:
            header.title_label.setText("No group")
            header.topic_edit.clear()
            header.pinned_button.hide()
            self.stack.setCurrentWidget(self.empty_page)
            self.thread_bar.hide()
            return
        self.show_heading(session)
        self.update_pinned_button()
        self.set_divider(session)
        self._set_view_models()
        self.expand_default(session)
        if session.loaded:
            self.open_position(session)

    def _set_view_models(self) -> None:
        session = self._shown()
        filtering = self.view_filter.active
        tree_source: QAbstractItemModel = session.thread if session.thread is not None else session.tree_model
        tree_model: QAbstractItemModel
        timeline_model: QAbstractItemModel | None
        if filtering:
            if self.tree_proxy.sourceModel() is not tree_source:
                self.tree_proxy.setSourceModel(tree_source)
            if self.timeline_proxy.sourceModel() is not session.timeline:
                self.timeline_proxy.setSourceModel(session.timeline)
            tree_model, timeline_model = self.tree_proxy, self.timeline_proxy
        else:
            tree_model, timeline_model = tree_source, session.timeline
        if session.thread is not None:
            timeline_model = None  # one thread is a tree; the time order is of the whole group
            self.view_filter.time_ordered = False
        # The unfiltered views show the models directly: a proxy over 100,000 rows costs
        # more than it gives, and filtering swaps one in.
        if self.tree_view.model() is not tree_model:
            self.tree_view.setModel(tree_model)
            self.tree_view.selectionModel().currentChanged.connect(self._on_current_message)
        self.thread_bar.setVisible(session.thread is not None)
        self.header.time_button.setEnabled(session.thread is None)
        if self.time_action is not None:
            self.time_action.setEnabled(session.thread is None)
        # Only the visible view holds a model: a hidden view would still re-lay out on every insert.
        if not self.time_ordered:
            timeline_model = None
        if self.timeline_view.model() is not timeline_model:
            self.timeline_view.setModel(timeline_model)
            if timeline_model is not None:
                self.timeline_view.selectionModel().currentChanged.connect(self._on_current_message)
        self.stack.setCurrentWidget(self.timeline_view if self.time_ordered else self.tree_view)
        self._show_empty_hint(session)
        self.update_catch_up()
        self._sync_selection()
        self.update_older_button()
        self.place_keys(Navigation.MODEL_RESET)

    def update_older_button(self) -> None:
        session = self.current
        hidden = 0
        if session is not None:
            hidden = session.timeline.hidden if self.time_ordered else session.tree.hidden_threads
        stored = session is not None and session.thread is None and not session.history_complete and session.loaded
        self.header.show_older(hidden, "messages" if self.time_ordered else "threads", stored)

    def show_older(self) -> None:
        """Older rows above the reader, who stays where they are: hidden ones, else a page from the store."""
        session = self.current
        if session is None or session.thread is not None:
            return
        place = self.hold_place(session)
        if self.time_ordered:
            shown = session.timeline.show_older()
        else:
            shown = session.tree.show_older()
        if shown:
            self._restore_place(place)
        else:
            self.sessions.load_older(session)
        self.update_older_button()

    def _scrolled(self, value: int) -> None:
        # Scroll-back: near the top, the older rows come (the way Element paginates); back at the
        # end after reading far back, the oldest are let go again.
        session = self.current
        view = self.current_view()
        if (session is not None and value >= view.verticalScrollBar().maximum() - AT_END and value > 0
                and not self._placing and not self.view_filter.active):
            QTimer.singleShot(0, view, self._let_older_go)  # dropped if the view goes first (the window closing)
        if (session is None or session.thread is not None or not session.opened or session.loading_older
                or self._placing or self.sender() is not view.verticalScrollBar() or value > SCROLL_BACK_MARGIN):
            return
        hidden = session.timeline.hidden if self.time_ordered else session.tree.hidden_threads
        if hidden or not session.history_complete:
            QTimer.singleShot(0, view, self.show_older)  # not inside the scroll bar's own signal

    def _let_older_go(self) -> None:
        session = self.current
        view = self.current_view()
        if session is None or view.verticalScrollBar().value() < view.verticalScrollBar().maximum() - AT_END:
            return
        if self.sessions.let_older_go(session):
            self.expand_default(session)
            view.scrollToBottom()
            self.update_older_button()

    def hold_place(self, session: GroupSession) -> ReaderPlace | None:
        """The message at the top of the view on show and its row's top, to keep it there across inserts above."""
        if session is not self.current:
            return None
        view = self.current_view()
        top = view.indexAt(QPoint(4, 2))
        if not top.isValid():
            return None
        return top.data(MessageRole).mid, view.visualRect(top).top()

    def _restore_place(self, place: ReaderPlace | None) -> None:
        if place is None:
            return
        index = self._view_index(place[0])
        if not index.isValid():
            return
        view = self.current_view()
        view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtTop)
        bar = view.verticalScrollBar()
        bar.setValue(bar.value() - place[1])

    def older_loaded(self, session: GroupSession, place: ReaderPlace | None, mids: list[Mid]) -> None:
        """A page of older history came in above the reader: make it rows, keep the reader's place to the pixel."""
        if session is not self.current:
            return
        if self.time_ordered:
            session.timeline.show_older(len(mids))
        elif session.thread is None and self.tree_view.model() is session.tree_model:
            node_of = session.tree.node
            for mid in mids:
                node = node_of(mid)
                if node is not None and node.children:
                    self.tree_view.expand(session.tree_model.index_for(mid))
        self._restore_place(place)
        self.update_older_button()
        self.place_keys(Navigation.PAGE_LOADED)

    def expand_default(self, session: GroupSession) -> None:
        if session is not self.current:
            return
        if session.thread is not None:
            if self.tree_view.model() is session.thread:
                self.tree_view.expandAll()
            return
        if self.tree_view.model() is not session.tree_model:
            return
        if len(session.tree) <= EXPAND_ALL_LIMIT:
            self.tree_view.expandAll()
        else:
            for node in session.tree.arrival[-EXPAND_RECENT:]:
                self.expand_path(node.message.mid)
            for mid in list(session.tree.unread)[:EXPAND_RECENT]:
                self.expand_path(mid)
        self.update_older_button()

    def _show_empty_hint(self, session: GroupSession) -> None:
        """What an empty conversation says: loading, or how to start (a filter that matches
        nothing says so beside the filter instead)."""
        hint = "" if self.view_filter.active else EMPTY_GROUP_HINT if session.loaded else "Loading messages…"
        for view in (self.tree_view, self.timeline_view):
            view.empty_hint = hint
            view.viewport().update()

    def open_position(self, session: GroupSession) -> None:
        """A group opens at its first unread message, else at its end, where the newest talk is.

        Scrolled by pixels, the end is the last row's bottom at the viewport's bottom: never an
        empty area.  A reply in an old thread is the Threads pane's top entry; the tree opens
        at the end so that it follows new messages, and only rows of recent threads are kept.
        """
        if session is self.current:
            self._show_empty_hint(session)  # loaded now
        if session is not self.current or session.opened or not len(session.tree):
            return
        session.opened = True
        self.composer.show_target()  # a restored draft's target is known now
        restored = self.restored_thread(session.gid)
        if restored is not None:
            self.open_thread(restored)  # the thread open at the last close (gone since: not opened)
        view = self.current_view()
        unread = session.tree.unread_in_arrival_order()
        if not unread:
            view.scrollToBottom()
            return
        target = unread[0]
        if self.time_ordered:
            session.timeline.reveal(target)
        else:
            session.tree.reveal(target)
            self.expand_path(target)
        index = self._view_index(target)
        if index.isValid():
            view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtTop)

    def set_divider(self, session: GroupSession) -> None:
        for view in (self.tree_view, self.timeline_view):
            delegate = self._message_delegate(view)
            if delegate.divider != session.divider:
                delegate.set_divider(session.divider)
                view.scheduleDelayedItemsLayout()

    def _source_index(self, mid: Mid) -> QModelIndex:
        """The index of ``mid`` in the tree view's source model (the whole tree, or the open thread)."""
        session = self._shown()
        if session.thread is not None:
            return session.thread.index_for(mid)
        return session.tree_model.index_for(mid)

    def expand_path(self, mid: Mid) -> None:
        session = self._shown()
        model = self.tree_view.model()
        for ancestor in session.tree.ancestors(mid):
            index = self._source_index(ancestor)
            if model is self.tree_proxy:
                index = self.tree_proxy.mapFromSource(index)
            if index.isValid() and not self.tree_view.isExpanded(index):
                self.tree_view.expand(index)

    def show_topic(self, session: GroupSession) -> None:
        self.header.show_topic(session.shown_topic)

    def update_pinned_button(self) -> None:
        self.header.show_pinned(len(self.current.pinned) if self.current is not None else 0)

    def _fill_pinned_menu(self) -> None:
        self.pinned_menu.clear()
        if self.current is None:
            return
        for message in self.pinned_messages():
            mid = message.mid
            label = f"{message.sender_name}: {root_text(message, 60, member_names(self.current.view))}"
            self.pinned_menu.addAction(label, partial(self.select_message, mid))

    def pinned_messages(self) -> list[ChatMessage]:
        """The current group's pinned messages, in delivery order."""
        if self.current is None or not self.current.pinned:
            return []
        pinned = self.current.pinned
        return [node.message for node in self.current.tree.arrival if node.message.mid in pinned]

    def clear_filter(self) -> None:
        if self.filter_edit.text():
            self.filter_edit.clear()

    def show_heading(self, session: GroupSession) -> None:
        self.title_label.setText(session.title)
        self.compose.setAccessibleName(f"Message to {session.title}")  # a screen reader says where it goes
        self.show_topic(session)

    def forget_rendered(self, mids: list[Mid]) -> None:
        for view in (self.tree_view, self.timeline_view):
            delegate = self._message_delegate(view)
            for mid in mids:
                delegate.forget(mid)

    def relayout_messages(self) -> None:
        for view in (self.tree_view, self.timeline_view):
            view.scheduleDelayedItemsLayout()
            view.viewport().update()

    def reader_place(self, session: GroupSession) -> tuple[bool, ReaderPlace | None]:
        """Whether the view on show is at its end, and the reader's place in the tree if ``session`` is shown."""
        view = self.current_view()
        at_bottom = view.verticalScrollBar().value() >= view.verticalScrollBar().maximum() - AT_END
        reading = None  # the row at the top of the tree, and where it is: the reader's place
        if (session is self.current and not at_bottom and view is self.tree_view
                and view.model() is session.tree_model):
            top = view.indexAt(QPoint(4, 2))  # the layout is fresh before the insert: cheap
            if top.isValid():
                reading = (top.data(MessageRole).mid, view.visualRect(top).top())
        return at_bottom, reading

    def restore_reader_place(self, session: GroupSession, place: ReaderPlace) -> None:
        # Not a scroll of the reader's: older rows hidden above them (trimming) must not come back at once.
        self._placing = True
        try:
            self.tree_view.scrollTo(session.tree_model.index_for(place[0]), QAbstractItemView.ScrollHint.PositionAtTop)
            bar = self.tree_view.verticalScrollBar()
            bar.setValue(bar.value() - place[1])
        finally:
            self._placing = False

    def update_catch_up(self) -> None:
        self._catch_up_timer.start()

    def _caught_up(self, session: GroupSession) -> list[Mid]:
        return session.tree.caught_up_unread(CATCH_UP_LAG_MS)

    def _count_caught_up(self) -> None:
        session = self.current
        if session is None or session.catch_up_dismissed or len(session.tree.unread) < CATCH_UP_MIN:
            self.catch_up_bar.show_count(0)
            return
        count = len(self._caught_up(session))
        self.catch_up_bar.show_count(count if count >= CATCH_UP_MIN else 0)

    def mark_caught_up_read(self) -> None:
        """Mark the history that came in late read; what was heard live stays unread."""
        session = self.current
        if session is not None:
            session.tree.mark_read(self._caught_up(session))
            self.catch_up_bar.show_count(0)

    def _keep_caught_up_unread(self) -> None:
        if self.current is not None:
            self.current.catch_up_dismissed = True
        self.catch_up_bar.show_count(0)

    def keep_reader_place(self, session: GroupSession, place: ReaderPlace) -> None:
        """Rows inserted above the reader (replies to older threads, a join's history syncing in)
        push what they read down: put it back where it was, to the pixel."""
        index = session.tree_model.index_for(place[0])
        if index.isValid() and self.tree_view.visualRect(index).top() != place[1]:
            self.restore_reader_place(session, place)

    @staticmethod
    def _message_delegate(view: QAbstractItemView) -> MessageDelegate:
        delegate = view.itemDelegate()
        assert isinstance(delegate, MessageDelegate)
        return delegate

    def follow_end(self) -> None:
        """Scroll to the end once a burst of arrivals is in (deferred and coalesced: scrolling forces a layout)."""
        self._follow_timer.start()

    def current_view(self) -> ConversationView:
        return self.timeline_view if self.time_ordered else self.tree_view

    def _on_current_message(self, current: QModelIndex, _previous: QModelIndex) -> None:
        # Selecting is reading: it never changes what the compose box answers.
        message = current.data(MessageRole) if current.isValid() else None
        if current.model() is self.current_view().model():
            self.selection.select(message.mid if message is not None else None)
        if message is not None and self.current is not None:
            self.current.tree.mark_read([message.mid])

    def _sync_selection(self) -> None:
        """The selection is the current row of the view on show (a new model has none)."""
        index = self.current_view().currentIndex()
        message = index.data(MessageRole) if index.isValid() else None
        self.selection.select(message.mid if message is not None else None)

    def selected_message(self) -> ChatMessage | None:
        session, mid = self.selection.session, self.selection.message
        return session.tree.message(mid) if session is not None and mid is not None else None

    def schedule_seen(self, *_args) -> None:
        session = self.current
        if session is not None and (session.tree.unread or (session.thread is not None and session.thread.tree.unread)):
            self._seen_timer.start()

    def mark_visible_read(self) -> None:
        """Messages on screen in the active window count as seen."""
        session = self.current
        thread_unread = session is not None and session.thread is not None and session.thread.tree.unread
        if session is None or not (session.tree.unread or thread_unread) or not self.window().isActiveWindow():
            return
        self.current_view_mids_visible(mark=True)

    def current_view_mids_visible(self, mark: bool = False) -> list[Mid]:
        visible = self.current_view().visible_mids()
        if mark and self.current is not None:
            self.current.tree.mark_read(visible)
            if self.current.thread is not None:
                self.current.thread.tree.mark_read(visible)
                self.sessions.read_changed(self.current)
        return visible

    def _view_index(self, mid: Mid) -> QModelIndex:
        session = self._shown()
        if self.time_ordered:
            index = session.timeline.index_for(mid)
            return self.timeline_proxy.mapFromSource(index) if self.timeline_view.model() is self.timeline_proxy else index
        index = self._source_index(mid)
        return self.tree_proxy.mapFromSource(index) if self.tree_view.model() is self.tree_proxy else index

    def select_message(self, mid: Mid) -> bool:
        """Show and select a message of the current group (the reply target stays as it is)."""
        if self.current is None:
            return False
        if self.current.thread is not None and self.current.thread.tree.node(mid) is None:
            self.close_thread()
        if self.time_ordered:
            self.current.timeline.reveal(mid)
        else:
            self.current.tree.reveal(mid)
            self.expand_path(mid)
        self.update_older_button()
        index = self._view_index(mid)
        if not index.isValid():
            return False
        view = self.current_view()
        view.selectionModel().setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        return True

    def set_time_ordered(self, on: bool) -> None:
        if on and self.current is not None and self.current.thread is not None:
            self.close_thread()
        message = self.selected_message() if self.current is not None else None
        selected = message.mid if message is not None else None
        self.view_filter.time_ordered = on
        if self.time_action is not None:
            self.time_action.setChecked(on)
        self.header.show_time_ordered(on)
        if self.current is not None:
            self._set_view_models()
            if not on:
                self.expand_default(self.current)
            if selected is not None:
                self.select_message(selected)
            self.schedule_seen()
            self.place_keys(Navigation.ORDER_CHANGED)

    def focus_filter(self) -> None:
        self.filter_edit.setFocus()
        self.filter_edit.selectAll()

    def _apply_filter(self, text: str) -> None:
        pattern = self.view_filter.set_text(text)
        if self.current is None:
            return
        selected = self.selection.message
        self.tree_proxy.setFilterFixedString(pattern)
        self.timeline_proxy.setFilterFixedString(pattern)
        self._set_view_models()
        self._apply_highlight(pattern)
        if pattern:
            self.tree_view.expandAll()
        else:
            self.expand_default(self.current)
        if selected is not None:
            self.select_message(selected)

    def _apply_highlight(self, pattern: str) -> None:
        """Matches highlighted, ancestors shown for context dimmed, and the matches counted."""
        for view in (self.tree_view, self.timeline_view):
            self._message_delegate(view).set_highlight(pattern)
            view.viewport().update()
        self.header.show_match_count(pattern if self.current is not None else "", len(self.matches()))

    def matches(self) -> list[Mid]:
        """The messages matching the filter, in the order of the view shown."""
        if not self.view_filter.active or self.current is None:
            return []
        model = self.current_view().model()
        return self.view_filter.matching(self._messages_in_view_order(model)) if model is not None else []

    def _messages_in_view_order(self, model: QAbstractItemModel) -> Iterator[ChatMessage]:
        index = model.index(0, 0)
        while index.isValid():  # in view order: the proxy keeps matches and their ancestors
            if not is_notice(index.data(MessageRole)):  # a notice is not a message to step to
                yield index.data(MessageRole)
            index = self._next_row(model, index)

    @staticmethod
    def _next_row(model: QAbstractItemModel, index: QModelIndex) -> QModelIndex:
        """Depth first through every row of ``model`` (expanded or not)."""
        if model.rowCount(index):
            return model.index(0, 0, index)
        while index.isValid():
            sibling = index.siblingAtRow(index.row() + 1)
            if sibling.isValid():
                return sibling
            index = index.parent()
        return QModelIndex()

    def find_match(self, step: int) -> None:
        """F3 / Shift+F3: select the next / previous match of the filter."""
        found = self.matches()
        if not found:
            self.show_status("No matches" if self.view_filter.active else "Type in the filter (Ctrl+F) first", 3000)
            return
        target = self.view_filter.step(found, self.selection.message, step)
        self.select_message(target)
        self.match_label.setText(f"{found.index(target) + 1} of {len(found)}")

    def open_thread(self, mid: Mid, then: Callable[[], object] | None = None,
                    missing: Callable[[], object] | None = None) -> bool:
        """Show the thread of ``mid`` on its own, read from the store; "← All threads" goes back.
        ``then`` runs once it is shown, ``missing`` if the store holds no such message."""
        session = self.current
        if session is None:
            return False
        if session.thread is not None and session.thread.tree.node(mid) is not None:
            if then is not None:
                then()
            return True
        gid = session.gid

        def loaded(messages: list[ChatMessage]) -> None:
            if self.current is not session or not messages:
                if missing is not None:
                    missing()
                return
            self._show_thread(session, messages)
            if then is not None:
                then()

        def failed(_error: Exception) -> None:
            if missing is not None:
                missing()

        self.backend.call(lambda peer: peer.thread(gid, peer.thread_root(gid, mid)), on_result=loaded, on_error=failed)
        return True

    def _show_thread(self, session: GroupSession, messages: list[ChatMessage]) -> None:
        if self.time_ordered:
            self.set_time_ordered(False)
        read = session.read_marks
        unread = [m.mid for m in messages if m.mid in session.tree.unread or (
            session.tree.node(m.mid) is None and read is not None and m.order not in read
            and m.sender != self.backend.pid)]
        session.thread = StoredThreadModel(messages, self.backend.pid, unread, self)
        root = session.thread.root.message
        self.composer.thread_opened(root.mid)
        self.thread_label.setText(f"Thread: {root.sender_name} — {root_text(root, 80, member_names(session.view), self.link_title)}")
        self._set_view_models()
        self.tree_view.expandAll()
        first_unread = next(iter(session.thread.tree.unread_in_arrival_order()), None)
        index = session.thread.index_for(first_unread or root.mid)
        if self.tree_view.model() is self.tree_proxy:
            index = self.tree_proxy.mapFromSource(index)
        self.tree_view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtTop)
        self.schedule_seen()
        self.place_keys(Navigation.THREAD_OPENED)

    def close_mention_popup(self) -> bool:
        """Esc with the @-completer's list open closes only it."""
        popup = self.compose.mention_popup
        if popup is None or not popup.isVisible():
            return False
        popup.hide()
        return True

    def leave_header_field(self) -> bool:
        """Esc in the topic undoes what was typed there, in the filter (or with a filter set) clears it;
        the keys go back to the compose box."""
        if self.topic_edit.hasFocus():
            self.topic_edit.undo_typing()
        elif self.filter_edit.hasFocus() or self.filter_edit.text():
            self.filter_edit.clear()
        else:
            return False
        self.compose.setFocus()
        return True

    def close_thread(self) -> None:
        session = self.current
        if session is None or session.thread is None:
            return
        root_mid = session.thread.root.message.mid
        session.thread = None
        self.composer.thread_closed()
        self._set_view_models()
        self.expand_default(session)
        self.select_message(root_mid)
        self.place_keys(Navigation.THREAD_CLOSED)

    def _message_menu(self, view: QAbstractItemView, pos: QPoint) -> None:
        index = view.indexAt(pos)
        message: ChatMessage | None = index.data(MessageRole) if index.isValid() else None
        if message is None or is_notice(message):  # a notice is no message: nothing to answer, pin or copy
            return
        menu = self.menu_for(message)
        menu.popup(view.viewport().mapToGlobal(pos))

    def focus_topic(self) -> None:
        """The topic field is out of the Tab chain (a stray Enter there changes it for everyone);
        this is its way in from the keyboard."""
        if self.current is not None:
            self.topic_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
            self.topic_edit.selectAll()
