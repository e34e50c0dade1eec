"""The main window (the thesis's ChatConsole): it lays out the panes and the menu bar
(:mod:`ui.panes.menus`) and wires them to the controllers.

The panes (:mod:`ui.panes`) own their widgets: the groups list (a mirror of the sessions of
:mod:`ui.model.sessions`), the conversation (a group's views, the reading and the compose box), the threads
and members beside it, and the status bar.  The controllers (:mod:`ui.controllers`) hold the logic
(sessions and read state, compose, status, joins, direct messages, jumps and the way back, showing a
group, the commands on what is shown, mentions, export), each seeing the window or a pane through its own
view protocol, as qutebrowser keeps its completion model, view and controller apart.  A widget or an
action is reached through the pane or the menu bar that owns it (``window.conversation.tree_view``,
``window.menus.leave_action``); the window names a pane's widget itself only where a controller's view
protocol asks for it.  What the reader has chosen and the sessions' state are Qt-free (:mod:`ui.model`) and
shared.  The window talks to the middleware only through a :class:`~ui.bridge.Backend`: typed calls with
callbacks, events as signals, all on the GUI thread.

What is new is hard to miss: unread messages carry a coloured bar and
"● new", the path to each new message is expanded, the groups pane shows an
unread badge, and "Next unread" (Ctrl+U) walks them in arrival order.  A
message counts as seen once selected, or after it has been on screen for a
moment while the window is active.
"""

from __future__ import annotations

import logging

from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QMenu,
    QMainWindow,
    QStackedWidget,
    QWidget,
)

from ..middleware.types import ChatMessage, Mid

from .bridge import Backend
from .dialogs import WarningLogWindow
from .direct_pane import DirectPane
from .discovery_window import DiscoveryWindow
from .focus import Navigation
from .search_window import SearchWindow
from .controllers.commands import ConversationCommands
from .controllers.compose import ComposeController
from .controllers.direct import DirectController
from .controllers.team import TeamController
from .controllers.export import ExportController
from .controllers.joins import JoinController
from .controllers.mentions import MentionsController
from .controllers.navigation import NavigationController
from .controllers.restart import RestartController
from .controllers.sessions import GroupSession, SessionController
from .controllers.shown_group import ShownGroupController
from .controllers.status import StatusController
from .files_view import FilesView
from .notifier import Notifier
from .panes.conversation import ConversationHooks, ConversationPane
from .panes.groups import GroupsPane
from .panes.keys import KeyRouting
from .panes.message_menu import message_menu
from .panes.menus import MenuBar
from .panes.layout import MINIMUM_WIDTH, PaneLayout
from .panes.side import MembersPane, ThreadsPane
from .panes.status import StatusPane
from .model.state import ComposeTarget, Selection, ThreadFilter
from .resources import app_icon

