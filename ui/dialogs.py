"""Small dialogs: display name, create group (CreateNewGrpWindow), join by id, confirm a join, warnings, about.

Create and Join check what they can at once (empty, too long, passphrases
that differ, are short or too easy to guess: a strength meter under the
passphrase says how it stands as it is typed) and say in a plain sentence why
the middleware refused (e.g. "That passphrase does not open this group."); the
dialog stays open until the call succeeds, so the user can fix the input and
try again.  Private creates and joins call the middleware's ``*_async``
methods, which derive the key on a worker thread.  Every dialog opens with the
keyboard in its first field, and Enter is OK, which accepts only valid input
(a button never holds the focus at first, so typing a space cannot press it).

Invites are one line of text: ``m2mc://join/<gid>?desc=<description>``
after a sentence for people; :func:`parse_invite` also takes a bare gid.

Nothing is joined before the user has seen what the group is: every join
(the discovery window's Join, an invite, an id) first shows what this peer
verified of the group (:class:`GroupSummary`: the description its creator
signed, the creator's name and key fingerprint, the member count, open or
private) and joins only on a second, explicit Join.  An invite's own
description is only a claim: where it differs from the signed one, the dialog
says so.  A group whose signed description has not arrived yet cannot be joined.
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, unquote, urlsplit

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHeaderView,
    QTableWidget,
    QTableWidgetItem,
    QPushButton,
    QGroupBox,
    QProgressBar,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QVBoxLayout,
    QWidget,
)

from ..middleware import __version__, invites, passphrase as passphrases
from ..middleware.addresses import ANSWER_WAIT
from ..middleware.names import refused_code_points
from ..middleware.rules import MAX_DESC, MAX_NAME, MIN_PASSPHRASE
from ..middleware.types import GroupView, Mid, PassphraseRefused, short_fingerprint

from .bridge import Backend, describe_error
from .resources import app_icon, icon

WRONG_PASSPHRASE = "That passphrase does not open this group."
INVITE = re.compile(r"m2mc://join/([^\s?]+)(\?\S*)?")
MESSAGE_LINK = re.compile(r"m2mc://message/([^\s/]+)/([0-9a-fA-F]+):([0-9]+)")


def invite_text(desc: str, link: str) -> str:
    """What *Copy invite* puts on the clipboard: a sentence, then the link (:mod:`middleware.invites`)."""
    return f"Join “{desc}” on M2MC: {link}"


def parse_invite(text: str) -> tuple[str, str] | None:
    """(gid, description) from a pasted invite, or (gid, "") from a bare gid; None if neither."""
    text = text.strip()
    match = INVITE.search(text)
    if match:
        query = parse_qs(urlsplit(match.group(0)).query)
        return unquote(match.group(1)), query.get("desc", [""])[0]
    if text and not any(c.isspace() for c in text) and len(text) <= 64 and "://" not in text:
        return text, ""
    return None


def parse_message_link(url: str) -> tuple[str, Mid] | None:
    match = MESSAGE_LINK.fullmatch(url.strip())
    if match is None:
        return None
    return unquote(match.group(1)), (match.group(2), int(match.group(3)))


def plain_error(error: BaseException) -> str:
    """The middleware's refusal as a sentence for people."""
    if isinstance(error, PassphraseRefused) and error.wrong:
        return WRONG_PASSPHRASE
    text = describe_error(error)
    private = re.match(r"group '(.*)' is private", text)
    if private:
        return f"“{private.group(1)}” is a private group: enter its passphrase."
    if text.startswith("unknown group"):
        return "No group with that id is known here. Check the invite, or wait until the group is announced."
    if text.startswith("a passphrase needs at least"):
        return f"A passphrase needs at least {MIN_PASSPHRASE} characters."
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


