"""Joins: finding, creating, joining and leaving groups, invites, and the display name.

Joining from the discovery window opens a window-modal dialog that shows what is verified of the
group (its signed description, its creator's name and fingerprint, its member count) and joins only
on its Join button; for a private group it asks the passphrase too and stays open on a wrong one.
A group that turns out private after the list was drawn is asked for, not refused.
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QObject
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMessageBox, QWidget

from ...middleware.types import GroupView
from ..bridge import Backend
from ..dialogs import (AddPeerDialog, ConfirmJoinDialog, CreateGroupDialog, JoinDialog, NameDialog, invite_text,
                       plain_error)
from ..discovery_window import DiscoveryWindow
from ..model.state import Selection
from .sessions import GroupSession, SessionController


class JoinsView(Protocol):
    """The discovery window, the widget the dialogs belong to, and what a join or leave changes on screen."""

    discovery: DiscoveryWindow

    def dialog_parent(self) -> QWidget: ...
    def select_group(self, gid: str) -> None: ...
    def show_session(self, session: GroupSession | None) -> None: ...
    def show_status(self, text: str, timeout: int) -> None: ...
    def show_error(self, message: str) -> None: ...

    @property
    def compose(self) -> QWidget: ...


class JoinController(QObject):
    """The dialogs and calls that change which groups this peer is in."""

    def __init__(self, backend: Backend, selection: Selection[GroupSession], sessions: SessionController,
                 view: JoinsView, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.backend = backend
        self.selection = selection
        self.sessions = sessions
        self.join_dialog: ConfirmJoinDialog | None = None
        discovery = view.discovery  # what is asked in the Find groups window is done here
        discovery.join_requested.connect(self.join_group)
        discovery.create_requested.connect(self.create_group)
        discovery.join_by_id_requested.connect(self.join_by_id)
        discovery.add_peer_requested.connect(self.add_peer)

    def show_discovery(self) -> None:
        if not self.view.discovery.isVisible():
            self._place_beside(self.view.discovery)
        self.view.discovery.show()
        self.view.discovery.raise_()
        self.view.discovery.activateWindow()
        self.backend.call(lambda peer: peer.advertise())

    def create_group(self) -> None:
        dialog = CreateGroupDialog(self.backend, self.view.dialog_parent())
        if dialog.exec() and dialog.created_gid:
            self.view.select_group(dialog.created_gid)
            self.view.compose.setFocus()  # what one does next in a new group is write in it

    def join_by_id(self) -> None:
        dialog = JoinDialog(self.backend, parent=self.view.dialog_parent())
        if dialog.exec() and dialog.joined_gid:
            self._joined(dialog.joined_gid)

    def join_group(self, gid: str) -> None:
        """Ask before joining ``gid``: the confirmation shows what is verified of it."""
        view = self.sessions.known_groups.get(gid) or self.view.discovery.model.view_for(gid)
        if view is None:
            self.view.show_error(f"unknown group {gid!r:.80}")
        elif view.joined:
            self._joined(gid)
        else:
            self.confirm_join(view)

    def confirm_join(self, view: GroupView) -> ConfirmJoinDialog:
        """The join confirmation for ``view``'s group; window-modal, it returns at once."""
        if self.join_dialog is not None:
            self.join_dialog.close()
            self.join_dialog.deleteLater()
        parent = self.view.discovery if self.view.discovery.isVisible() else self.view.dialog_parent()
        dialog = ConfirmJoinDialog(self.backend, view, parent)
        dialog.accepted.connect(lambda: self._joined(dialog.joined_gid) if dialog.joined_gid else None)
        self.join_dialog = dialog
        dialog.open()
        return dialog

    def _joined(self, gid: str) -> None:
        self.sessions.session(gid, load_history=True)
        self.view.select_group(gid)
        self.view.compose.setFocus()  # the keys go on in the group just joined, not in the groups list
        self.view.show_status(f"Joined {self.sessions.sessions[gid].title}", 4000)

    def leave_current_group(self) -> None:
        session = self.selection.session
        if session is None:
            return
        box = QMessageBox(QMessageBox.Icon.Question, "Leave group",
                          f"Leave “{session.title}”? Others will see that you left.", parent=self.view.dialog_parent())
        leave = box.addButton("&Leave", QMessageBox.ButtonRole.DestructiveRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)  # as Delete…: a stray Enter keeps you in
        box.exec()
        if box.clickedButton() is not leave:
            return
        gid = session.gid
        self.backend.call(lambda peer: peer.leave_group(gid), on_result=lambda _r: self._left(session))

    def _left(self, session: GroupSession) -> None:
        self.sessions.sessions.remove(session)
        if self.selection.session is session:
            self.view.show_session(None)

    def join_from_invite(self) -> None:
        dialog = JoinDialog(self.backend, parent=self.view.dialog_parent(), invite=QGuiApplication.clipboard().text())
        if dialog.exec() and dialog.joined_gid:
            self._joined(dialog.joined_gid)

    def copy_invite(self) -> None:
        """The group's invite, with this peer's address in it, so that it also works where
        multicast does not flow."""
        session = self.selection.session
        if session is None:
            return
        gid, title = session.gid, session.title
        private = session.view is not None and session.view.private

        def copied(link: str) -> None:
            QGuiApplication.clipboard().setText(invite_text(title, link))
            self.view.show_status("Invite copied" + (" — give the passphrase separately, in person"
                                                     if private else ""), 5000)

        self.backend.call(lambda peer: peer.invite(gid), on_result=copied,
                          on_error=lambda exc: self.view.show_error(plain_error(exc)))

    def add_peer(self) -> None:
        """Add a peer by the address the user types: for networks where multicast does not flow.  The
        dialog stays open with the middleware's answer: an error, or nobody answering, is said there."""
        dialog = AddPeerDialog(self.view.dialog_parent(), self._ask_peer)
        self.add_peer_dialog = dialog  # for tests, which drive it while it is open
        dialog.accepted.connect(lambda: self._peer_added(dialog.answer))
        dialog.open()  # window-modal, without a loop of its own: the answer comes while it waits

    def _peer_added(self, answer: dict | None) -> None:
        if answer is not None:
            who = answer.get("name") or "A peer"
            self.view.show_status(f"{who} answered at {answer['endpoint']}: its groups appear under Find groups "
                                  "(Ctrl+G)", 8000)

    def _ask_peer(self, address: str, answered, failed) -> None:
        self.backend.call_async(lambda peer: peer.add_peer_async(address), on_result=answered,
                                on_error=lambda exc: failed(plain_error(exc)))

    def change_name(self) -> None:
        dialog = NameDialog(self.backend.name, self.view.dialog_parent(), title="Change display name")
        if dialog.exec() and dialog.name != self.backend.name:
            name = dialog.name
            self.backend.call(lambda peer: peer.set_name(name), on_result=lambda _r: self._name_changed(name))

    def _name_changed(self, name: str) -> None:
        self.backend.name = name
        self.view.show_status(f"Your display name is now {name}", 5000)
        for gid in self.sessions.sessions:
            self.sessions.refresh_group_view(gid)

    def _place_beside(self, window: QWidget) -> None:
        """Put ``window`` next to the main window where the screen has room, else leave it to the desktop."""
        main = self.view.dialog_parent()
        screen = (main.screen() or QGuiApplication.primaryScreen()).availableGeometry()
        frame = main.frameGeometry()
        width = window.width()
        if frame.right() + 12 + width <= screen.right():
            window.move(frame.right() + 12, frame.top())
        elif frame.left() - 12 - width >= screen.left():
            window.move(frame.left() - 12 - width, frame.top())
