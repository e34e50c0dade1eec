"""Small dialogs: display name, create group (CreateNewGrpWindow), join by id, about.

Create and Join check what they can at once (empty, too long) and show the
middleware's own message when it refuses; the dialog stays open until the
call succeeds, so the user can fix the input.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from middleware import __version__
from middleware.manager import MAX_DESC, MAX_NAME

from .bridge import Backend, describe_error
from .resources import app_icon


class _ValidatedDialog(QDialog):
    def __init__(self, title: str, parent: QWidget | None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.setWindowIcon(app_icon())
        self.form = QFormLayout()
        self.error_label = QLabel()
        self.error_label.setObjectName("dialogError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self._try_accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(self.form)
        layout.addWidget(self.error_label)
        layout.addWidget(self.buttons)

    def show_error(self, message: str) -> None:
        self.error_label.setText(message)
        self.error_label.setVisible(bool(message))
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)

    def _try_accept(self) -> None:
        raise NotImplementedError


class NameDialog(_ValidatedDialog):
    """First start: ask for the name others will see."""

    def __init__(self, suggestion: str = "", parent: QWidget | None = None) -> None:
        super().__init__("Welcome to M2MC", parent)
        intro = QLabel("Choose the name the other people on your network will see. You can keep it for next time.")
        intro.setWordWrap(True)
        self.form.addRow(intro)
        self.name_edit = QLineEdit(suggestion)
        self.name_edit.setMaxLength(MAX_NAME)
        self.name_edit.setPlaceholderText("Your display name")
        self.form.addRow("Display name:", self.name_edit)

    @property
    def name(self) -> str:
        return self.name_edit.text().strip()

    def _try_accept(self) -> None:
        if not self.name:
            self.show_error("Please enter a display name.")
            return
        self.accept()


class CreateGroupDialog(_ValidatedDialog):
    """Create a group: its description is what others see in their discovery window."""

    def __init__(self, backend: Backend, parent: QWidget | None = None) -> None:
        super().__init__("Create group", parent)
        self.backend = backend
        self.created_gid: str | None = None
        self.desc_edit = QLineEdit()
        self.desc_edit.setPlaceholderText("e.g. Lunch on Friday")
        self.desc_edit.setMaxLength(MAX_DESC + 1)  # one over, so the user sees why it is refused
        self.form.addRow("Description:", self.desc_edit)
        # Private groups with a passphrase come with the security issue; the field appears then.

    def _try_accept(self) -> None:
        desc = self.desc_edit.text().strip()
        if not desc:
            self.show_error("A group needs a description.")
            return
        if len(desc) > MAX_DESC:
            self.show_error(f"The description is too long ({len(desc)} characters, at most {MAX_DESC}).")
            return
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)
        self.backend.request("create_group", desc, on_result=self._created,
                             on_error=lambda exc: self.show_error(describe_error(exc)))

    def _created(self, gid: str) -> None:
        self.created_gid = gid
        self.accept()


class JoinDialog(_ValidatedDialog):
    """Join a group by its id (the discovery window's Join button needs no dialog)."""

    def __init__(self, backend: Backend, gid: str = "", parent: QWidget | None = None) -> None:
        super().__init__("Join group", parent)
        self.backend = backend
        self.joined_gid: str | None = None
        self.gid_edit = QLineEdit(gid)
        self.gid_edit.setPlaceholderText("group id, e.g. 3f2a…-1")
        self.form.addRow("Group id:", self.gid_edit)
        hint = QLabel("Groups announced on your network are listed in the discovery window (Ctrl+G).")
        hint.setWordWrap(True)
        hint.setProperty("class", "hint")
        self.form.addRow(hint)

    def _try_accept(self) -> None:
        gid = self.gid_edit.text().strip()
        if not gid:
            self.show_error("Please enter a group id.")
            return
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)
        self.backend.request("join_group", gid, on_result=self._joined,
                             on_error=lambda exc: self.show_error(describe_error(exc)))

    def _joined(self, gid: str) -> None:
        self.joined_gid = gid
        self.accept()


def show_about(parent: QWidget | None) -> None:
    box = QMessageBox(parent)
    box.setWindowTitle("About M2MC")
    box.setIconPixmap(app_icon().pixmap(64, 64))
    box.setTextFormat(Qt.TextFormat.RichText)
    box.setText(
        f"<h3>M2MC chat {__version__}</h3>"
        "<p>Serverless threaded chat for one local network.</p>"
        "<p>Messages travel by UDP multicast and are delivered in S<sub>b</sub> order: "
        "every reply after the message it answers, on every peer.</p>"
        f"<p>Middleware version {__version__}.</p>"
    )
    box.exec()