class StrengthMeter(QWidget):
    """A bar and a word for how guessable a passphrase is (middleware.passphrase.assess)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setRange(0, len(passphrases.LABELS))
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(8)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setProperty("class", "hint")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.bar)
        layout.addWidget(self.label)
        self.update_for("")

    def update_for(self, phrase: str) -> passphrases.Assessment | None:
        if not phrase:
            self.bar.setValue(0)
            self.label.setText("Several unrelated words are easiest to remember and hardest to guess.")
            return None
        assessment = passphrases.assess(phrase)
        self.bar.setValue(assessment.score + 1)
        self.setProperty("strength", assessment.label)
        text = f"Strength: {assessment.label}"
        if assessment.weakness:
            text += f" — {assessment.weakness}."
        self.label.setText(text)
        return assessment


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
        # Deriving a private group's key takes about a second: say so while the button is greyed.
        self.busy_label = QLabel()
        self.busy_label.setObjectName("dialogBusy")
        self.busy_label.setWordWrap(True)
        self.busy_label.hide()
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self._try_accept)
        self.buttons.rejected.connect(self.reject)
        for button in self.buttons.buttons():
            if isinstance(button, QPushButton):  # the box makes push buttons
                button.setAutoDefault(False)
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # a click must not take the focus from a field
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setDefault(True)  # Enter = OK, validated
        layout = QVBoxLayout(self)
        layout.addLayout(self.form)
        layout.addWidget(self.error_label)
        layout.addWidget(self.busy_label)
        layout.addWidget(self.buttons)

    def first_field(self) -> QLineEdit | None:
        """The field the keyboard starts in."""
        for row in range(self.form.rowCount()):
            for role in (QFormLayout.ItemRole.FieldRole, QFormLayout.ItemRole.SpanningRole):
                item = self.form.itemAt(row, role)
                widget = item.widget() if item is not None else None
                if isinstance(widget, QLineEdit) and widget.isEnabled() and not widget.isHidden():
                    return widget
        return None

    def showEvent(self, event) -> None:
        super().showEvent(event)
        field = self.first_field()
        if field is not None:
            field.setFocus(Qt.FocusReason.OtherFocusReason)
            field.selectAll()

    def set_busy(self, message: str) -> None:
        """Say what the dialog is waiting for, with OK greyed until an answer (or an error) comes."""
        self.busy_label.setText(message)
        self.busy_label.show()
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)

    def show_error(self, message: str) -> None:
        self.busy_label.hide()
        self.error_label.setText(message)
        self.error_label.setVisible(bool(message))
        if self.height() < self.sizeHint().height():
            self.adjustSize()  # room for the message, rather than squeezing the fields
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)

    def _try_accept(self) -> None:
        raise NotImplementedError


def _hint(text: str) -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setProperty("class", "hint")
    return label


def _passphrase_edit(placeholder: str) -> QLineEdit:
    """A passphrase field, hidden as it is typed, with an eye at its end that shows it (a long
    passphrase is easier to get right when the user can read it back)."""
    edit = QLineEdit()
    edit.setEchoMode(QLineEdit.EchoMode.Password)
    edit.setMaxLength(1024)
    edit.setPlaceholderText(placeholder)
    reveal = QAction(icon("eye"), "Show passphrase", edit)
    reveal.setObjectName("showPassphrase")
    reveal.setCheckable(True)

    def show_it(shown: bool) -> None:
        edit.setEchoMode(QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password)
        reveal.setIcon(icon("eye-off" if shown else "eye"))
        reveal.setText("Hide passphrase" if shown else "Show passphrase")
        reveal.setToolTip(reveal.text())

    reveal.toggled.connect(show_it)
    show_it(False)
    edit.addAction(reveal, QLineEdit.ActionPosition.TrailingPosition)
    return edit


CHECKING_PASSPHRASE = "Checking the passphrase… (this takes about a second)"


class AddPeerDialog(_ValidatedDialog):
    """File → Add peer by address…: asks the computer at the address typed (an IPv4 address or a
    name, with its port) and stays open until it has answered: a refusal, or "Nobody answered at …
    within 10 s", shows here, not only in the status bar, which cut it off at 800 px (issue 45)."""

    def __init__(self, parent: QWidget | None, ask) -> None:
        super().__init__("Add peer by address", parent)
        self.setObjectName("addPeerDialog")
        self.ask = ask  # ask(address, answered(dict), failed(str)): the controller's call to the middleware
        self.answer: dict | None = None
        self.address_edit = QLineEdit()
        self.address_edit.setObjectName("peerAddress")
        self.address_edit.setPlaceholderText("192.168.1.20:47477 or bob-pc:47477")
        self.address_edit.setAccessibleName("The other computer's address")
        self.form.addRow(_hint("The other computer's address, as it shows it: host:port, the host its IPv4 "
                               "address or its name. Use this where groups on your network do not show up: "
                               "it is asked directly."))
        self.form.addRow("&Address:", self.address_edit)
        self.setMinimumWidth(420)

    def _try_accept(self) -> None:
        text = self.address_edit.text().strip()
        if not text:
            self.show_error("Type the other computer's address, e.g. 192.168.1.20:47477.")
            return
        self.error_label.hide()
        self.set_busy(f"Asking {text}… (it has {ANSWER_WAIT:g} s to answer)")
        self.ask(text, self._answered, self.show_error)

    def _answered(self, answer: dict) -> None:
        self.answer = answer
        self.accept()