log = logging.getLogger(__name__)

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
        self.setWindowTitle("M2MC chat")
        self.setWindowIcon(app_icon())
        self.resize(1100, 700)

        # A window of its own, not a child: it must not stay above the main window.
        self.discovery = DiscoveryWindow(backend)
        self.notifier = Notifier(self, open_target=lambda target: self.navigation.show_message(*target))
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

        self._build_panes()
        self.direct_controller = DirectController(backend, self, self.settings, self)
        self.team_controller = TeamController(backend, self.selection, self.session_controller, self.dialog_parent,
                                              self)
        self.direct_controller.member_actions.append(self.team_controller.add_actions)
        self.navigation: NavigationController = NavigationController(
            backend, self.selection, self.session_controller, self.direct_controller, self.status_controller.show_error,
            self, self.conversation, self.direct_pane.view, self)
        self.team_controller.compose_widgets = self.compose_widgets
        self.restart = RestartController(self, self.settings, self.status_controller, self.session_controller,
                                         self.direct_controller, self.discovery)
        self.search_window = SearchWindow(backend, self.session_controller.sessions,
                                          lambda gid, mid: self.navigation.show_message(gid, mid),
                                          self.direct_controller.conversations)
        self.session_controller.other_unread = self.direct_controller.unread_total
        self.mentions = MentionsController(backend, self.session_controller, self.navigation.open_link, self)
        self.export = ExportController(backend, self.selection, self.show_status, self.show_error, self)
        self.commands = ConversationCommands(self.selection, self.compose_target, self.session_controller,
                                             self.compose_controller, self.direct_controller, self.conversation)
        self.menus = MenuBar(self, self)
        self.conversation.time_action = self.menus.time_action  # the pane's header button shows its state
        self.shown_group = ShownGroupController(
            self.selection, self.session_controller, self.compose_controller, self.status_controller,
            self.team_controller, self.menus, self.conversation, self.threads_pane, self.members_pane.member_list,
            self.apply_focus, self.groups_pane.group_list)
        self.groups_pane.group_chosen.connect(self.shown_group.chosen)
        self.status_pane = StatusPane(self)
        self.setStatusBar(self.status_pane)
        self.discovery.alone_changed.connect(self.status_pane.show_alone)
        self.status_controller.refresh()
        self.pane_layout.restore_sizes()

        self.show_session(None)

    @property
    def current(self) -> GroupSession | None:
        """The session of the group shown."""
        return self.conversation.current

    @property
    def time_ordered(self) -> bool:
        return self.conversation.time_ordered

    def current_gid(self) -> str | None:
        return self.current.gid if self.current is not None else None

    def _shown(self) -> GroupSession:
        """The current session, for what is only done while a group is shown."""
        return self.conversation._shown()

    # -- layout -------------------------------------------------------------------------

    def _build_panes(self) -> None:
        self.groups_pane: GroupsPane = GroupsPane(self.join_controller.show_discovery,
                                      lambda gid, menu: self.menus.notify_menus.menu(lambda: gid, menu))
        self.session_controller.sessions.listen(self.groups_pane)

        joins = self.join_controller
        hooks = ConversationHooks(self.apply_focus, self._open_link, self._link_title, self.message_menu, self.show_status,
                                  lambda gid: self.restart.restored_thread(gid))
        pane = ConversationPane(
            self.backend, self.selection, self.view_filter, self.session_controller, self.compose_controller,
            self.files_view, [("Find groups…", "discover", joins.show_discovery),
                              ("Create group…", "create", joins.create_group),
                              ("Join from invite…", "join", joins.join_from_invite)], hooks)
        self.conversation: ConversationPane = pane
        self.session_controller.conversation = pane
        pane.warning_banner.show_all.connect(self.status_controller.show_warning_log)
        pane.warning_banner.dismissed.connect(self.status_controller.dismiss_warning)
        self.setAcceptDrops(True)
        self.installEventFilter(self.files_view)  # files dropped anywhere on the window are attached

        self.members_pane: MembersPane = MembersPane()
        self.threads_pane: ThreadsPane = ThreadsPane(self._link_title)
        self.threads_pane.thread_chosen.connect(pane.open_thread)
        self.direct_pane: DirectPane = DirectPane()
        self.centre_stack = QStackedWidget()
        self.centre_stack.addWidget(pane)
        self.centre_stack.addWidget(self.direct_pane)
        self.pane_layout: PaneLayout = PaneLayout(self, self.settings, self.groups_pane, self.centre_stack,
                                                  self.threads_pane, self.members_pane)
        # A file pasted in a direct conversation is said to go to groups (ui.files_view), not typed as a path.
        self.direct_pane.compose.files_given.connect(self.files_view.attach)
        self.direct_pane.compose.image_given.connect(self.files_view.attach_image)
        # The widgets the controllers' view protocols name on the window (ComposeView, JoinsView, StatusView,
        # DirectView); everything else is reached through the pane or the menu bar that owns it.
        box = pane.compose_box
        self.compose, self.reply_banner, self.compose_error, self.topic_edit = \
            pane.compose, box.reply_banner, box.compose_error, pane.topic_edit
        self.warning_banner = pane.warning_banner
        self.group_list, self.direct_list = self.groups_pane.group_list, self.groups_pane.direct_list
        self.member_list = self.members_pane.member_list
        self.keys = KeyRouting(self, self.centre_stack, pane, self.direct_pane,
                               (self.group_list, self.threads_pane.thread_list, self.member_list), self.direct_list,
                               lambda: self.current)
        self.setCentralWidget(self.pane_layout.splitter)
        self.setMinimumWidth(MINIMUM_WIDTH)

    # -- start ----------------------------------------------------------------------------

    def start(self) -> None:
        """Load the joined groups and their histories (asynchronously), and open what was on show."""
        self.restart.start()

    def group_to_open(self, joined: list[str]) -> str | None:
        return self.restart.group_to_open(joined)

    def direct_on_show(self) -> bool:
        return self.keys.direct_on_show()

    # -- sessions -------------------------------------------------------------------------

    def select_group(self, gid: str) -> None:
        self.groups_pane.select(gid)

    # -- where the keys go (ui.panes.keys) ------------------------------------------------------

    def focus_compose(self) -> None:
        self.keys.focus_compose()

    def focus_first_steps(self) -> None:
        self.keys.focus_first_steps()

    def apply_focus(self, navigation: Navigation, from_list: QWidget | None = None) -> None:
        self.keys.apply_focus(navigation, from_list)

    def show_session(self, session: GroupSession | None) -> None:
        self.shown_group.show(session)

    # -- what the controllers ask of the view (their *View protocols) ----------------------------

    def compose_widgets(self) -> list[QWidget]:
        """What writing in the group shown takes: off in a group this peer was removed from."""
        box = self.conversation.compose_box
        return [box.compose, box.send_button] + ([box.attach_button] if box.attach_button is not None else [])

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
        self.conversation.mention_completer.set_members(list(view.members) if view is not None else [], self.backend.pid)
        self.apply_focus(Navigation.REFRESHED)

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

    def named_views(self) -> tuple[QAbstractItemView, ...]:
        """The views whose delegates name members (and mark look-alike names)."""
        return self.conversation.tree_view, self.conversation.timeline_view, self.threads_pane.thread_list

    # -- message actions -------------------------------------------------------------------------

    def _open_link(self, url: str) -> None:
        self.navigation.open_link(url)

    def _link_title(self, url: str) -> str | None:
        return self.navigation.link_title(url)

    def message_menu(self, message: ChatMessage) -> QMenu:
        """Reply, Copy text, Copy link, Quote (and open the thread), for the context menu."""
        view = self.current.view if self.current is not None else None
        return message_menu(self, message, self.backend.pid, self.compose_controller, self.files_view, self.conversation.open_thread,
                            self.direct_controller.message_action,
                            view is not None and view.roles.get(self.backend.pid) in ("owner", "admin"))

    # -- window ----------------------------------------------------------------------------------------

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        if hasattr(self, "pane_layout"):  # not before the panes are built
            self.pane_layout.resized(event.size().width())

    def update_title(self) -> None:
        self.session_controller.update_title()

    def show_side_panes(self, on: bool) -> None:
        self.pane_layout.show_side_panes(on)

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().changeEvent(event)
        if event.type() == event.Type.ActivationChange and self.isActiveWindow():
            self.conversation.schedule_seen()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.pane_layout.save_sizes()
        self.restart.save()
        self.session_controller.save_read_marks()
        self.discovery.close()
        self.search_window.close()
        self.warning_log.close()
        super().closeEvent(event)

