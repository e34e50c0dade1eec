"""Joins: finding, creating, joining and leaving groups, invites, and the display name.

Joining a private group asks for its passphrase in a window-modal dialog that stays open on a
wrong one; a group that turns out private after the list was drawn is asked for, not refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMessageBox, QWidget

from ..bridge import describe_error
from ..dialogs import CreateGroupDialog, JoinDialog, NameDialog, PassphraseDialog, invite_text

if TYPE_CHECKING:
    from ..main_window import MainWindow
    from .sessions import GroupSession


class JoinController(QObject):
    """The dialogs and calls that change which groups this peer is in."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.backend = window.backend
        self.passphrase_dialog: PassphraseDialog | None = None

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
        view = self.window.session_controller.known_groups.get(gid) or self.window.discovery.model.view_for(gid)
        if view is not None and view.private and not view.joined:
            self.ask_passphrase(gid, view.desc)
            return
        self.backend.call(lambda peer: peer.join_group(gid), on_result=self._joined,
                          on_error=lambda exc, gid=gid: self._join_refused(gid, exc))

    def _join_refused(self, gid: str, error: Exception) -> None:
        # The group may have turned out private after the list was drawn: ask, rather than just refuse.
        view = self.window.session_controller.known_groups.get(gid)
        if view is not None and view.private and not view.joined:
            self.ask_passphrase(gid, view.desc)
        else:
            self.window.status_controller.show_error(describe_error(error))

    def ask_passphrase(self, gid: str, desc: str) -> PassphraseDialog:
        """The passphrase dialog for a private group; window-modal, it returns at once."""
        if self.passphrase_dialog is not None:
            self.passphrase_dialog.close()
            self.passphrase_dialog.deleteLater()
        parent = self.window.discovery if self.window.discovery.isVisible() else self.window
        dialog = PassphraseDialog(self.backend, gid, desc, parent)
        dialog.accepted.connect(lambda d=dialog: d.joined_gid and self._joined(d.joined_gid))
        self.passphrase_dialog = dialog
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