class NameDialog(_ValidatedDialog):
    """First start: ask for the name others will see."""

    def __init__(self, suggestion: str = "", parent: QWidget | None = None, title: str = "Welcome to M2MC") -> None:
        super().__init__(title, parent)
        intro = QLabel("Choose the name the other people on your network will see. You can keep it for next time."
                       if title == "Welcome to M2MC" else "The name the other members see; they learn the new one.")
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
        if len(self.name) > MAX_NAME:
            self.show_error(f"A display name has at most {MAX_NAME} characters.")
            return
        bad = refused_code_points(self.name)
        if bad:  # the middleware refuses them too (rules.check_name): say so before the dialog closes
            self.show_error(f"A display name cannot hold invisible or text-direction characters "
                            f"(U+{ord(bad[0]):04X} here).")
            return
        self.accept()


class CreateGroupDialog(_ValidatedDialog):
    """Create a group: its description is what others see in their discovery window.

    Ticking "Private group" asks for a passphrase twice; only those who are
    told it can join, read and write.
    """

    def __init__(self, backend: Backend, parent: QWidget | None = None) -> None:
        super().__init__("Create group", parent)
        self.backend = backend
        self.created_gid: str | None = None
        self.desc_edit = QLineEdit()
        self.desc_edit.setPlaceholderText("e.g. Lunch on Friday")
        self.desc_edit.setMaxLength(MAX_DESC + 1)  # one over, so the user sees why it is refused
        self.form.addRow("Description:", self.desc_edit)
        self.private_check = QCheckBox("Private group — members need a passphrase")
        self.private_check.toggled.connect(self._show_private)
        self.form.addRow(self.private_check)
        self.passphrase_edit = _passphrase_edit(f"at least {MIN_PASSPHRASE} characters")
        self.confirm_edit = _passphrase_edit("the same again")
        self.strength = StrengthMeter()
        self.passphrase_edit.textChanged.connect(self.strength.update_for)
        self.form.addRow("Passphrase:", self.passphrase_edit)
        self.form.addRow("", self.strength)
        self.form.addRow("Confirm:", self.confirm_edit)
        self.private_hint = _hint("Give the passphrase to the people you invite in person, not in an open group. "
                                  "Without it nobody can read or write in the group, but everyone on the "
                                  "network still sees its description and how many are in it.")
        self.form.addRow(self.private_hint)
        self._show_private(False)

    def _show_private(self, on: bool) -> None:
        for widget in (self.passphrase_edit, self.strength, self.confirm_edit, self.private_hint):
            self.form.setRowVisible(widget, on)
            widget.setEnabled(on)
        if on:
            self.passphrase_edit.setFocus()
        self.show_error("")
        self.adjustSize()

    @property
    def passphrase(self) -> str | None:
        """The chosen passphrase, or None for an open group."""
        return self.passphrase_edit.text() if self.private_check.isChecked() else None

    def _try_accept(self) -> None:
        desc = self.desc_edit.text().strip()
        if not desc:
            self.show_error("A group needs a description.")
            self.desc_edit.setFocus()
            return
        if len(desc) > MAX_DESC:
            self.show_error(f"The description is too long ({len(desc)} characters, at most {MAX_DESC}).")
            self.desc_edit.setFocus()
            return
        passphrase = self.passphrase
        if passphrase is not None:
            if len(passphrase) < MIN_PASSPHRASE:
                self.show_error(f"The passphrase needs at least {MIN_PASSPHRASE} characters "
                                f"(it has {len(passphrase)}).")
                self.passphrase_edit.setFocus()
                return
            weakness = passphrases.assess(passphrase).weakness
            if weakness:
                self.show_error(f"This passphrase is too easy to guess: {weakness}. Choose another one.")
                self.passphrase_edit.selectAll()
                self.passphrase_edit.setFocus()
                return
            if self.confirm_edit.text() != passphrase:
                self.show_error("The two passphrases differ: type the same one in both fields.")
                self.confirm_edit.selectAll()
                self.confirm_edit.setFocus()
                return
        self.show_error("")
        self.set_busy("Making the group's key… (this takes about a second)" if passphrase is not None
                      else "Creating the group…")
        self.backend.call_async(lambda peer: peer.create_group_async(desc, passphrase), on_result=self._created,
                                on_error=lambda exc: self.show_error(plain_error(exc)))

    def _created(self, gid: str) -> None:
        self.created_gid = gid
        self.accept()


