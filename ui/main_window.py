"""The main window (the thesis's ChatConsole): groups, reply tree, compose box, members, status.

The window is the view: it builds the panes, menus and status bar, shows one
group's session at a time (tree or time order, one thread on its own, the
filter) and keeps the reader's place.  Its controllers
(:mod:`ui.controllers`) hold the rest, as qutebrowser keeps its completion
model, view and controller apart: sessions and read state, compose, status,
and joins; each sees the window only through its own view protocol.  What the
reader has chosen (the group and message selected, what the compose box
answers, tree or time order and the filter) is Qt-free (:mod:`ui.model`) and
shared by the window and the controllers.  It talks to the middleware only through a
:class:`~ui.bridge.Backend`: typed calls with callbacks, events as signals,
all on the GUI thread.  Each joined group has a
:class:`~ui.controllers.sessions.GroupSession` holding its tree and
time-ordered models, which live as long as the window, so switching groups
keeps unread marks.

What is new is hard to miss: unread messages carry a coloured bar and
"● new", the path to each new message is expanded, the groups pane shows an
unread badge, and "Next unread" (Ctrl+U) walks them in arrival order.  A
message counts as seen once selected, or after it has been on screen for a
moment while the window is active.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path
from functools import partial
from typing import Callable, Iterator

from PySide6.QtCore import QAbstractItemModel, QItemSelectionModel, QModelIndex, QPoint, QSortFilterProxyModel, Qt, QTimer, QUrl
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QDesktopServices, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QMenu,
    QFileDialog,
    QHBoxLayout,
    QMainWindow,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from ..middleware.types import ChatMessage, Mid, format_mid

from .bridge import Backend, describe_error
from .delegate import MessageDelegate, root_text
from .dialogs import (WarningLogWindow, parse_message_link, show_about, show_shortcuts)
from .direct_api import CONVERSATION_PREFIX, conversation_peer
from .direct_pane import DirectPane
from .discovery_window import DiscoveryWindow
from .focus import Navigation, Place, after
from .search_window import SearchWindow
from .message_model import MessageRole, SearchRole, StoredThreadModel
from .controllers.compose import ComposeController
from .controllers.direct import DirectController
from .controllers.team import TeamController
from .controllers.joins import JoinController
from .controllers.sessions import GroupSession, ReaderPlace, SessionController
from .model.sessions import member_names
from .mentions import MENTION_KEYS, MENTIONS_LISTED, MentionCompleter, MentionsWindow
from .controllers.status import StatusController
from .files_view import FilesView
from .notices import is_notice
from .notifier import Notifier
from .panes.conversation import ConversationHeader, FirstSteps, ThreadBar
from .panes.groups import GroupsPane
from .panes.message_menu import message_menu
from .model.settings import read_setting, write_setting
from .panes.layout import MINIMUM_WIDTH, PaneLayout
from .panes.side import MembersPane, ThreadsPane
from .panes.status import StatusPane
from .model.state import ComposeTarget, OnShow, Selection, ThreadFilter
from .resources import app_icon, icon
from .widgets import (
    ComposeBox,
    ConversationView,
    CatchUpBar,
    TypingGoesTo,
    WarningBanner,
)

log = logging.getLogger(__name__)

AT_END = 4  # pixels from the bottom that still count as the end (scrolling to the last row can stop short)
SCROLL_BACK_MARGIN = 200  # pixels from the top at which the older history loads
EXPAND_ALL_LIMIT = 5000  # bigger groups open with only their recent threads expanded
EXPAND_RECENT = 150
SEEN_DELAY_MS = 1500
MAX_WAY_BACK = 50  # places Back (Alt+Left) remembers
# Keys the compose box and the views take themselves (no menu action holds them).
TYPING_KEYS = (("Send the message", "Enter"), ("New line in the message", "Shift+Enter"),
               ("Edit your last message (empty compose box)", "Up"),
               ("Cancel the reply, edit or filter; close the thread", "Esc"),
               ("Move between the panes", "Tab"),
               ("Download the selected file, or show it in its folder", "Enter"))
# A group holding this many unread messages that reached this peer CATCH_UP_LAG_MS or more
# after they were written (a big join's history, a long absence) offers to mark those read.
CATCH_UP_MIN = 200
CATCH_UP_LAG_MS = 10 * 60 * 1000
EMPTY_GROUP_HINT = ("No messages here yet.\n\nWrite the first one below: it starts a thread. "
                    "Replies show under the message they answer (Reply, or a click on ↩).")


class MainWindow(QMainWindow):
    def __init__(self, backend: Backend, parent: QWidget | None = None, settings=None) -> None:
        super().__init__(parent)
        self.backend = backend
        # Per-group switches kept across runs (a QSettings in the app; a dict in tests).
        self.settings = settings if settings is not None else {}
        # What the reader has chosen, shared with the controllers (Qt-free: ui/model/).
        self.selection: Selection[GroupSession] = Selection()
        self.compose_target = ComposeTarget()
        self.view_filter = ThreadFilter()
        # What was on show at the last close, opened again once its group or conversation is known.
        self.restoring = OnShow.parse(read_setting(self.settings, "window/on_show"))
        self.setWindowTitle("M2MC chat")
        self.setWindowIcon(app_icon())
        self.resize(1100, 700)

        # A window of its own, not a child: it must not stay above the main window.
        self.discovery = DiscoveryWindow(backend)
        self.notifier = Notifier(self, open_target=lambda target: self.show_message(*target))
        self.warning_log = WarningLogWindow(self)
        # Each controller hears the backend's events for its concern; nothing reaches them
        # before the panes are built (events come through the event loop).
        self.session_controller = SessionController(backend, self.selection, self.compose_target, self.view_filter,
                                                    self, self.settings, self)
        self.join_controller = JoinController(backend, self.selection, self.session_controller, self, self)
        self.status_controller = StatusController(backend, self.selection, self.session_controller, self, self)
        self.compose_controller = ComposeController(backend, self.selection, self.compose_target, self, self,
                                                    settings=self.settings)
        self.files_view = FilesView(self, backend)
        self.discovery.join_requested.connect(self.join_controller.join_group)
        self.discovery.create_requested.connect(self.join_controller.create_group)
        self.discovery.join_by_id_requested.connect(self.join_controller.join_by_id)
        self.discovery.add_peer_requested.connect(self.join_controller.add_peer)
        
        self._build_panes()
        self.direct_controller = DirectController(backend, self, self.settings, self)
        self.team_controller = TeamController(backend, self.selection, self.session_controller, self.dialog_parent,
                                              self)
        self.direct_controller.member_actions.append(self.team_controller.add_actions)
        self.team_controller.compose_widgets = self.compose_widgets
        self.search_window = SearchWindow(backend, self.session_controller.sessions, self.show_message,
                                          self.direct_controller.conversations)
        self.session_controller.other_unread = self.direct_controller.unread_total
        self._build_actions()
        self.status_pane = StatusPane(self)
        self.setStatusBar(self.status_pane)
        self.discovery.alone_changed.connect(self.status_pane.show_alone)
        self.status_controller.refresh()
        self._name_controls()
        self.pane_layout.restore_sizes()

        self._placing = False  # the view is being put back where the reader was: not a scroll of theirs
        # (gid, open thread, selected) before a jump; a direct conversation's place has its conversation_key as gid
        self._way_back: list[tuple[str, Mid | None, Mid | None]] = []
        self._seen_timer = QTimer(self, singleShot=True, interval=SEEN_DELAY_MS)
        self._seen_timer.timeout.connect(self.mark_visible_read)
        self._follow_timer = QTimer(self, singleShot=True, interval=100)
        self._follow_timer.timeout.connect(lambda: self.current_view().scrollToBottom())
        self.show_session(None)

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

    # -- layout -------------------------------------------------------------------------

    def _build_panes(self) -> None:
        self.groups_pane = GroupsPane(self.join_controller.show_discovery,
                                      lambda gid, menu: self._notify_menu(lambda: gid, menu))
        self.session_controller.sessions.listen(self.groups_pane)
        self.groups_pane.group_chosen.connect(self._on_group_selected)
        self.group_list, self.direct_list = self.groups_pane.group_list, self.groups_pane.direct_list

        self.header = header = ConversationHeader(lambda: self.current.shown_topic if self.current is not None else "")
        self.title_label, self.topic_edit, self.filter_edit = header.title_label, header.topic_edit, header.filter_edit
        self.pinned_button, self.pinned_menu = header.pinned_button, header.pinned_menu
        self.older_button, self.match_label = header.older_button, header.match_label
        self.tree_button, self.time_button = header.tree_button, header.time_button
        self.filter_edit.textChanged.connect(self._apply_filter)
        self.tree_button.clicked.connect(lambda: self.set_time_ordered(False))
        self.time_button.clicked.connect(lambda: self.set_time_ordered(True))
        self.topic_edit.saved.connect(self.compose_controller.save_topic)
        self.topic_edit.done.connect(lambda: self.apply_focus(Navigation.FIELD_LEFT))
        self.pinned_menu.aboutToShow.connect(self._fill_pinned_menu)
        self.older_button.clicked.connect(self.show_older)

        self.tree_view = ConversationView(tree=True)
        self.tree_view.setItemDelegate(MessageDelegate(self.tree_view, tree=True))
        self.tree_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        # Both views scroll by pixels: that needs every shown row's height, which the
        # models' windows of newest threads keep to a few thousand rows (app.bench.gui).
        self.timeline_view = ConversationView(tree=False)
        self.timeline_view.setObjectName("timeline")
        self.timeline_view.setItemDelegate(MessageDelegate(self.timeline_view, show_parent=True))
        self.timeline_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        for view in (self.tree_view, self.timeline_view):
            view.verticalScrollBar().valueChanged.connect(self.schedule_seen)
            view.verticalScrollBar().valueChanged.connect(self._scrolled)
            view.reply_requested.connect(self.compose_controller.reply_to)
            view.link_activated.connect(self.open_link)
            view.reaction_clicked.connect(self.compose_controller.toggle_reaction)
            view.file_clicked.connect(self.files_view.act)
            view.message_entered.connect(self.files_view.act_by_key)
            self._message_delegate(view).files = self.files_view
            self.files_view.views.append(view)
            self._message_delegate(view).own_pid = self.backend.pid
            self._message_delegate(view).link_title = self.link_title
            view.customContextMenuRequested.connect(partial(self._message_menu, view))
        self.tree_proxy = QSortFilterProxyModel(self)
        self.tree_proxy.setRecursiveFilteringEnabled(True)
        self.tree_proxy.setFilterRole(SearchRole)
        self.tree_proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.timeline_proxy = QSortFilterProxyModel(self)
        self.timeline_proxy.setFilterRole(SearchRole)
        self.timeline_proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.stack = QStackedWidget()
        self.stack.addWidget(self.tree_view)
        self.stack.addWidget(self.timeline_view)
        joins = self.join_controller
        self.empty_page = FirstSteps([("Find groups…", "discover", joins.show_discovery),
                                      ("Create group…", "create", joins.create_group),
                                      ("Join from invite…", "join", joins.join_from_invite)])
        self.first_steps = self.empty_page.buttons
        self.stack.addWidget(self.empty_page)

        self.thread_bar = ThreadBar()
        self.back_button, self.thread_label = self.thread_bar.back_button, self.thread_bar.thread_label
        self.back_button.clicked.connect(self.close_thread)

        self.attach_button = self.files_view.attach_button()
        self.compose_box = box = ComposeBox(attach_button=self.attach_button)
        self.compose, self.send_button = box.compose, box.send_button
        self.reply_banner, self.compose_error = box.reply_banner, box.compose_error
        self.reply_banner.cancelled.connect(self.compose_controller.start_new_thread)
        self.compose.submitted.connect(self.compose_controller.send_message)
        self.compose.textChanged.connect(self.compose_controller.keep_draft)
        self.compose.edit_last_requested.connect(self.compose_controller.edit_last)
        self.mention_completer = MentionCompleter(self.compose)
        self.mentions_window: MentionsWindow | None = None
        self.send_button.clicked.connect(self.compose_controller.send_message)
        self.compose.files_given.connect(self.files_view.attach)
        self.compose.image_given.connect(self.files_view.attach_image)
        self.setAcceptDrops(True)
        self.installEventFilter(self.files_view)  # files dropped anywhere on the window are attached

        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.setContentsMargins(0, 0, 0, 0)
        centre_layout.setSpacing(0)
        centre_layout.addWidget(self.header)
        self.warning_banner = WarningBanner()
        self.warning_banner.show_all.connect(self.status_controller.show_warning_log)
        self.warning_banner.dismissed.connect(self.status_controller.dismiss_warning)
        banner_row = QHBoxLayout()
        banner_row.setContentsMargins(8, 0, 8, 4)
        banner_row.addWidget(self.warning_banner)
        centre_layout.addLayout(banner_row)
        self.catch_up_bar = CatchUpBar()
        self.catch_up_bar.mark_read.connect(self.mark_caught_up_read)
        self.catch_up_bar.dismissed.connect(self._keep_caught_up_unread)
        catch_up_row = QHBoxLayout()
        catch_up_row.setContentsMargins(8, 0, 8, 4)
        catch_up_row.addWidget(self.catch_up_bar)
        centre_layout.addLayout(catch_up_row)
        # Counted once a burst of arrivals is in (a scan of the unread), not per arrival.
        self._catch_up_timer = QTimer(self, singleShot=True, interval=300)
        self._catch_up_timer.timeout.connect(self._count_caught_up)
        centre_layout.addWidget(self.thread_bar)
        centre_layout.addWidget(self.stack, 1)
        centre_layout.addWidget(self.compose_box)

        self.members_pane = MembersPane()
        self.threads_pane = ThreadsPane(self.link_title)
        self.threads_pane.thread_chosen.connect(self.open_thread)
        self.member_list, self.thread_list = self.members_pane.member_list, self.threads_pane.thread_list
        self.direct_pane = DirectPane()
        self.centre_stack = QStackedWidget()
        self.centre_stack.addWidget(centre)
        self.centre_stack.addWidget(self.direct_pane)
        self.pane_layout: PaneLayout = PaneLayout(self, self.settings, self.groups_pane, self.centre_stack,
                                                  self.threads_pane, self.members_pane)
        # A file pasted in a direct conversation is said to go to groups (ui.files_view), not typed as a path.
        self.direct_pane.compose.files_given.connect(self.files_view.attach)
        self.direct_pane.compose.image_given.connect(self.files_view.attach_image)
        # A list's letters go to the compose box of its own kind only, when one of that kind is on show:
        # typed in the direct messages list, "hi bob" went to the group on show, and Enter sent it there.
        self.typing_goes_to_compose = TypingGoesTo(self._group_compose_on_show, self)
        self.typing_goes_to_direct = TypingGoesTo(self._direct_compose_on_show, self)
        # Reading places pass typed letters on too (ui.focus, rule 3): in a conversation view they only
        # searched the rows, and "hello" typed after clicking a message was lost.
        for side_list in (self.group_list, self.thread_list, self.member_list, self.tree_view, self.timeline_view):
            side_list.installEventFilter(self.typing_goes_to_compose)
        for side_list in (self.direct_list, self.direct_pane.view):
            side_list.installEventFilter(self.typing_goes_to_direct)
        self.setCentralWidget(self.pane_layout.splitter)
        self.setMinimumWidth(MINIMUM_WIDTH)

    def _name_controls(self) -> None:
        """What a screen reader calls each control without a label of its own (a button's text names it);
        tests/ui/test_accessibility.py walks the window through AT-SPI and fails on an unnamed one."""
        pane = self.direct_pane
        for widget, name in ((self.group_list, "Groups"), (self.thread_list, "Threads"),
                             (self.member_list, "Members"), (self.filter_edit, "Filter the conversation"),
                             (self.tree_button, "Reply tree"), (self.time_button, "Time order"),
                             (self.tree_view, "Conversation, as a reply tree"),
                             (self.timeline_view, "Conversation, in time order"),
                             (self.compose, "Message to the group"), (pane.view, "Direct conversation"),
                             (pane.compose, "Direct message")):
            widget.setAccessibleName(name)

    def _action(self, text: str, shortcut: QKeySequence | QKeySequence.StandardKey | str | None,
                slot: Callable[..., object], icon_name: str | None = None, checkable: bool = False) -> QAction:
        action = QAction(text, self)
        if icon_name:
            action.setIcon(icon(icon_name))
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
            # From every window of the app (the discovery and warnings windows too).
            action.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
        action.setCheckable(checkable)
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def _build_actions(self) -> None:
        menu = self.menuBar().addMenu("&File")
        joins = self.join_controller
        self.create_action = self._action("&Create group…", "Ctrl+Shift+N", joins.create_group, "create")
        self.discover_action = self._action("&Find groups…", "Ctrl+G", joins.show_discovery, "discover")
        self.join_action = self._action("&Join group by id…", None, joins.join_by_id, "join")
        self.join_invite_action = self._action("Join from &invite…", "Ctrl+Shift+I", joins.join_from_invite, "join")
        self.invite_action = self._action("Co&py invite", None, joins.copy_invite)
        self.add_peer_action = self._action("&Add peer by address…", None, joins.add_peer)
        self.leave_action = self._action("&Leave group", None, joins.leave_current_group)
        self.name_action = self._action("Change display &name…", None, joins.change_name)
        self.export_action = self._action("&Export chat log…", "Ctrl+E", self.export_dialog, "export")
        quit_action = self._action("&Quit", QKeySequence.StandardKey.Quit, self.close)
        for action in (self.create_action, self.discover_action, self.join_action, self.join_invite_action,
                       self.add_peer_action, self.invite_action, self.leave_action):
            menu.addAction(action)
        menu.addSeparator()
        menu.addAction(self.name_action)
        menu.addSeparator()
        menu.addAction(self.export_action)
        menu.addSeparator()
        menu.addAction(quit_action)

        menu = self.menuBar().addMenu("&Conversation")
        composer = self.compose_controller
        self.send_action = self._action("&Send", "Ctrl+Return", composer.send_message, "send")
        self.reply_action = self._action("&Reply to selected", "Ctrl+R", self._reply_to_selected, "reply")
        self.attach_action = self._action("&Attach file…", "Ctrl+Shift+A", self.files_view.choose_files, "attach")
        self.notify_menu = self._notify_menu(lambda: self.current.gid if self.current is not None else None)
        self.notify_actions = {action.data(): action for action in self.notify_menu.actions()}
        self.mentions_action = self._action("&Mentions…", "Ctrl+Shift+M", self.show_mentions)
        self.find_next_action = self._action("Find ne&xt", "F3", lambda: self.find_match(1))
        self.find_previous_action = self._action("Find pre&vious", "Shift+F3", lambda: self.find_match(-1))
        self.back_action = self._action("&Back", "Alt+Left", self.go_back)
        self.back_action.setToolTip("Back to where you were before following a link, or to all threads")
        self.new_thread_action = self._action("&New thread", "Ctrl+N", composer.start_new_thread)
        self.next_unread_action = self._action("Next &unread", "Ctrl+U", self.next_unread, "unread")
        self.mark_read_action = self._action("Mark all rea&d", "Ctrl+Shift+U", self.session_controller.mark_all_read)
        self.find_action = self._action("&Filter messages…", QKeySequence.StandardKey.Find, self.focus_filter, "search")
        self.search_action = self._action("Search &everywhere…", "Ctrl+Shift+F", self.search_window.show_search, "search")
        self.warnings_action = self._action("&Warnings…", None, self.status_controller.show_warning_log)
        self.time_action = self._action("&Time-ordered view", "Ctrl+T", lambda: self.set_time_ordered(not self.time_ordered),
                                        "timeline", checkable=True)
        self.topic_action = self._action("Edit the topi&c…", None, self.focus_topic)
        expand = self._action("Ex&pand all", None, self.tree_view.expandAll)
        collapse = self._action("C&ollapse all", None, self.tree_view.collapseAll)
        for action in (self.send_action, self.attach_action, self.reply_action, self.new_thread_action, self.next_unread_action,
                       self.mark_read_action, self.find_action, self.find_next_action, self.find_previous_action,
                       self.search_action, self.time_action, self.back_action, expand, collapse, self.topic_action,
                       self.mentions_action, self.notify_menu.menuAction(), self.warnings_action):
            menu.addAction(action)
        menu.addAction(self.team_controller.admins_only_action)
        menu.aboutToShow.connect(self.team_controller.update_actions)

        menu = self.menuBar().addMenu("&View")
        self.pane_layout.add_toggles(menu)
        menu.addSeparator()
        menu.addAction(self.direct_controller.read_receipts_action)
        menu.addAction(self.direct_controller.notify_action)
        escape = QAction(self)
        escape.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        escape.triggered.connect(self._escape)
        self.addAction(escape)

        menu = self.menuBar().addMenu("&Help")
        self.shortcuts_action = self._action("&Keyboard shortcuts", "F1", self.show_shortcuts)
        menu.addAction(self.shortcuts_action)
        menu.addAction(self._action("&About M2MC", None, lambda: show_about(self)))

    # -- start ----------------------------------------------------------------------------

    def start(self) -> None:
        """Load the joined groups and their histories (asynchronously)."""
        self.status_controller.refresh()
        self.session_controller.load()
        self.direct_controller.load()
        self.discovery.load()
        if self.restoring is not None and self.restoring.kind == "direct":
            self.direct_controller.open_with(self.restoring.key)
            self.restoring = None

    def group_to_open(self, joined: list[str]) -> str | None:
        """The group a start opens among the ``joined`` (their gids): the one on show at the last close,
        else the first; None while a direct conversation is on show (restored: not to be covered)."""
        if self.centre_stack.currentWidget() is self.direct_pane:
            return None
        restoring = self.restoring
        if restoring is not None and restoring.kind == "group" and restoring.key in joined:
            if restoring.thread is None:
                self.restoring = None
            return restoring.key
        self.restoring = None
        return joined[0] if joined else None

    def shown_now(self) -> OnShow | None:
        """What the window shows, as a restart is to show it again."""
        conversation = self.direct_controller.current
        if self.centre_stack.currentWidget() is self.direct_pane and conversation is not None:
            return OnShow("direct", conversation.peer)
        session = self.current
        if session is None:
            return None
        return OnShow("group", session.gid, session.thread.root.message.mid if session.thread is not None else None)

    # -- sessions -------------------------------------------------------------------------

    def select_group(self, gid: str) -> None:
        self.groups_pane.select(gid)

    def _group_compose_on_show(self) -> QWidget | None:
        return None if self.centre_stack.currentWidget() is self.direct_pane else self.compose

    def _direct_compose_on_show(self) -> QWidget | None:
        return self.direct_pane.compose if self.centre_stack.currentWidget() is self.direct_pane else None

    def focus_compose(self) -> None:
        """The app opens with the keys in the compose box: in the groups list, typing searched it
        and switched to whichever group began with the letters typed."""
        self.compose.setFocus()

    def focus_first_steps(self) -> None:
        """With no group yet, the keys go to "Find groups…" on the empty page: in the empty groups
        list, Enter did nothing."""
        self.first_steps[0].setFocus()

    # -- where the keys go (ui.focus) -------------------------------------------------------

    def on_show(self) -> str | None:
        """What the centre shows: "direct", "group" or None (the empty page)."""
        if self.centre_stack.currentWidget() is self.direct_pane:
            return "direct"
        return "group" if self.current is not None else None

    def keys_place(self) -> Place:
        """Where this window's keys are now (its focus widget, even while another window is active)."""
        active = QApplication.activeWindow()
        widget = self.focusWidget()
        if widget is None or not widget.isVisible() or not widget.isEnabled():
            return Place.LOST
        if active is not None and active is not self:
            return Place.ELSEWHERE
        if widget is self.compose:
            return Place.COMPOSE
        if widget is self.direct_pane.compose:
            return Place.DIRECT_COMPOSE
        if widget in (self.group_list, self.thread_list, self.direct_list, self.member_list):
            return Place.SIDE_LIST
        if widget in (self.tree_view, self.timeline_view, self.direct_pane.view):
            return Place.READING
        if widget in (self.filter_edit, self.topic_edit):
            return Place.FIELD
        if widget is self.first_steps[0]:
            return Place.FIRST_STEPS
        return Place.OTHER

    def apply_focus(self, navigation: Navigation, from_list: QWidget | None = None) -> None:
        """Put the keys where the focus model says after ``navigation`` (ui.focus).  ``from_list``: the
        side list the move was made in; with its arrow keys (no mouse button down), it keeps the keys."""
        by_keys = (from_list is not None and from_list.hasFocus()
                   and QApplication.mouseButtons() == Qt.MouseButton.NoButton)
        target = after(navigation, self.on_show(), self.keys_place(), by_list_keys=by_keys)
        widget = {Place.COMPOSE: self.compose, Place.DIRECT_COMPOSE: self.direct_pane.compose,
                  Place.FIRST_STEPS: self.first_steps[0]}.get(target) if target is not None else None
        if widget is not None and self.focusWidget() is not widget:
            widget.setFocus(Qt.FocusReason.OtherFocusReason)

    def _on_group_selected(self, gid: str | None) -> None:
        session = self.session_controller.sessions.get(gid) if gid is not None else None
        self.show_session(session)
        if session is not None:
            self.apply_focus(Navigation.GROUP_SHOWN, from_list=self.group_list)

    def show_session(self, session: GroupSession | None) -> None:
        if self.current is not None and self.current is not session:
            self.session_controller.save_read_marks()
        reopened = self.current is session and session is not None
        self.selection.open(session)
        if not reopened:  # the same group again: an edit in progress stays
            self.compose_controller.restore_draft(session)
        self.header.clear_filter(quietly=True)
        self.view_filter.set_text("")
        self._apply_highlight("")
        enabled = session is not None
        for widget in (self.compose, self.send_button, self.attach_button, self.filter_edit, self.tree_button,
                       self.time_button, self.topic_edit):
            widget.setEnabled(enabled)
        self.topic_edit.setVisible(enabled)  # no group, no topic: "Add a topic for everyone…" would offer one
        for action in (self.export_action, self.leave_action,
                       self.mark_read_action, self.send_action, self.attach_action, self.invite_action,
                       self.notify_menu.menuAction()):
            action.setEnabled(enabled)
        self.team_controller.removed_from(session)  # a group this peer was removed from: read only
        self.status_controller.show_warning_banner()
        if session is None:
            self.title_label.setText("No group")
            self.topic_edit.clear()
            self.pinned_button.hide()
            self.stack.setCurrentWidget(self.empty_page)
            self.member_list.clear()
            self.threads_pane.show_threads(None)
            self.thread_bar.hide()
            self.status_controller.refresh()
            return
        self.title_label.setText(session.title)
        self.compose.setAccessibleName(f"Message to {session.title}")  # a screen reader says where it goes
        self.show_topic(session)
        self.update_pinned_button()
        self.session_controller.sessions.warning_seen(session)  # its warnings, if any, are on the banner now
        self.notify_actions[self.session_controller.notify_level(session.gid)].setChecked(True)
        self.threads_pane.show_threads(session.threads)
        self.set_divider(session)
        self._set_view_models()
        self.expand_default(session)
        if session.loaded:
            self.open_position(session)
        self.status_controller.fill_members()
        self.status_controller.refresh()
        self.session_controller.refresh_group_view(session.gid)
        self.status_controller.poll_presence()
        self.schedule_seen()

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
        self.time_button.setEnabled(session.thread is None)
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
        self.apply_focus(Navigation.MODEL_RESET)

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
            self.session_controller.load_older(session)
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
        if self.session_controller.let_older_go(session):
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
        self.apply_focus(Navigation.PAGE_LOADED)

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
        self.compose_controller.show_target()  # a restored draft's target is known now
        restoring, self.restoring = self.restoring, None
        if restoring is not None and restoring.kind == "group" and restoring.key == session.gid \
                and restoring.thread is not None:
            self.open_thread(restoring.thread)  # the thread open at the last close (gone since: not opened)
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

    # -- events from the middleware --------------------------------------------------------

    # -- operations: edits, deletes, reactions, pins, the topic ------------------------------

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

    # -- status -------------------------------------------------------------------------------

    # -- what the controllers ask of the view (their *View protocols) ----------------------------

    def compose_widgets(self) -> list[QWidget]:
        """What writing in the group shown takes: off in a group this peer was removed from."""
        return [self.compose, self.send_button, self.attach_button]

    def dialog_parent(self) -> QWidget:
        return self

    def show_status(self, text: str, timeout: int) -> None:
        self.status_pane.showMessage(text, timeout)

    def show_error(self, message: str) -> None:
        self.status_controller.show_error(message)

    def refresh_status(self) -> None:
        self.status_controller.refresh()

    def poll_presence(self) -> None:
        self.status_controller.poll_presence()

    def fill_members(self) -> None:
        self.status_controller.fill_members()
        view = self.current.view if self.current is not None else None
        self.mention_completer.set_members(list(view.members) if view is not None else [], self.backend.pid)
        self.apply_focus(Navigation.REFRESHED)

    # -- mentions and notification levels (ui.mentions) ------------------------------------------

    def _notify_menu(self, gid_of: Callable[[], str | None], parent: QWidget | None = None) -> QMenu:
        """Notifications: All messages / Mentions only / Nothing, for the group ``gid_of()`` names."""
        menu = QMenu("Notificat&ions", parent or self)
        levels = QActionGroup(menu)
        for level, text in (("all", "&All messages"), ("mentions", "&Mentions only"), ("nothing", "N&othing")):
            action = QAction(text, menu, checkable=True)
            action.setData(level)
            levels.addAction(action)
            action.triggered.connect(lambda _on, level=level: self._set_notify_level(gid_of(), level))
            menu.addAction(action)
        menu.aboutToShow.connect(lambda: self._check_notify_level(menu, gid_of()))
        return menu

    def _check_notify_level(self, menu: QMenu, gid: str | None) -> None:
        level = self.session_controller.notify_level(gid) if gid is not None else None
        for action in menu.actions():
            action.setChecked(action.data() == level)

    def _set_notify_level(self, gid: str | None, level: str) -> None:
        if gid is None:
            return
        self.session_controller.set_notify_level(gid, level)
        if self.current is not None and self.current.gid == gid:
            self.notify_actions[level].setChecked(True)

    def show_mentions(self) -> None:
        """Conversation → Mentions…: the messages that mention me, newest first, across groups."""
        window = self.mentions_window
        if window is None:
            window = self.mentions_window = MentionsWindow(self, self.jump_to_message)
        self.backend.call(lambda peer: peer.mentions(MENTIONS_LISTED), on_result=self._show_mentions)
        window.show()
        window.raise_()
        window.activateWindow()

    def _show_mentions(self, messages: list[ChatMessage]) -> None:
        sessions = self.session_controller.sessions
        if self.mentions_window is not None:
            self.mentions_window.show_mentions(
                messages, {gid: session.title for gid, session in sessions.items()},
                lambda gid: member_names(sessions[gid].view) if gid in sessions else {})

    def jump_to_message(self, gid: str, mid: Mid) -> None:
        self.open_link(f"m2mc://message/{gid}/{format_mid(mid)}")

    def messages_shown(self, mids: list[Mid]) -> None:
        self.compose_controller.messages_shown(mids)
        self.apply_focus(Navigation.MESSAGES_ARRIVED)

    def start_new_thread(self) -> None:
        self.compose_controller.start_new_thread()

    def notify(self, title: str, text: str, mention: bool = False, target: tuple[str, Mid] | None = None) -> None:
        """A desktop notification (ui.notifier); ``target``: (gid or conversation key, message), which a
        click on it opens."""
        self.notifier.notify(title, text, mention=mention, target=target)

    def show_unread(self, count: int) -> None:
        """The unread count, beside the window's title: in the tray icon's tooltip."""
        self.notifier.show_unread(count)

    def clear_filter(self) -> None:
        if self.filter_edit.text():
            self.filter_edit.clear()

    def show_heading(self, session: GroupSession) -> None:
        self.title_label.setText(session.title)
        self.compose.setAccessibleName(f"Message to {session.title}")  # a screen reader says where it goes
        self.show_topic(session)

    def named_views(self) -> tuple[QAbstractItemView, ...]:
        """The views whose delegates name members (and mark look-alike names)."""
        return self.tree_view, self.timeline_view, self.thread_list

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

    # -- reading ---------------------------------------------------------------------------------

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
        if session is None or not (session.tree.unread or thread_unread) or not self.isActiveWindow():
            return
        self.current_view_mids_visible(mark=True)

    def current_view_mids_visible(self, mark: bool = False) -> list[Mid]:
        visible = self.current_view().visible_mids()
        if mark and self.current is not None:
            self.current.tree.mark_read(visible)
            if self.current.thread is not None:
                self.current.thread.tree.mark_read(visible)
                self.session_controller.read_changed(self.current)
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
        self.time_action.setChecked(on)
        self.header.show_time_ordered(on)
        if self.current is not None:
            self._set_view_models()
            if not on:
                self.expand_default(self.current)
            if selected is not None:
                self.select_message(selected)
            self.schedule_seen()
            self.apply_focus(Navigation.ORDER_CHANGED)

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

    def _reply_to_selected(self) -> None:
        # On while no group is shown: a direct conversation answers Ctrl+R too.
        if not self.direct_controller.reply_to_selected() and self.current is not None:
            self.compose_controller.reply_to_selected()

    def _escape(self) -> None:
        popup = self.compose.mention_popup
        if popup is not None and popup.isVisible():  # the @-completer's list: Esc closes only it
            popup.hide()
        elif self.direct_controller.escape():
            return
        elif self.topic_edit.hasFocus():  # undo what was typed there
            self.topic_edit.undo_typing()
            self.compose.setFocus()
        elif self.filter_edit.hasFocus() or self.filter_edit.text():
            self.filter_edit.clear()
            self.compose.setFocus()
        elif self.compose_target.active:
            self.compose_controller.reset_target()
        elif self.current is not None and self.current.thread is not None:
            self.close_thread()
        else:
            self.compose_controller.start_new_thread()

    # -- writing --------------------------------------------------------------------------------

    # -- groups -------------------------------------------------------------------------------------

    # -- threads ------------------------------------------------------------------------------------

    def next_unread(self) -> None:
        """Ctrl+U: the oldest unread message of the conversation shown, else of the next group or direct
        conversation with news (a direct conversation on show is looked at first)."""
        direct = self.direct_controller
        if direct.current is not None and direct.current.tree.unread:
            direct.next_unread()
        else:
            self.session_controller.next_unread(others=direct.next_unread)

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
        self.compose_controller.thread_opened(root.mid)
        self.thread_label.setText(f"Thread: {root.sender_name} — {root_text(root, 80, member_names(session.view), self.link_title)}")
        self._set_view_models()
        self.tree_view.expandAll()
        first_unread = next(iter(session.thread.tree.unread_in_arrival_order()), None)
        index = session.thread.index_for(first_unread or root.mid)
        if self.tree_view.model() is self.tree_proxy:
            index = self.tree_proxy.mapFromSource(index)
        self.tree_view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtTop)
        self.schedule_seen()
        self.apply_focus(Navigation.THREAD_OPENED)

    def go_back(self) -> None:
        """Alt+Left: to where the reader was before following a link or a search result, else out of
        the open thread to all threads."""
        self._go_back()
        # Back is pressed in the search window too (Shortcuts work from every window): the window
        # comes up with the keys in the compose box of where it went back to.
        self.raise_()
        self.activateWindow()
        self.apply_focus(Navigation.BACK)

    def _go_back(self) -> None:
        while self._way_back:
            gid, thread, mid = self._way_back.pop()
            if gid.startswith(CONVERSATION_PREFIX):
                peer = gid.removeprefix(CONVERSATION_PREFIX)
                if mid is not None:
                    self.direct_controller.show_message(peer, mid, missing=self._not_here)
                else:
                    self.direct_controller.open_with(peer)
                return
            if gid not in self.session_controller.sessions:
                continue  # left since
            if self.current is None or self.current.gid != gid:
                self.select_group(gid)
            if thread is not None:
                if mid is not None:
                    self.open_thread(thread, then=functools.partial(self.select_message, mid))
                else:
                    self.open_thread(thread)
                return
            self.close_thread()
            if mid is not None:
                self.select_message(mid)
            return
        self.close_thread()

    def link_title(self, url: str) -> str | None:
        """What an m2mc://message link shows instead of its ids: the linked message's author and
        first words, when that message has reached this peer."""
        target = parse_message_link(url)
        session = self.session_controller.sessions.get(target[0]) if target is not None else None
        message = session.tree.message(target[1]) if session is not None and target is not None else None
        if message is None or session is None:
            return None
        return f"↗ {message.sender_name}: {root_text(message, 50)} ({session.title})"

    def close_thread(self) -> None:
        session = self.current
        if session is None or session.thread is None:
            return
        root_mid = session.thread.root.message.mid
        session.thread = None
        self.compose_controller.thread_closed()
        self._set_view_models()
        self.expand_default(session)
        self.select_message(root_mid)
        self.apply_focus(Navigation.THREAD_CLOSED)

    # -- message actions -------------------------------------------------------------------------

    def _message_menu(self, view: QAbstractItemView, pos: QPoint) -> None:
        index = view.indexAt(pos)
        message: ChatMessage | None = index.data(MessageRole) if index.isValid() else None
        if message is None or is_notice(message):  # a notice is no message: nothing to answer, pin or copy
            return
        menu = self.message_menu(message)
        menu.popup(view.viewport().mapToGlobal(pos))

    def message_menu(self, message: ChatMessage) -> QMenu:
        """Reply, Copy text, Copy link, Quote (and open the thread), for the context menu."""
        view = self.current.view if self.current is not None else None
        return message_menu(self, message, self.backend.pid, self.compose_controller, self.files_view, self.open_thread,
                            self.direct_controller.message_action,
                            view is not None and view.roles.get(self.backend.pid) in ("owner", "admin"))

    def focus_topic(self) -> None:
        """The topic field is out of the Tab chain (a stray Enter there changes it for everyone);
        this is its way in from the keyboard."""
        if self.current is not None:
            self.topic_edit.setFocus(Qt.FocusReason.ShortcutFocusReason)
            self.topic_edit.selectAll()

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """Every key the window answers: its menus' shortcuts (read from the actions themselves, so
        the list cannot drift from them) and the keys the compose box and views take."""
        rows = [(action.text().replace("&", "").rstrip("…"), action.shortcut().toString(
                 QKeySequence.SequenceFormat.NativeText))
                for action in self.actions() if not action.shortcut().isEmpty() and action.text()]
        return rows + list(TYPING_KEYS) + list(MENTION_KEYS)

    def show_shortcuts(self) -> None:
        show_shortcuts(self, self.shortcut_rows())

    def open_link(self, url: str) -> None:
        """A message link (m2mc://message/…) selects that message; any other link opens outside."""
        target = parse_message_link(url)
        if target is None:
            QDesktopServices.openUrl(QUrl(url))
            return
        self.show_message(*target)

    def show_message(self, gid: str, mid: Mid) -> bool:
        """Open ``mid`` in its thread, in view and selected, whichever group is shown (message links,
        search results); a direct message (``gid`` its conversation, ``dm:<pid>:<pid>``) in its
        conversation.  Where the reader was is kept: Back (Alt+Left) returns there."""
        peer = conversation_peer(gid, self.backend.pid)
        if peer is not None:
            self._keep_place()
            self.direct_controller.show_message(peer, mid, missing=self._not_here)
            self.raise_()
            self.activateWindow()
            return True
        session = self.session_controller.sessions.get(gid)
        if session is None:
            self.status_controller.show_error("That message is in a group you have not joined.")
            return False
        self._keep_place()
        if self.current is not session:
            self.select_group(gid)
        if session.tree.node(mid) is None and session.loaded and self.current is session:
            # Older than the pages loaded: its page comes from the store first.
            self.session_controller.load_back_to(session, mid, lambda _found: self._show_held(session, mid))
            return True
        return self._show_held(session, mid)

    def _keep_place(self) -> None:
        """Where the reader is, for Back (Alt+Left) to return to after a jump."""
        here = self.current
        conversation = self.direct_controller.current
        if here is not None:
            selected = self.selected_message()
            thread = here.thread.root.message.mid if here.thread is not None else None
            self._way_back.append((here.gid, thread, selected.mid if selected is not None else None))
        elif conversation is not None:
            index = self.direct_pane.view.currentIndex()
            message: ChatMessage | None = index.data(MessageRole) if index.isValid() else None
            self._way_back.append((conversation.key, None, message.mid if message is not None else None))
        del self._way_back[:-MAX_WAY_BACK]

    def _show_held(self, session: GroupSession, mid: Mid) -> bool:
        def shown() -> None:
            if self.select_message(mid):
                self.raise_()
                self.activateWindow()
                self.apply_focus(Navigation.SEARCH_JUMP)
            else:
                self._not_here()

        if self.current is not session:
            return self._not_here()
        return self.open_thread(mid, then=shown, missing=self._not_here)

    def _not_here(self) -> bool:
        self.status_controller.show_error("That message has not reached this peer (yet).")
        return False

    # -- settings and invites -------------------------------------------------------------------

    # -- read marks and presence -----------------------------------------------------------------

    # -- export --------------------------------------------------------------------------------------

    def export_dialog(self) -> None:
        session = self.current
        if session is None:
            return
        safe = re.sub(r"[^\w.-]+", "-", session.title).strip("-") or "group"
        path, _filter = QFileDialog.getSaveFileName(self, "Export chat log", str(Path.home() / f"m2mc-{safe}.jsonl"),
                                                    "JSON Lines (*.jsonl);;All files (*)")
        if path:
            self.export_to(path)

    def export_to(self, path: str) -> None:
        session = self.current
        gid = session.gid if session else None
        self.backend.call(
            lambda peer: peer.export_log(path, gid),
            on_result=lambda count: self.statusBar().showMessage(f"Exported {count} messages to {path}", 8000),
            on_error=lambda exc: self.status_controller.show_error(
                f"Could not export to {path}: {describe_error(exc)}"),
        )

    # -- window ----------------------------------------------------------------------------------------

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if hasattr(self, "pane_layout"):  # not before the panes are built
            self.pane_layout.resized(event.size().width())

    def update_title(self) -> None:
        self.session_controller.update_title()

    def show_side_panes(self, on: bool) -> None:
        self.pane_layout.show_side_panes(on)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.ActivationChange and self.isActiveWindow():
            self.schedule_seen()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.pane_layout.save_sizes()
        shown_now = self.shown_now()
        write_setting(self.settings, "window/on_show", shown_now.text() if shown_now is not None else "")
        self.session_controller.save_read_marks()
        self.discovery.close()
        self.search_window.close()
        self.warning_log.close()
        super().closeEvent(event)

