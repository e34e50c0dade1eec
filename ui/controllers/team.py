"""Roles and removal in the app (issue 44): the members pane's "Make admin", "Remove admin" and
"Remove from group…", and the notices a role change or a removal puts in the conversation.

The actions follow the rules every member checks (middleware.roles): only the owner (the group's
creator) makes or unmakes admins, the owner or an admin removes, nobody removes the owner.  A
removal asks first, and says what it does to a private group (a new key the removed member does
not get) and what it cannot do (what that member already has stays with it).
"""

from __future__ import annotations

import time
from typing import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QMessageBox, QPlainTextEdit, QWidget

from ...middleware.events import Event, MemberRemoved, RemovedFromGroup, RoleChanged
from ...middleware.names import shown
from ...middleware.types import GroupView
from ..bridge import Backend
from ..notices import NoticeRow
from ..resources import icon
from ..model.state import Selection
from .sessions import GroupSession, SessionController

_notice_numbers = iter(range(2**62, 2**63))  # the ids of these rows: none is a message's


class TeamController(QObject):
    """The members pane's role actions, and the conversation's notices of role changes and removals."""

    def __init__(self, backend: Backend, selection: Selection[GroupSession], sessions: SessionController,
                 dialog_parent: Callable[[], QWidget], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.selection = selection
        self.sessions = sessions
        self.dialog_parent = dialog_parent
        # What writing takes (the window's compose box and buttons): off in a group this peer was removed from
        self.compose_widgets: Callable[[], list[QWidget]] = list
        self._placeholder: str | None = None  # the compose box's own, put back in other groups
        self.admins_only_action = QAction("On&ly admins pin and change the topic", self, checkable=True)
        self.admins_only_action.setToolTip("The owner's setting: members' pins and topic changes count no more")
        self.admins_only_action.triggered.connect(self._set_admins_only)
        self.update_actions()
        backend.peer_event.connect(self._on_event)

    def update_actions(self) -> None:
        """The setting shows in the Conversation menu; only the owner may change it."""
        session = self.selection.session
        view = session.view if session is not None else None
        self.admins_only_action.setChecked(bool(view is not None and view.admins_only))
        self.admins_only_action.setEnabled(bool(view is not None and view.joined
                                                and view.roles.get(self.backend.pid) == "owner"))

    def _set_admins_only(self, on: bool) -> None:
        session = self.selection.session
        if session is not None:
            gid = session.gid
            self.backend.call(lambda peer: peer.set_admins_only(gid, on))

    def removed_from(self, session: GroupSession | None) -> None:
        """Nothing can be written in a group this peer was removed from: its compose box says so."""
        view = session.view if session is not None else None
        widgets = self.compose_widgets()
        compose = widgets[0] if widgets else None
        if not isinstance(compose, QPlainTextEdit):
            return
        if self._placeholder is None:
            self._placeholder = compose.placeholderText()
        if view is None or not any(m.pid == self.backend.pid for m in view.removed):
            compose.setPlaceholderText(self._placeholder)  # (the window enabled the widgets for this group)
            return
        for widget in widgets:
            widget.setEnabled(False)
        compose.setPlaceholderText("You were removed from this group: its history stays here, nothing more can be sent")

    # -- the members pane's actions --------------------------------------------------------------

    def add_actions(self, menu: QMenu, pid: str, name: str) -> None:
        """Add what this peer may do to ``pid``'s role in the group shown."""
        session = self.selection.session
        view = session.view if session is not None else None
        if view is None or not view.joined or pid not in view.roles:
            return
        mine, theirs = view.roles.get(self.backend.pid, "member"), view.roles[pid]
        gid, name = view.gid, shown(name)
        if mine == "owner" and theirs == "member":
            menu.addAction(icon("member"), "Make admin", lambda: self._set_role(gid, pid, "admin"))
        elif mine == "owner" and theirs == "admin":
            menu.addAction(icon("member"), "Remove admin", lambda: self._set_role(gid, pid, "member"))
        if mine in ("owner", "admin") and theirs != "owner":
            menu.addAction(icon("close"), "Remove from group…", lambda: self.confirm_removal(gid, pid, name))

    def _set_role(self, gid: str, pid: str, role: str) -> None:
        self.backend.call(lambda peer: peer.set_role(gid, pid, role))

    def removal_text(self, gid: str, name: str) -> str:
        view = self.sessions.sessions[gid].view if gid in self.sessions.sessions else None
        private = view is not None and view.private
        desc = view.desc if view is not None else "this group"
        text = (f"Remove {name} from “{desc}”? Every member will refuse what {name} sends from now on, and "
                f"{name} is told.")
        if private:
            text += (f"\n\nThe group gets a new key that {name} does not get: {name} cannot read anything sent "
                     "after this. The passphrase will no longer let anyone join.")
        else:
            text += ("\n\nThis group is public: anyone on the network can still join it with a new key.")
        return text + f"\n\n{name} keeps the messages they already have."

    def confirm_removal(self, gid: str, pid: str, name: str) -> None:
        box = QMessageBox(QMessageBox.Icon.Question, "Remove from group", self.removal_text(gid, name),
                          parent=self.dialog_parent())
        remove = box.addButton("&Remove", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)  # a stray Enter removes nobody
        box.exec()
        if box.clickedButton() is remove:
            self.backend.call(lambda peer: peer.remove_member(gid, pid))

    # -- notices -----------------------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        match event:
            case RoleChanged(gid, _pid, name, role, by, by_name):
                what = f"made {name} an admin" if role == "admin" else f"made {name} a member again (not an admin)"
                self._notice(gid, by, by_name, what)
            case MemberRemoved(gid, _pid, name, by, by_name):
                self._notice(gid, by, by_name, f"removed {name} from the group")
            case RemovedFromGroup(gid, desc, by, by_name):
                self._notice(gid, by, by_name, f"removed you from {desc}. What you have stays here; "
                                               "nothing more arrives")
                self.backend.call(lambda peer: peer.group(gid), on_result=self._removed_view)

    def _removed_view(self, view: GroupView) -> None:
        session = self.sessions.sessions.get(view.gid)
        if session is not None:
            session.view = view
            if self.selection.is_current(session):
                self.removed_from(session)

    def _notice(self, gid: str, by: str, by_name: str, text: str) -> None:
        session = self.sessions.sessions.get(gid)
        if session is None:
            return
        order = max((node.message.order for node in session.tree.arrival), default=0)
        now = int(time.time() * 1000)
        row = NoticeRow(gid, (by, next(_notice_numbers)), None, by_name, text, now, now, order)
        session.notices = [*session.notices, row]
        self.sessions._on_messages(gid, [row])
        self.sessions.refresh_group_view(gid)