NOT_VERIFIED = ("Not verified yet: its creator's signed description has not arrived, so nothing here can be "
                "trusted and it cannot be joined. Wait a moment, or ask a member to announce it.")


def creator_text(view: GroupView) -> str:
    """Who created ``view``'s group: the name its member record gives (if this peer knows one), and
    always its key's fingerprint, the part nobody else can claim."""
    if not view.creator:
        return "unknown"
    name = next((m.name for m in view.members + view.left if m.pid == view.creator), "")
    key = f"key {short_fingerprint(view.creator)}"
    return f"{name} ({key})" if name else f"a member not seen yet ({key})"


class GroupSummary(QGroupBox):
    """What this peer verified of a group, shown before joining it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("The group", parent)
        self.desc_label = _plain_label()
        self.desc_label.setObjectName("summaryDesc")
        self.creator_label = _plain_label()
        self.members_label = _plain_label()
        self.kind_label = _plain_label()
        self.note_label = _plain_label()
        self.note_label.setObjectName("summaryNote")
        layout = QFormLayout(self)
        layout.addRow("Description:", self.desc_label)
        layout.addRow("Created by:", self.creator_label)
        layout.addRow("Members:", self.members_label)
        layout.addRow("Kind:", self.kind_label)
        layout.addRow(self.note_label)

    def show_view(self, view: GroupView, claimed_desc: str = "") -> None:
        """Show ``view``; ``claimed_desc`` is what an invite called the group, checked against it."""
        self.desc_label.setText(f"“{view.desc}”")
        self.creator_label.setText(creator_text(view))
        self.members_label.setText(str(view.member_count))
        self.kind_label.setText("private: its members gave it a passphrase" if view.private
                                else "open: anyone on this network can read and write in it")
        if not view.verified:
            note = NOT_VERIFIED
        elif claimed_desc and claimed_desc.strip() != view.desc:
            note = (f"The invite calls it “{claimed_desc.strip()}”, but the description its creator signed is "
                    f"“{view.desc}”. Join only if you expected that group.")
        else:
            note = ("Description and key are checked against the creator's signature; "
                    "the name is the one the creator chose, and anyone can choose any name.")
        self.note_label.setText(note)
        self.note_label.setProperty("alert", not view.verified or note.startswith("The invite calls"))
        self.note_label.style().unpolish(self.note_label)  # the style sheet reads the new property
        self.note_label.style().polish(self.note_label)


def _plain_label() -> QLabel:
    label = QLabel()
    label.setTextFormat(Qt.TextFormat.PlainText)  # a description or a name is never markup
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class JoinDialog(_ValidatedDialog):
    """Join a group by its id or a pasted invite: OK looks the group up and shows what is verified
    of it (:class:`GroupSummary`); a second OK, now labelled Join, joins it."""

    def __init__(self, backend: Backend, gid: str = "", parent: QWidget | None = None, invite: str = "") -> None:
        super().__init__("Join group", parent)
        self.backend = backend
        self.joined_gid: str | None = None
        self.found: GroupView | None = None  # the group looked up, once OK was pressed
        if not gid and invite and INVITE.search(invite):
            gid = invite.strip()  # a copied invite on the clipboard: offered as it is
        self.gid_edit = QLineEdit(gid)
        self.gid_edit.setPlaceholderText("an invite (m2mc://join/…) or a group id (26 letters and digits)")
        self.gid_edit.textEdited.connect(lambda _text: self._forget_found())
        self.form.addRow("Invite or id:", self.gid_edit)
        self.passphrase_edit = _passphrase_edit("only for a private group")
        self.form.addRow("Passphrase:", self.passphrase_edit)
        self.summary = GroupSummary()
        self.form.addRow(self.summary)
        self.looking = _hint("")
        self.looking.setObjectName("lookingForGroup")
        self.form.addRow(self.looking)
        self.form.setRowVisible(self.looking, False)
        self.form.addRow(_hint("Groups announced on your network are listed in the discovery window (Ctrl+G)."))
        self.setMinimumWidth(460)
        self._forget_found()

    def _forget_found(self) -> None:
        self.found = None
        self.form.setRowVisible(self.summary, False)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Look up")
        self.show_error("")
        self.adjustSize()

    def _try_accept(self) -> None:
        text = self.gid_edit.text().strip()
        if not text:
            self.show_error("Please paste an invite or enter a group id.")
            return
        parsed = parse_invite(text)
        if parsed is None:
            self.show_error("That is neither an invite nor a group id. An invite looks like m2mc://join/….")
            return
        gid, claimed = parsed
        self.show_error("")
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)
        if self.found is None or self.found.gid != gid:
            invite = invites.parse_invite(text)
            if invite is not None and invite.peers:  # ask the inviter directly: multicast may not flow here
                where = ", ".join(map(str, invite.peers))
                self.looking.setText(f"Asking {where} for the group… (up to 10 s)")
                self.form.setRowVisible(self.looking, True)
                self.backend.call_async(lambda peer: peer.find_invited_async(text),
                                        on_result=lambda view: self._show_found(view, claimed),
                                        on_error=lambda exc: self._not_found(plain_error(exc)))
                return
            self.backend.call(lambda peer: peer.group(gid), on_result=lambda view: self._show_found(view, claimed),
                              on_error=lambda exc: self.show_error(plain_error(exc)))
            return
        passphrase = self.passphrase_edit.text() or None
        invite = invites.parse_invite(text)
        if invite is not None and invite.secret and passphrase is None:
            # A private group's invite after a re-key: its one-time secret, not a passphrase, lets this peer in.
            self.set_busy("Asking to be admitted…")
            self.backend.call_async(lambda peer: peer.join_invite_async(text, None), on_result=self._joined,
                                    on_error=lambda exc: self.show_error(plain_error(exc)))
            return
        self.set_busy(CHECKING_PASSPHRASE if passphrase else "Joining…")
        self.backend.call_async(lambda peer: peer.join_group_async(gid, passphrase), on_result=self._joined,
                                on_error=lambda exc: self.show_error(plain_error(exc)))

    def _not_found(self, message: str) -> None:
        self.form.setRowVisible(self.looking, False)
        self.show_error(message)
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)

    def _show_found(self, view: GroupView, claimed_desc: str) -> None:
        self.form.setRowVisible(self.looking, False)
        if view.joined:
            self._joined(view.gid)
            return
        self.found = view
        self.summary.show_view(view, claimed_desc)
        self.form.setRowVisible(self.summary, True)
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setText("Join")
        self.adjustSize()
        if not view.verified:
            self.show_error("This group cannot be joined yet: it is not verified.")
            ok.setEnabled(False)
        elif view.private and not self.passphrase_edit.text():
            self.show_error(f"“{view.desc}” is a private group: enter its passphrase.")
            self.passphrase_edit.setFocus()
        else:
            ok.setEnabled(True)

    def _joined(self, gid: str) -> None:
        self.joined_gid = gid
        self.accept()


class ConfirmJoinDialog(_ValidatedDialog):
    """Join a group picked in the discovery window: what is verified of it, its passphrase if it is
    private, and Join; Cancel leaves this peer out of it.  A wrong passphrase is said here and may be
    tried again."""

    def __init__(self, backend: Backend, view: GroupView, parent: QWidget | None = None) -> None:
        super().__init__("Join private group" if view.private else "Join group", parent)
        self.backend = backend
        self.gid = view.gid
        self.joined_gid: str | None = None
        self.summary = GroupSummary()
        self.summary.show_view(view)
        self.form.addRow(self.summary)
        self.passphrase_edit = _passphrase_edit("the passphrase its members gave you")
        self.form.addRow("Passphrase:", self.passphrase_edit)
        self._ask_passphrase(view.private)
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setText("Join")
        if not view.verified:
            self.show_error("This group cannot be joined yet: it is not verified.")
            ok.setEnabled(False)
        self.setMinimumWidth(460)  # room for the description and the error on a line or two
        self.adjustSize()  # a top-level window does not fit wrapped labels' height to its width by itself

    def _ask_passphrase(self, on: bool) -> None:
        self.form.setRowVisible(self.passphrase_edit, on)
        self.passphrase_edit.setEnabled(on)

    def _try_accept(self) -> None:
        private = self.passphrase_edit.isEnabled()
        passphrase = self.passphrase_edit.text() if private else None
        if private and not passphrase:
            self.show_error("Please enter the passphrase.")
            return
        self.show_error("")
        # Deriving a private group's key takes about half a second (Argon2id) on a worker thread.
        self.set_busy(CHECKING_PASSPHRASE if private else "Joining…")
        gid = self.gid
        self.backend.call_async(lambda peer: peer.join_group_async(gid, passphrase), on_result=self._joined,
                                on_error=self._refused)

    def _refused(self, error: Exception) -> None:
        private = re.match(r"group '.*' is private", describe_error(error)) is not None
        if private and not self.passphrase_edit.isEnabled():  # it turned out private after the list was drawn
            self._ask_passphrase(True)
            self.adjustSize()
        self.show_error(plain_error(error))
        if self.passphrase_edit.isEnabled():
            self.passphrase_edit.selectAll()
            self.passphrase_edit.setFocus()

    def _joined(self, gid: str) -> None:
        self.joined_gid = gid
        self.accept()


class WarningLogWindow(QDialog):
    """Every warning the middleware gave in this run, newest last; a window to look at, never in the way."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("M2MC — warnings")
        self.setWindowIcon(app_icon())
        self.setModal(False)
        self.resize(620, 300)
        self.list = QListWidget()
        self.list.setObjectName("warningLog")
        self.list.setWordWrap(True)
        self.empty_label = QLabel("No warnings so far.")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(_hint("What the network layer found suspicious, such as two different messages "
                               "sent under one id (the first one is kept)."))
        layout.addWidget(self.list, 1)
        layout.addWidget(self.empty_label)
        layout.addWidget(buttons)

    def add(self, group: str, text: str, at: float | None = None) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(time.time() if at is None else at))
        self.list.addItem(QListWidgetItem(f"{stamp}  {group}: {text}"))
        self.empty_label.hide()
        self.list.scrollToBottom()

    def texts(self) -> list[str]:
        return [self.list.item(row).text() for row in range(self.list.count())]


def show_shortcuts(parent: QWidget | None, rows: list[tuple[str, str]]) -> QDialog:
    """Help → Keyboard shortcuts: what each key does, in a window that stays open beside the chat."""
    dialog = QDialog(parent)
    dialog.setObjectName("shortcutsDialog")
    dialog.setWindowTitle("Keyboard shortcuts")
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    table = QTableWidget(len(rows), 2, dialog)
    table.setObjectName("shortcutTable")
    table.setHorizontalHeaderLabels(["Action", "Keys"])
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    table.setShowGrid(False)
    table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 8)
    for row, (what, keys) in enumerate(rows):
        table.setItem(row, 0, QTableWidgetItem(what))
        table.setItem(row, 1, QTableWidgetItem(keys))
    table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
    close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
    close.rejected.connect(dialog.reject)
    layout = QVBoxLayout(dialog)
    layout.addWidget(table)
    layout.addWidget(close)
    dialog.resize(480, min(640, 80 + 26 * len(rows)))
    dialog.show()
    return dialog


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
