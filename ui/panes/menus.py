"""The main window's menu bar (File, Conversation, View, Help) and the actions behind it: each action's
text, mnemonic, shortcut and icon, and the slot of the controller or pane it calls.

The actions are added to the window too, so their shortcuts answer from every window of the app, and
the keyboard-shortcuts list (F1) is read from them and cannot drift from the menus.
"""

from __future__ import annotations

from typing import Callable, Protocol

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QWidget

from ..controllers.commands import ConversationCommands
from ..controllers.compose import ComposeController
from ..controllers.direct import DirectController
from ..controllers.export import ExportController
from ..controllers.joins import JoinController
from ..controllers.mentions import MentionsController
from ..controllers.navigation import NavigationController
from ..controllers.sessions import SessionController
from ..controllers.status import StatusController
from ..controllers.team import TeamController
from ..dialogs import show_about, show_shortcuts
from ..files_view import FilesView
from ..mentions import MENTION_KEYS
from ..resources import icon
from ..search_window import SearchWindow
from .conversation import ConversationPane
from .layout import PaneLayout
from .notify_menu import NotifyMenus

# Keys the compose box and the views take themselves (no menu action holds them).
TYPING_KEYS = (("Send the message", "Enter"), ("New line in the message", "Shift+Enter"),
               ("Edit your last message (empty compose box)", "Up"),
               ("Cancel the reply, edit or filter; close the thread", "Esc"),
               ("Move between the panes", "Tab"),
               ("Download the selected file, or show it in its folder", "Enter"))

Key = QKeySequence | QKeySequence.StandardKey | str | None


class MenuHost(Protocol):
    """What the menus call: the window's controllers and panes (``commands`` weighs what is on show, a
    group or a direct conversation)."""

    join_controller: JoinController
    compose_controller: ComposeController
    session_controller: SessionController
    status_controller: StatusController
    team_controller: TeamController
    direct_controller: DirectController
    navigation: NavigationController
    files_view: FilesView
    search_window: SearchWindow
    mentions: MentionsController
    commands: ConversationCommands
    export: ExportController
    conversation: ConversationPane
    pane_layout: PaneLayout

    def current_gid(self) -> str | None: ...


