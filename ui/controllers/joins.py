"""Joins: finding, creating, joining and leaving groups, invites, and the display name.

Joining from the discovery window opens a window-modal dialog that shows what is verified of the
group (its signed description, its creator's name and fingerprint, its member count) and joins only
on its Join button; for a private group it asks the passphrase too and stays open on a wrong one.
A group that turns out private after the list was drawn is asked for, not refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMessageBox, QWidget

from ...middleware.types import GroupView
from ..dialogs import ConfirmJoinDialog, CreateGroupDialog, JoinDialog, NameDialog, invite_text

if TYPE_CHECKING:
    from ..main_window import MainWindow
    from .sessions import GroupSession


class JoinController(QObject):
    """The dialogs and calls that change which groups this peer is in."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.backend = window.backend
        self.join_dialog: ConfirmJoinDialog | None = None

    def show_discovery(self) -> None:
        if not self.window.discovery.isVisible():
            self._place_beside(self.window.discovery)
        self.window.discovery.show()
        self.window.discovery.raise_()
        self.window.discovery.activateWindow()
        self.backend.call(lambda peer: peer.advertise())

    def create_group(self) -> None:
        dialog = CreateGroupDialog(self.backend, self.window)
        if dialog.exec() and dialog.created_gid:
            self.window.select_group(dialog.created_gid)

    def join_by_id(self) -> None:
        dialog = JoinDialog(self.backend, parent=self.window)
        if dialog.exec() and dialog.joined_gid:
            self._joined(dialog.joined_gid)

    def join_group(self, gid: str) -> None:
        """Ask before joining ``gid``: the confirmation shows what is verified of it."""
        view = self.window.session_controller.known_groups.get(gid) or self.window.discovery.model.view_for(gid)
        if view is None:
            self.window.status_controller.show_error(f"unknown group {gid!r:.80}")
        elif view.joined:
            self._joined(gid)
        else:
            self.confirm_join(view)

    def confirm_join(self, view: GroupView) -> ConfirmJoinDialog:
        """The join confirmation for ``view``'s group; window-modal, it returns at once."""
        if self.join_dialog is not None:
            self.join_dialog.close()
            self.join_dialog.deleteLater()
        parent = self.window.discovery if self.window.discovery.isVisible() else self.window
        dialog = ConfirmJoinDialog(self.backend, view, parent)
        dialog.accepted.connect(lambda d=dialog: d.joined_gid and self._joined(d.joined_gid))
        self.join_dialog = dialog
        dialog.open()
        return dialog

    def _joined(self, gid: str) -> None:
        self.window.session_controller.session(gid, load_history=True)
        self.window.select_group(gid)
        self.window.statusBar().showMessage(f"Joined {self.window.session_controller.sessions[gid].title}", 4000)

    def leave_current_group(self) -> None:
        session = self.window.current
        if session is None:
            return
        answer = QMessageBox.question(self.window, "Leave group",
                                      f"Leave “{session.title}”? Others will see that you left.")
        if answer != QMessageBox.StandardButton.Yes:
            return
        gid = session.gid
        self.backend.call(lambda peer: peer.leave_group(gid), on_result=lambda _r, s=session: self._left(s))

    def _left(self, session: GroupSession) -> None:
        self.window.session_controller.sessions.pop(session.gid, None)
        self.window.group_list.takeItem(self.window.group_list.row(session.item))
        if self.window.current is session:
            self.window.show_session(None)

    def join_from_invite(self) -> None:
        dialog = JoinDialog(self.backend, parent=self.window, invite=QGuiApplication.clipboard().text())
        if dialog.exec() and dialog.joined_gid:
            self._joined(dialog.joined_gid)

    def copy_invite(self) -> None:
        session = self.window.current
        if session is None:
            return
        QGuiApplication.clipboard().setText(invite_text(session.gid, session.title))
        private = session.view is not None and session.view.private
        self.window.statusBar().showMessage("Invite copied" + (" — give the passphrase separately, in person"
                                                               if private else ""), 5000)

    def change_name(self) -> None:
        dialog = NameDialog(self.backend.name, self.window, title="Change display name")
        if dialog.exec() and dialog.name != self.backend.name:
            name = dialog.name
            self.backend.call(lambda peer: peer.set_name(name), on_result=lambda _r: self._name_changed(name))

    def _name_changed(self, name: str) -> None:
        self.backend.name = name
        self.window.statusBar().showMessage(f"Your display name is now {name}", 5000)
        for gid in self.window.session_controller.sessions:
            self.backend.call(lambda peer, gid=gid: peer.group(gid),
                              on_result=self.window.session_controller.on_group_view, on_error=lambda _e: None)

    def _place_beside(self, window: QWidget) -> None:
        """Put ``window`` next to the main window where the screen has room, else leave it to the desktop."""
        screen = (self.window.screen() or QGuiApplication.primaryScreen()).availableGeometry()
        frame = self.window.frameGeometry()
        width = window.width()
        if frame.right() + 12 + width <= screen.right():
            window.move(frame.right() + 12, frame.top())
        elif frame.left() - 12 - width >= screen.left():
            window.move(frame.left() - 12 - width, frame.top())
