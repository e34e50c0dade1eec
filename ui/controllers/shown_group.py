"""Showing a group, or none: what opening it sets in each pane and controller.  The group left keeps
its read marks; the group opened brings back its draft, the menus' switches that need a group, its
read-only state (removed from it), its warnings on the banner, its threads, members and presence, and
its conversation, whose on-screen messages start counting as seen."""

from __future__ import annotations

from typing import Callable, Protocol

from PySide6.QtCore import QAbstractItemModel
from PySide6.QtWidgets import QListWidget, QWidget

from ..focus import Navigation
from ..model.state import Selection
from .compose import ComposeController
from .sessions import GroupSession, SessionController
from .status import StatusController
from .team import TeamController


class GroupMenus(Protocol):
    """The menu bar (ui.panes.menus): what needs a group on show, and the group's notification level."""

    def group_shown(self, shown: bool) -> None: ...
    def show_level(self, gid: str) -> None: ...


class GroupConversation(Protocol):
    """The conversation pane (ui.panes.conversation)."""

    def show_session(self, session: GroupSession | None) -> None: ...
    def schedule_seen(self, *_args: object) -> None: ...


class ThreadsShown(Protocol):
    """The threads pane (ui.panes.side)."""

    def show_threads(self, threads: QAbstractItemModel | None) -> None: ...


class ShownGroupController:
    def __init__(self, selection: Selection[GroupSession], sessions: SessionController, compose: ComposeController,
                 status: StatusController, team: TeamController, menus: GroupMenus,
                 conversation: GroupConversation, threads: ThreadsShown, member_list: QListWidget,
                 apply_focus: Callable[[Navigation, QWidget | None], None], group_list: QWidget) -> None:
        self.selection, self.sessions, self.compose, self.status, self.team = \
            selection, sessions, compose, status, team
        self.menus, self.conversation, self.threads, self.member_list = menus, conversation, threads, member_list
        self.apply_focus, self.group_list = apply_focus, group_list

    def chosen(self, gid: str | None) -> None:
        """A group picked in the groups pane (None: the list's selection went): shown, the keys in place."""
        session = self.sessions.sessions.get(gid) if gid is not None else None
        self.show(session)
        if session is not None:
            self.apply_focus(Navigation.GROUP_SHOWN, self.group_list)

    def show(self, session: GroupSession | None) -> None:
        current = self.selection.session
        if current is not None and current is not session:
            self.sessions.save_read_marks()
        reopened = current is session and session is not None
        self.selection.open(session)
        if not reopened:  # the same group again: an edit in progress stays
            self.compose.restore_draft(session)
        self.menus.group_shown(session is not None)
        self.team.removed_from(session)  # a group this peer was removed from: read only
        self.status.show_warning_banner()
        if session is None:
            self.conversation.show_session(None)
            self.member_list.clear()
            self.threads.show_threads(None)
            self.status.refresh()
            return
        self.sessions.sessions.warning_seen(session)  # its warnings, if any, are on the banner now
        self.menus.show_level(session.gid)
        self.threads.show_threads(session.threads)
        self.conversation.show_session(session)
        self.status.fill_members()
        self.status.refresh()
        self.sessions.refresh_group_view(session.gid)
        self.status.poll_presence()
        self.conversation.schedule_seen()
