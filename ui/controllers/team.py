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
from PySide6.QtWidgets import QMenu, QMessageBox, QWidget

from ...middleware.events import Event, MemberRemoved, RemovedFromGroup, RoleChanged
from ...middleware.names import shown
from ..bridge import Backend
from ..notices import NoticeRow
from ..resources import icon
from ..state import Selection
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
        backend.peer_event.connect(self._on_event)

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
                self.sessions.refresh_group_view(gid)

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