class MenuBar:
    """Builds ``window``'s menu bar and owns its actions (the window exposes those other code uses under
    the same names); ``host`` gives the slots."""

    def __init__(self, window: QMainWindow, host: MenuHost) -> None:
        self.window = window
        self._file_menu(host)
        self._conversation_menu(host)
        self._view_menu(host)
        menu = window.menuBar().addMenu("&Help")
        self.shortcuts_action = self._action("&Keyboard shortcuts", "F1", self.show_shortcuts)
        menu.addAction(self.shortcuts_action)
        menu.addAction(self._action("&About M2MC", None, lambda: show_about(window)))

    def _action(self, text: str, shortcut: Key, slot: Callable[..., object], icon_name: str | None = None,
                checkable: bool = False) -> QAction:
        action = QAction(text, self.window)
        if icon_name:
            action.setIcon(icon(icon_name))
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
            # From every window of the app (the discovery and warnings windows too).
            action.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
        action.setCheckable(checkable)
        action.triggered.connect(slot)
        self.window.addAction(action)
        return action

    def _file_menu(self, host: MenuHost) -> None:
        menu = self.window.menuBar().addMenu("&File")
        joins = host.join_controller
        self.create_action = self._action("&Create group…", "Ctrl+Shift+N", joins.create_group, "create")
        self.discover_action = self._action("&Find groups…", "Ctrl+G", joins.show_discovery, "discover")
        self.join_action = self._action("&Join group by id…", None, joins.join_by_id, "join")
        self.join_invite_action = self._action("Join from &invite…", "Ctrl+Shift+I", joins.join_from_invite, "join")
        self.invite_action = self._action("Co&py invite", None, joins.copy_invite)
        self.add_peer_action = self._action("&Add peer by address…", None, joins.add_peer)
        self.leave_action = self._action("&Leave group", None, joins.leave_current_group)
        self.name_action = self._action("Change display &name…", None, joins.change_name)
        self.export_action = self._action("&Export chat log…", "Ctrl+E", host.export.choose_file, "export")
        quit_action = self._action("&Quit", QKeySequence.StandardKey.Quit, self.window.close)
        for action in (self.create_action, self.discover_action, self.join_action, self.join_invite_action,
                       self.add_peer_action, self.invite_action, self.leave_action):
            menu.addAction(action)
        menu.addSeparator()
        menu.addAction(self.name_action)
        menu.addSeparator()
        menu.addAction(self.export_action)
        menu.addSeparator()
        menu.addAction(quit_action)

    def _conversation_menu(self, host: MenuHost) -> None:
        menu = self.window.menuBar().addMenu("&Conversation")
        composer, sessions, talk = host.compose_controller, host.session_controller, host.conversation
        self.send_action = self._action("&Send", "Ctrl+Return", composer.send_message, "send")
        self.reply_action = self._action("&Reply to selected", "Ctrl+R", host.commands.reply_to_selected, "reply")
        self.attach_action = self._action("&Attach file…", "Ctrl+Shift+A", host.files_view.choose_files, "attach")
        self.notify_menus = NotifyMenus(self.window, sessions.notify_level, sessions.set_notify_level,
                                        host.current_gid)
        self.notify_menu, self.notify_actions = self.notify_menus.main, self.notify_menus.actions
        self.mentions_action = self._action("&Mentions…", "Ctrl+Shift+M", host.mentions.show)
        self.find_next_action = self._action("Find ne&xt", "F3", lambda: talk.find_match(1))
        self.find_previous_action = self._action("Find pre&vious", "Shift+F3", lambda: talk.find_match(-1))
        self.back_action = self._action("&Back", "Alt+Left", host.navigation.go_back)
        self.back_action.setToolTip("Back to where you were before following a link, or to all threads")
        self.new_thread_action = self._action("&New thread", "Ctrl+N", composer.start_new_thread)
        self.next_unread_action = self._action("Next &unread", "Ctrl+U", host.commands.next_unread, "unread")
        self.mark_read_action = self._action("Mark all rea&d", "Ctrl+Shift+U", sessions.mark_all_read)
        self.find_action = self._action("&Filter messages…", QKeySequence.StandardKey.Find, talk.focus_filter, "search")
        self.search_action = self._action("Search &everywhere…", "Ctrl+Shift+F", host.search_window.show_search,
                                          "search")
        self.warnings_action = self._action("&Warnings…", None, host.status_controller.show_warning_log)
        self.time_action = self._action("&Time-ordered view", "Ctrl+T",
                                        lambda: talk.set_time_ordered(not talk.time_ordered), "timeline",
                                        checkable=True)
        self.topic_action = self._action("Edit the topi&c…", None, talk.focus_topic)
        expand = self._action("Ex&pand all", None, talk.tree_view.expandAll)
        collapse = self._action("C&ollapse all", None, talk.tree_view.collapseAll)
        for action in (self.send_action, self.attach_action, self.reply_action, self.new_thread_action,
                       self.next_unread_action, self.mark_read_action, self.find_action, self.find_next_action,
                       self.find_previous_action, self.search_action, self.time_action, self.back_action, expand,
                       collapse, self.topic_action, self.mentions_action, self.notify_menu.menuAction(),
                       self.warnings_action):
            menu.addAction(action)
        menu.addAction(host.team_controller.admins_only_action)
        menu.aboutToShow.connect(host.team_controller.update_actions)

    def _view_menu(self, host: MenuHost) -> None:
        menu = self.window.menuBar().addMenu("&View")
        host.pane_layout.add_toggles(menu)
        menu.addSeparator()
        menu.addAction(host.direct_controller.read_receipts_action)
        menu.addAction(host.direct_controller.notify_action)
        escape = QAction(self.window)  # in no menu: Esc, wherever the keys are in the window
        escape.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        escape.triggered.connect(host.commands.escape)
        self.window.addAction(escape)

    def show_level(self, gid: str) -> None:
        """The notification level of group ``gid``, just shown, checked in the Conversation menu."""
        self.notify_menus.show_level(gid)

    def group_shown(self, shown: bool) -> None:
        """What only a group on show is for (leave, export, send…) is on while ``shown``."""
        for action in (self.export_action, self.leave_action, self.mark_read_action, self.send_action,
                       self.attach_action, self.invite_action, self.notify_menu.menuAction()):
            action.setEnabled(shown)

    def shortcut_rows(self) -> list[tuple[str, str]]:
        """Every key the window answers: its menus' shortcuts (read from the actions themselves, so
        the list cannot drift from them) and the keys the compose box and views take."""
        rows = [(action.text().replace("&", "").rstrip("…"), action.shortcut().toString(
                 QKeySequence.SequenceFormat.NativeText))
                for action in self.window.actions() if not action.shortcut().isEmpty() and action.text()]
        return rows + list(TYPING_KEYS) + list(MENTION_KEYS)

    def show_shortcuts(self) -> None:
        parent: QWidget = self.window
        show_shortcuts(parent, self.shortcut_rows())
