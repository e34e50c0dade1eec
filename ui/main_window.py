"""The main window (the thesis's ChatConsole): groups, reply tree, compose box, members, status.

It talks to the middleware only through a :class:`~ui.bridge.Backend`: calls
with callbacks, events as signals, all on the GUI thread.  Each joined group
has a :class:`GroupSession` holding its tree and time-ordered models, which
live as long as the window, so switching groups keeps unread marks.

What is new is hard to miss: unread messages carry a coloured bar and
"● new", the path to each new message is expanded, the groups pane shows an
unread badge, and "Next unread" (Ctrl+U) walks them in arrival order.  A
message counts as seen once selected, or after it has been on screen for a
moment while the window is active.

Warnings from the middleware (e.g. two different messages under one id) are
never modal: the group's banner shows the latest, the status bar says it
whatever group is open, the group gets a warning sign in the groups pane
until looked at, and the warnings window (Conversation → Warnings…) keeps
them all.  Joining a private group asks for its passphrase in a dialog that
stays open on a wrong one.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QItemSelectionModel, QModelIndex, QPoint, QSortFilterProxyModel, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QStyle,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from middleware.types import ChatMessage, GroupView, Member, Mid

from .bridge import Backend, describe_error
from .delegate import MessageDelegate, snippet
from .dialogs import CreateGroupDialog, JoinDialog, PassphraseDialog, WarningLogWindow, show_about
from .discovery_window import DiscoveryWindow
from .member_list import fill_member_list
from .message_model import MessageRole, MessageTreeModel, SearchRole, TimelineModel
from .notifier import Notifier
from .resources import app_icon, icon
from .widgets import (
    ComposeEdit,
    ConversationView,
    GroupIdRole,
    GroupListDelegate,
    ReplyBanner,
    UnreadCountRole,
    WarningBanner,
)

log = logging.getLogger(__name__)

EXPAND_ALL_LIMIT = 5000  # bigger groups open with only their recent threads expanded
EXPAND_RECENT = 400
SEEN_DELAY_MS = 1500
MAX_PER_TURN = 300
INTAKE_MS = 100
TRIM_SLACK = 100  # rows beyond a model's window before the oldest are hidden again


@dataclass
class GroupSession:
    gid: str
    tree: MessageTreeModel
    timeline: TimelineModel
    view: GroupView | None = None
    loaded: bool = False
    sync: tuple[int, int] | None = None
    pending: int = 0
    expanded_once: bool = False
    warnings: list[str] = field(default_factory=list)
    warning_dismissed: bool = False
    item: QListWidgetItem | None = field(default=None, repr=False)

    @property
    def title(self) -> str:
        return self.view.desc if self.view is not None else self.gid


class MainWindow(QMainWindow):
    def __init__(self, backend: Backend, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.sessions: dict[str, GroupSession] = {}
        self.known_groups: dict[str, GroupView] = {}
        self.current: GroupSession | None = None
        self.reply_target: Mid | None = None
        self.time_ordered = False
        self.setWindowTitle("M2MC chat")
        self.setWindowIcon(app_icon())
        self.resize(1100, 700)

        self.discovery = DiscoveryWindow(backend, self)
        self.discovery.join_requested.connect(self.join_group)
        self.discovery.create_requested.connect(self.create_group)
        self.discovery.join_by_id_requested.connect(self.join_by_id)
        self.notifier = Notifier(self)
        self.warning_log = WarningLogWindow(self)
        self.passphrase_dialog: PassphraseDialog | None = None

        self._build_panes()
        self._build_actions()
        self._build_status_bar()

        backend.messages_arrived.connect(self._on_messages)
        backend.groups_discovered.connect(self._on_groups_discovered)
        backend.group_created.connect(self._on_group_created)
        backend.member_joined.connect(self._on_member_changed)
        backend.member_left.connect(self._on_member_changed)
        backend.sync_progress.connect(self._on_sync_progress)
        backend.warning.connect(self._on_warning)
        backend.failed.connect(self.show_error)

        self._seen_timer = QTimer(self, singleShot=True, interval=SEEN_DELAY_MS, timeout=self.mark_visible_read)
        self._inbox: deque[tuple[str, list[ChatMessage]]] = deque()
        self._inbox_timer = QTimer(self, singleShot=True, interval=INTAKE_MS, timeout=self._drain_inbox)
        self._follow_timer = QTimer(self, singleShot=True, interval=100,
                                    timeout=lambda: self.current_view().scrollToBottom())
        self._pending_timer = QTimer(self, interval=1000, timeout=self._poll_pending)
        self._pending_timer.start()
        self._show_session(None)

    # -- layout -------------------------------------------------------------------------

    def _build_panes(self) -> None:
        self.group_list = QListWidget()
        self.group_list.setObjectName("groupList")
        self.group_list.setItemDelegate(GroupListDelegate(self.group_list))
        self.group_list.currentItemChanged.connect(self._on_group_selected)
        groups_pane = self._titled("Groups", self.group_list)
        discover_button = QPushButton(icon("discover"), "Find groups…")
        discover_button.clicked.connect(self.show_discovery)
        groups_pane.layout().addWidget(discover_button)

        self.title_label = QLabel()
        self.title_label.setObjectName("conversationTitle")
        font = self.title_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.2)
        font.setBold(True)
        self.title_label.setFont(font)
        self.filter_edit = QLineEdit()
        self.filter_edit.setObjectName("filter")
        self.filter_edit.setPlaceholderText("Filter (Ctrl+F)")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition)
        self.filter_edit.setMaximumWidth(260)
        self.filter_edit.textChanged.connect(self._apply_filter)
        self.tree_button = QToolButton()
        self.tree_button.setIcon(icon("tree"))
        self.tree_button.setCheckable(True)
        self.tree_button.setChecked(True)
        self.tree_button.setToolTip("Reply tree (Ctrl+T toggles)")
        self.tree_button.clicked.connect(lambda: self.set_time_ordered(False))
        self.time_button = QToolButton()
        self.time_button.setIcon(icon("timeline"))
        self.time_button.setCheckable(True)
        self.time_button.setToolTip("Time order: each reply shows what it answers (Ctrl+T toggles)")
        self.time_button.clicked.connect(lambda: self.set_time_ordered(True))
        header = QHBoxLayout()
        header.setContentsMargins(8, 6, 8, 6)
        header.addWidget(self.title_label, 1)
        self.older_button = QPushButton()
        self.older_button.setFlat(True)
        self.older_button.setToolTip("Big groups open with their newest threads; show older ones too")
        self.older_button.clicked.connect(self.show_older)
        self.older_button.hide()
        header.addWidget(self.older_button)
        header.addWidget(self.filter_edit)
        header.addWidget(self.tree_button)
        header.addWidget(self.time_button)

        self.tree_view = ConversationView()
        self.tree_view.setItemDelegate(MessageDelegate(self.tree_view))
        self.tree_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        # Both views scroll per item: per-pixel scrolling would need every row's height,
        # which for 100,000 wrapped messages is seconds of text layout.
        self.timeline_view = ConversationView()
        self.timeline_view.setObjectName("timeline")
        self.timeline_view.setRootIsDecorated(False)
        self.timeline_view.setIndentation(0)
        self.timeline_view.setItemDelegate(MessageDelegate(self.timeline_view, show_parent=True))
        self.timeline_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        for view in (self.tree_view, self.timeline_view):
            view.verticalScrollBar().valueChanged.connect(self._schedule_seen)
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
        self.empty_label = QLabel("Join a group (Find groups…) or create one to start talking.")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        self.stack.addWidget(self.empty_label)

        self.reply_banner = ReplyBanner()
        self.reply_banner.cancelled.connect(self.start_new_thread)
        self.compose = ComposeEdit()
        self.compose.submitted.connect(self.send_message)
        self.send_button = QPushButton(icon("send"), "Send")
        self.send_button.setObjectName("sendButton")
        self.send_button.clicked.connect(self.send_message)
        self.compose_error = QLabel()
        self.compose_error.setObjectName("dialogError")
        self.compose_error.hide()
        compose_row = QHBoxLayout()
        compose_row.addWidget(self.compose, 1)
        compose_row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        compose_frame = QFrame()
        compose_frame.setObjectName("composeFrame")
        compose_layout = QVBoxLayout(compose_frame)
        compose_layout.setContentsMargins(8, 6, 8, 8)
        compose_layout.addWidget(self.reply_banner)
        compose_layout.addWidget(self.compose_error)
        compose_layout.addLayout(compose_row)

        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.setContentsMargins(0, 0, 0, 0)
        centre_layout.setSpacing(0)
        centre_layout.addLayout(header)
        self.warning_banner = WarningBanner()
        self.warning_banner.show_all.connect(self.show_warning_log)
        self.warning_banner.dismissed.connect(self._warning_dismissed)
        banner_row = QHBoxLayout()
        banner_row.setContentsMargins(8, 0, 8, 4)
        banner_row.addWidget(self.warning_banner)
        centre_layout.addLayout(banner_row)
        centre_layout.addWidget(self.stack, 1)
        centre_layout.addWidget(compose_frame)

        self.member_list = QListWidget()
        self.member_list.setObjectName("memberList")
        self.member_list.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        members_pane = self._titled("Members", self.member_list)

        splitter = QSplitter()
        splitter.addWidget(groups_pane)
        splitter.addWidget(centre)
        splitter.addWidget(members_pane)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([220, 680, 200])
        splitter.setChildrenCollapsible(False)
        self.setCentralWidget(splitter)

    def _titled(self, title: str, body: QWidget) -> QWidget:
        pane = QWidget()
        layout = QVBoxLayout(pane)
        layout.setContentsMargins(0, 0, 0, 4)
        layout.setSpacing(0)
        label = QLabel(title)
        label.setProperty("class", "paneTitle")
        layout.addWidget(label)
        layout.addWidget(body, 1)
        return pane

    def _action(self, text: str, shortcut: QKeySequence | str | None, slot, icon_name: str | None = None,
                checkable: bool = False) -> QAction:
        action = QAction(text, self)
        if icon_name:
            action.setIcon(icon(icon_name))
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.setCheckable(checkable)
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def _build_actions(self) -> None:
        menu = self.menuBar().addMenu("&File")
        self.create_action = self._action("&Create group…", "Ctrl+Shift+N", self.create_group, "create")
        self.discover_action = self._action("&Find groups…", "Ctrl+G", self.show_discovery, "discover")
        self.join_action = self._action("&Join group by id…", None, self.join_by_id, "join")
        self.leave_action = self._action("&Leave group", None, self.leave_current_group)
        self.export_action = self._action("&Export chat log…", "Ctrl+E", self.export_dialog, "export")
        quit_action = self._action("&Quit", QKeySequence.StandardKey.Quit, self.close)
        for action in (self.create_action, self.discover_action, self.join_action, self.leave_action):
            menu.addAction(action)
        menu.addSeparator()
        menu.addAction(self.export_action)
        menu.addSeparator()
        menu.addAction(quit_action)

        menu = self.menuBar().addMenu("&Conversation")
        self.send_action = self._action("&Send", "Ctrl+Return", self.send_message, "send")
        self.reply_action = self._action("&Reply to selected", "Ctrl+R", self.reply_to_selected, "reply")
        self.new_thread_action = self._action("&New thread", "Ctrl+N", self.start_new_thread)
        self.next_unread_action = self._action("Next &unread", "Ctrl+U", self.next_unread, "unread")
        self.mark_read_action = self._action("&Mark all read", "Ctrl+Shift+U", self.mark_all_read)
        self.find_action = self._action("&Filter messages…", QKeySequence.StandardKey.Find, self.focus_filter, "search")
        self.warnings_action = self._action("&Warnings…", None, self.show_warning_log)
        self.time_action = self._action("&Time-ordered view", "Ctrl+T", lambda: self.set_time_ordered(not self.time_ordered),
                                        "timeline", checkable=True)
        expand = self._action("E&xpand all", None, self.tree_view.expandAll)
        collapse = self._action("C&ollapse all", None, self.tree_view.collapseAll)
        for action in (self.send_action, self.reply_action, self.new_thread_action, self.next_unread_action,
                       self.mark_read_action, self.find_action, self.time_action, expand, collapse,
                       self.warnings_action):
            menu.addAction(action)
        escape = QAction(self)
        escape.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        escape.triggered.connect(self._escape)
        self.addAction(escape)

        menu = self.menuBar().addMenu("&Help")
        menu.addAction(self._action("&About M2MC", None, lambda: show_about(self)))

    def _build_status_bar(self) -> None:
        bar = self.statusBar()
        self.address_label = QLabel()
        self.peers_label = QLabel()
        self.sync_bar = QProgressBar()
        self.sync_bar.setObjectName("syncProgress")
        self.sync_bar.setFormat("sync %v/%m")
        self.sync_bar.hide()
        self.pending_label = QLabel()
        self.pending_label.setObjectName("pendingLabel")
        bar.addPermanentWidget(self.sync_bar)
        bar.addPermanentWidget(self.pending_label)
        bar.addPermanentWidget(self.peers_label)
        bar.addPermanentWidget(self.address_label)
        self._update_status()

    # -- start ----------------------------------------------------------------------------

    def start(self) -> None:
        """Load the joined groups and their histories (asynchronously)."""
        self._update_status()
        self.backend.request("groups", on_result=self._on_initial_groups)
        self.discovery.load()

    def _on_initial_groups(self, views: list[GroupView]) -> None:
        self._on_groups_discovered(views)
        joined = [view for view in views if view.joined]
        for view in joined:
            self._session(view.gid, load_history=True)
        if joined and self.current is None:
            self.select_group(joined[0].gid)
        elif not joined:
            self.show_discovery()

    # -- sessions -------------------------------------------------------------------------

    def _session(self, gid: str, load_history: bool = True) -> GroupSession:
        session = self.sessions.get(gid)
        if session is not None:
            return session
        tree = MessageTreeModel(self.backend.pid, self)
        session = GroupSession(gid, tree, TimelineModel(tree, self), self.known_groups.get(gid))
        self.sessions[gid] = session
        item = QListWidgetItem(icon("group"), session.title)
        item.setData(GroupIdRole, gid)
        item.setData(UnreadCountRole, 0)
        session.item = item
        self.group_list.addItem(item)
        tree.unread_count_changed.connect(lambda count, s=session: self._on_unread_count(s, count))
        if load_history:
            self.backend.request("history", gid, on_result=lambda messages, s=session: self._on_history(s, messages))
        return session

    def _on_history(self, session: GroupSession, messages: list[ChatMessage]) -> None:
        # Stored history counts as read: only what arrives while the app runs is new.
        session.tree.add_messages(messages, unread=False)
        session.loaded = True
        if session is self.current:
            self._expand_default(session)
            self._update_status()

    def select_group(self, gid: str) -> None:
        session = self.sessions.get(gid)
        if session is not None and session.item is not None:
            self.group_list.setCurrentItem(session.item)

    def _on_group_selected(self, item: QListWidgetItem | None, _previous=None) -> None:
        session = self.sessions.get(item.data(GroupIdRole)) if item is not None else None
        self._show_session(session)

    def _show_session(self, session: GroupSession | None) -> None:
        self.current = session
        self.reply_target = None
        self.reply_banner.show_target(None)
        self.filter_edit.blockSignals(True)
        self.filter_edit.clear()
        self.filter_edit.blockSignals(False)
        enabled = session is not None
        for widget in (self.compose, self.send_button, self.filter_edit, self.tree_button, self.time_button):
            widget.setEnabled(enabled)
        for action in (self.export_action, self.leave_action, self.reply_action, self.next_unread_action,
                       self.mark_read_action, self.send_action):
            action.setEnabled(enabled)
        self._show_warning_banner()
        if session is None:
            self.title_label.setText("No group")
            self.stack.setCurrentWidget(self.empty_label)
            self.member_list.clear()
            self._update_status()
            return
        self.title_label.setText(session.title)
        session.item.setIcon(icon("group"))  # its warnings, if any, are on the banner now
        self._set_view_models()
        self._expand_default(session)
        self._fill_members()
        self._update_status()
        self.backend.request("group", session.gid, on_result=self._on_group_view, on_error=lambda _e: None)
        self._schedule_seen()

    def _set_view_models(self) -> None:
        session = self.current
        filtering = bool(self.filter_edit.text().strip())
        if filtering:
            self.tree_proxy.setSourceModel(session.tree)
            self.timeline_proxy.setSourceModel(session.timeline)
            tree_model, timeline_model = self.tree_proxy, self.timeline_proxy
        else:
            tree_model, timeline_model = session.tree, session.timeline
        # The unfiltered views show the models directly: a proxy over 100,000 rows costs
        # more than it gives, and filtering swaps one in.
        if self.tree_view.model() is not tree_model:
            self.tree_view.setModel(tree_model)
            self.tree_view.selectionModel().currentChanged.connect(self._on_current_message)
        # Only the visible view holds a model: a hidden view would still re-lay out on every insert.
        if not self.time_ordered:
            timeline_model = None
        if self.timeline_view.model() is not timeline_model:
            self.timeline_view.setModel(timeline_model)
            if timeline_model is not None:
                self.timeline_view.selectionModel().currentChanged.connect(self._on_current_message)
        self.stack.setCurrentWidget(self.timeline_view if self.time_ordered else self.tree_view)
        self._update_older_button()

    def _update_older_button(self) -> None:
        session = self.current
        hidden = 0
        if session is not None:
            hidden = session.timeline.hidden if self.time_ordered else session.tree.hidden_threads
        what = "messages" if self.time_ordered else "threads"
        self.older_button.setText(f"⤒ {hidden:,} older {what}")
        self.older_button.setVisible(hidden > 0)

    def show_older(self) -> None:
        session = self.current
        if session is None:
            return
        if self.time_ordered:
            session.timeline.show_older()
        else:
            session.tree.show_older()
        self._update_older_button()

    def _expand_default(self, session: GroupSession) -> None:
        if session is not self.current or self.tree_view.model() is not session.tree:
            return
        if len(session.tree) <= EXPAND_ALL_LIMIT:
            self.tree_view.expandAll()
        else:
            for node in session.tree.arrival[-EXPAND_RECENT:]:
                self._expand_path(node.message.mid)
            for mid in list(session.tree.unread)[:EXPAND_RECENT]:
                self._expand_path(mid)
        self._update_older_button()
        if not session.expanded_once and len(session.tree):
            session.expanded_once = True
            self.tree_view.scrollToBottom()

    def _expand_path(self, mid: Mid) -> None:
        session = self.current
        model = self.tree_view.model()
        for ancestor in session.tree.ancestors(mid):
            index = session.tree.index_for(ancestor)
            if model is self.tree_proxy:
                index = self.tree_proxy.mapFromSource(index)
            if index.isValid() and not self.tree_view.isExpanded(index):
                self.tree_view.expand(index)

    # -- events from the middleware --------------------------------------------------------

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
            session = self._session(gid, load_history=True)
        view = self.current_view()
        at_bottom = view.verticalScrollBar().value() >= view.verticalScrollBar().maximum() - 4
        shown = session.tree.add_messages(messages, unread=True)
        if not shown:
            return
        self._trim(session, at_bottom)
        if session is self.current:
            for message in shown:
                if message.parent is not None:
                    self._expand_path(message.mid)
            if at_bottom:
                # Only follow the end when the user is already there; otherwise keep their place.
                # Deferred and coalesced: scrolling forces a layout, once per burst is enough.
                self._follow_timer.start()
            self._schedule_seen()
        others = [m for m in shown if m.sender != self.backend.pid]
        if others:
            last = others[-1]
            extra = f" (+{len(others) - 1} more)" if len(others) > 1 else ""
            self.notifier.notify(f"{last.sender_name} in {session.title}", snippet(last.text, 120) + extra)

    def _trim(self, session: GroupSession, at_bottom: bool) -> None:
        # A steady stream adds rows without end, and each re-layout costs every row on show:
        # while the reader follows the end (or the model is not on screen), hide the oldest
        # again, never the selected message's thread.
        current = session is self.current
        spare = self.reply_target if current else None
        tree, timeline = session.tree, session.timeline
        if (at_bottom or not current or self.time_ordered) and tree.rowCount() > tree.window + TRIM_SLACK:
            tree.hide_oldest(tree.window, spare)
        if (at_bottom or not current or not self.time_ordered) and timeline.rowCount() > timeline.window + TRIM_SLACK:
            timeline.hide_oldest(timeline.window, spare)
        if session is self.current:
            self._update_older_button()

    def _on_groups_discovered(self, views: list[GroupView]) -> None:
        for view in views:
            self.known_groups[view.gid] = view
            session = self.sessions.get(view.gid)
            if session is not None:
                session.view = view
                session.item.setText(view.desc)
                if session is self.current:
                    self.title_label.setText(view.desc)
                    self._fill_members()
        self._update_status()

    def _on_group_view(self, view: GroupView) -> None:
        self._on_groups_discovered([view])

    def _on_group_created(self, gid: str) -> None:
        self._session(gid, load_history=False).loaded = True
        self.select_group(gid)

    def _on_member_changed(self, gid: str, _member: Member) -> None:
        if gid in self.sessions:
            self.backend.request("group", gid, on_result=self._on_group_view, on_error=lambda _e: None)

    def _on_sync_progress(self, gid: str, received: int, expected: int) -> None:
        session = self.sessions.get(gid) or self._session(gid)
        session.sync = (received, expected) if received < expected else None
        if session is self.current:
            self._update_status()

    def _on_warning(self, gid: str, text: str) -> None:
        view = self.known_groups.get(gid)
        session = self.sessions.get(gid)
        title = session.title if session is not None else view.desc if view is not None else gid or "network"
        log.warning("group %s: %s", gid, text)
        self.warning_log.add(title, text)
        self.statusBar().showMessage(f"⚠ Warning in {title}: {text}", 15000)
        if session is None:
            return
        session.warnings.append(text)
        session.warning_dismissed = False
        if session is self.current:
            self._show_warning_banner()
        else:
            session.item.setIcon(self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning))
            session.item.setToolTip(f"Warning: {text}")

    def _show_warning_banner(self) -> None:
        session = self.current
        if session is None or not session.warnings or session.warning_dismissed:
            self.warning_banner.show_warning(None)
        else:
            self.warning_banner.show_warning(session.warnings[-1], len(session.warnings))
            session.item.setToolTip("")

    def _warning_dismissed(self) -> None:
        if self.current is not None:
            self.current.warning_dismissed = True

    def show_warning_log(self) -> None:
        self.warning_log.show()
        self.warning_log.raise_()
        self.warning_log.activateWindow()

    def _on_unread_count(self, session: GroupSession, count: int) -> None:
        session.item.setData(UnreadCountRole, count)
        total = sum(len(s.tree.unread) for s in self.sessions.values())
        self.setWindowTitle(f"({total}) M2MC chat" if total else "M2MC chat")

    def _poll_pending(self) -> None:
        session = self.current
        if session is None:
            return
        self.backend.request("pending", session.gid, on_result=lambda n, s=session: self._on_pending(s, n),
                             on_error=lambda _e: None)

    def _on_pending(self, session: GroupSession, count: int) -> None:
        if session.pending != count:
            session.pending = count
            self._update_status()

    # -- status -------------------------------------------------------------------------------

    def _update_status(self) -> None:
        self.address_label.setText(f"{self.backend.interface or '?'}:{self.backend.port}")
        self.address_label.setToolTip("Interface address and control port in use")
        peers = {m.pid for view in self.known_groups.values() for m in view.members} - {self.backend.pid}
        self.peers_label.setText(f"{len(peers)} peer{'s' if len(peers) != 1 else ''} seen")
        session = self.current
        waiting = (session.pending + session.tree.waiting_count) if session is not None else 0
        self.pending_label.setText(f"{waiting} repl{'ies' if waiting != 1 else 'y'} waiting for a missing message"
                                   if waiting else "no replies waiting")
        self.pending_label.setToolTip("Replies that arrived before the message they answer; "
                                      "they appear as soon as it does")
        self.pending_label.setProperty("waiting", "true" if waiting else "false")
        self.pending_label.style().unpolish(self.pending_label)
        self.pending_label.style().polish(self.pending_label)
        sync = session.sync if session is not None else None
        if sync is not None:
            self.sync_bar.setRange(0, max(1, sync[1]))
            self.sync_bar.setValue(sync[0])
            self.sync_bar.show()
        else:
            self.sync_bar.hide()

    def _fill_members(self) -> None:
        session = self.current
        fill_member_list(self.member_list, session.view if session is not None else None, self.backend.pid,
                         self._member_header)

    def _member_header(self, text: str) -> QListWidgetItem:
        item = QListWidgetItem(text)
        item.setFlags(Qt.ItemFlag.ItemIsEnabled)
        font = item.font()
        font.setBold(True)
        item.setFont(font)
        return item

    def show_error(self, message: str) -> None:
        self.statusBar().showMessage(message, 8000)

    # -- reading ---------------------------------------------------------------------------------

    def current_view(self) -> QAbstractItemView:
        return self.timeline_view if self.time_ordered else self.tree_view

    def _on_current_message(self, current: QModelIndex, _previous: QModelIndex) -> None:
        message = current.data(MessageRole) if current.isValid() else None
        self.reply_target = message.mid if message is not None else None
        self.reply_banner.show_target(message)
        if message is not None and self.current is not None:
            self.current.tree.mark_read([message.mid])

    def _schedule_seen(self, *_args) -> None:
        if self.current is not None and self.current.tree.unread:
            self._seen_timer.start()

    def mark_visible_read(self) -> None:
        """Messages on screen in the active window count as seen."""
        session = self.current
        if session is None or not session.tree.unread or not self.isActiveWindow():
            return
        self.current_view_mids_visible(mark=True)

    def current_view_mids_visible(self, mark: bool = False) -> list[Mid]:
        view = self.current_view()
        model = view.model()
        if model is None:
            return []
        visible = []
        index = view.indexAt(QPoint(4, 2))
        height = view.viewport().height()
        while index.isValid() and view.visualRect(index).top() < height:
            visible.append(index.data(MessageRole).mid)
            index = view.indexBelow(index)
        if mark and self.current is not None:
            self.current.tree.mark_read(visible)
        return visible

    def _view_index(self, mid: Mid) -> QModelIndex:
        session = self.current
        if self.time_ordered:
            index = session.timeline.index_for(mid)
            return self.timeline_proxy.mapFromSource(index) if self.timeline_view.model() is self.timeline_proxy else index
        index = session.tree.index_for(mid)
        return self.tree_proxy.mapFromSource(index) if self.tree_view.model() is self.tree_proxy else index

    def select_message(self, mid: Mid) -> bool:
        """Show and select a message of the current group (it becomes the reply target)."""
        if self.current is None:
            return False
        if self.time_ordered:
            self.current.timeline.reveal(mid)
        else:
            self.current.tree.reveal(mid)
            self._expand_path(mid)
        self._update_older_button()
        index = self._view_index(mid)
        if not index.isValid():
            return False
        view = self.current_view()
        view.selectionModel().setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        return True

    def next_unread(self) -> None:
        """Select the oldest unread message, in this group or the next one with news."""
        order = [self.current] if self.current is not None else []
        order += [s for s in self.sessions.values() if s is not self.current]
        for session in order:
            unread = session.tree.unread_in_arrival_order()
            if not unread:
                continue
            if session is not self.current:
                self.select_group(session.gid)
            if self.filter_edit.text():
                self.filter_edit.clear()
            self.select_message(unread[0])
            return
        self.statusBar().showMessage("No unread messages", 3000)

    def mark_all_read(self) -> None:
        if self.current is not None:
            self.current.tree.mark_all_read()

    def set_time_ordered(self, on: bool) -> None:
        selected = self.reply_target
        self.time_ordered = on
        self.time_action.setChecked(on)
        self.tree_button.setChecked(not on)
        self.time_button.setChecked(on)
        if self.current is not None:
            self._set_view_models()
            if not on:
                self._expand_default(self.current)
            if selected is not None:
                self.select_message(selected)
            self._schedule_seen()

    def focus_filter(self) -> None:
        self.filter_edit.setFocus()
        self.filter_edit.selectAll()

    def _apply_filter(self, text: str) -> None:
        if self.current is None:
            return
        selected = self.reply_target
        pattern = text.strip()
        self.tree_proxy.setFilterFixedString(pattern)
        self.timeline_proxy.setFilterFixedString(pattern)
        self._set_view_models()
        if pattern:
            self.tree_view.expandAll()
        else:
            self._expand_default(self.current)
        if selected is not None:
            self.select_message(selected)

    def _escape(self) -> None:
        if self.filter_edit.hasFocus() or self.filter_edit.text():
            self.filter_edit.clear()
            self.compose.setFocus()
        else:
            self.start_new_thread()

    # -- writing --------------------------------------------------------------------------------

    def reply_to_selected(self) -> None:
        index = self.current_view().currentIndex()
        if index.isValid():
            self._on_current_message(index, QModelIndex())
        self.compose.setFocus()

    def start_new_thread(self) -> None:
        for view in (self.tree_view, self.timeline_view):
            if view.selectionModel() is not None:
                view.selectionModel().clearSelection()
                view.selectionModel().setCurrentIndex(QModelIndex(), QItemSelectionModel.SelectionFlag.Clear)
        self.reply_target = None
        self.reply_banner.show_target(None)
        self.compose.setFocus()

    def send_message(self) -> None:
        session = self.current
        text = self.compose.toPlainText()
        if session is None or not text.strip():
            return
        parent = self.reply_target
        self.compose_error.hide()
        self.backend.request("send", session.gid, text, parent, on_result=lambda _mid: self._sent(text),
                             on_error=self._send_failed)

    def _sent(self, text: str) -> None:
        if self.compose.toPlainText() == text:
            self.compose.clear()

    def _send_failed(self, error: Exception) -> None:
        self.compose_error.setText(f"Not sent: {describe_error(error)}")
        self.compose_error.show()

    # -- groups -------------------------------------------------------------------------------------

    def show_discovery(self) -> None:
        self.discovery.show()
        self.discovery.raise_()
        self.discovery.activateWindow()
        self.backend.request("advertise")

    def create_group(self) -> None:
        dialog = CreateGroupDialog(self.backend, self)
        if dialog.exec() and dialog.created_gid:
            self.select_group(dialog.created_gid)

    def join_by_id(self) -> None:
        dialog = JoinDialog(self.backend, parent=self)
        if dialog.exec() and dialog.joined_gid:
            self._joined(dialog.joined_gid)

    def join_group(self, gid: str) -> None:
        view = self.known_groups.get(gid) or self.discovery.model.view_for(gid)
        if view is not None and view.private and not view.joined:
            self.ask_passphrase(gid, view.desc)
            return
        self.backend.request("join_group", gid, on_result=self._joined,
                             on_error=lambda exc, gid=gid: self._join_refused(gid, exc))

    def _join_refused(self, gid: str, error: Exception) -> None:
        # The group may have turned out private after the list was drawn: ask, rather than just refuse.
        view = self.known_groups.get(gid)
        if view is not None and view.private and not view.joined:
            self.ask_passphrase(gid, view.desc)
        else:
            self.show_error(describe_error(error))

    def ask_passphrase(self, gid: str, desc: str) -> PassphraseDialog:
        """The passphrase dialog for a private group; window-modal, it returns at once."""
        if self.passphrase_dialog is not None:
            self.passphrase_dialog.close()
            self.passphrase_dialog.deleteLater()
        parent = self.discovery if self.discovery.isVisible() else self
        dialog = PassphraseDialog(self.backend, gid, desc, parent)
        dialog.accepted.connect(lambda d=dialog: d.joined_gid and self._joined(d.joined_gid))
        self.passphrase_dialog = dialog
        dialog.open()
        return dialog

    def _joined(self, gid: str) -> None:
        self._session(gid, load_history=True)
        self.select_group(gid)
        self.statusBar().showMessage(f"Joined {self.sessions[gid].title}", 4000)

    def leave_current_group(self) -> None:
        session = self.current
        if session is None:
            return
        answer = QMessageBox.question(self, "Leave group", f"Leave “{session.title}”? Others will see that you left.")
        if answer != QMessageBox.StandardButton.Yes:
            return
        self.backend.request("leave_group", session.gid, on_result=lambda _r, s=session: self._left(s))

    def _left(self, session: GroupSession) -> None:
        self.sessions.pop(session.gid, None)
        self.group_list.takeItem(self.group_list.row(session.item))
        if self.current is session:
            self._show_session(None)

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
        self.backend.request(
            "export_log", path, session.gid if session else None,
            on_result=lambda count: self.statusBar().showMessage(f"Exported {count} messages to {path}", 8000),
            on_error=lambda exc: self.show_error(f"Could not export to {path}: {describe_error(exc)}"),
        )

    # -- window ----------------------------------------------------------------------------------------

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.ActivationChange and self.isActiveWindow():
            self._schedule_seen()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.discovery.close()
        self.warning_log.close()
        super().closeEvent(event)
