"""Compose: what the compose box answers or edits, sending, and the operations on messages
(edit, delete, react, pin, the topic).

Selecting a message never changes the reply target; only Reply (hover button, context menu,
Ctrl+R) or Quote does, and ✕ or Esc clears it.  The compose box is cleared once the middleware
has taken the message, and a refusal is shown above it.  The target itself is a Qt-free
:class:`~ui.state.ComposeTarget` that the window shares.
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QLineEdit

from ...middleware.types import ChatMessage, Mid
from ..bridge import Backend, describe_error
from ..state import ComposeTarget, Selection
from ..widgets import ComposeEdit, ReplyBanner
from .sessions import GroupSession


class ComposeView(Protocol):
    """The widgets the compose controller writes to, and where it reports an error."""

    compose: ComposeEdit
    reply_banner: ReplyBanner
    compose_error: QLabel
    topic_edit: QLineEdit

    def show_error(self, message: str) -> None: ...


class ComposeController(QObject):
    """The compose box's target and the calls that write to a group."""

    def __init__(self, backend: Backend, selection: Selection[GroupSession], target: ComposeTarget,
                 view: ComposeView, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.backend = backend
        self.selection = selection
        self.target = target

    @property
    def reply_target(self) -> Mid | None:
        return self.target.reply

    @property
    def edit_target(self) -> Mid | None:
        """The own message the compose box is editing."""
        return self.target.edit

    def _message(self, mid: Mid) -> ChatMessage | None:
        session = self.selection.session
        return session.tree.message(mid) if session is not None else None

    def reply_to(self, mid: Mid) -> None:
        """Make ``mid`` what the compose box answers (hover button, context menu, Ctrl+R)."""
        message = self._message(mid)
        if message is None:
            return
        self.target.reply_to(mid)
        self.view.reply_banner.show_target(message)
        self.view.compose.setFocus()

    def reply_to_selected(self) -> None:
        selected = self.selection.message
        message = self._message(selected) if selected is not None else None
        if message is not None:
            self.reply_to(message.mid)
        else:
            self.view.compose.setFocus()

    def start_new_thread(self) -> None:
        """Forget the reply target (and an edit): the next message starts a thread (✕ or Esc)."""
        editing = self.target.edit is not None
        self.target.clear()
        if editing:
            self.view.compose.clear()
        self.view.reply_banner.show_target(None)
        self.view.compose.setFocus()

    def send_message(self) -> None:
        session = self.selection.session
        text = self.view.compose.toPlainText()
        if session is None or not text.strip():
            return
        parent = self.target.reply
        self.view.compose_error.hide()
        gid, target = session.gid, self.target.edit
        if target is not None:
            self.backend.call(lambda peer: peer.edit(gid, target, text), on_result=lambda _mid: self._edited(text),
                              on_error=self._send_failed)
            return
        self.backend.call(lambda peer: peer.send(gid, text, parent), on_result=lambda _mid: self._sent(text),
                          on_error=self._send_failed)

    def _edited(self, text: str) -> None:
        if self.view.compose.toPlainText() == text:
            self.target.edit = None
            self.view.compose.clear()
            self.view.reply_banner.show_target(None)

    def _sent(self, text: str) -> None:
        if self.view.compose.toPlainText() == text:
            self.view.compose.clear()

    def _send_failed(self, error: Exception) -> None:
        self.view.compose_error.setText(f"Not sent: {describe_error(error)}")
        self.view.compose_error.show()

    def start_edit(self, mid: Mid) -> bool:
        """Put our own message ``mid`` in the compose box to edit it (context menu, Up)."""
        message = self._message(mid)
        if message is None or message.sender != self.backend.pid or message.deleted:
            return False
        self.target.start_edit(mid)
        compose = self.view.compose
        self.view.reply_banner.show_editing(message)
        compose.setPlainText(message.text)
        compose.moveCursor(compose.textCursor().MoveOperation.End)
        compose.setFocus()
        return True

    def edit_last(self) -> None:
        """Up in an empty compose box: edit our last message in this group."""
        session = self.selection.session
        if session is None:
            return
        for node in reversed(session.tree.arrival):
            message = node.message
            if message.sender == self.backend.pid and not message.deleted:
                self.start_edit(message.mid)
                return

    def quote(self, message: ChatMessage) -> None:
        """Answer ``message`` with its text quoted ("> ") at the top of the compose box."""
        self.reply_to(message.mid)
        quoted = "\n".join("> " + line for line in message.text[:500].splitlines()) + "\n"
        compose = self.view.compose
        compose.setPlainText(quoted + compose.toPlainText())
        compose.moveCursor(compose.textCursor().MoveOperation.End)

    def delete_message(self, mid: Mid) -> None:
        if self.selection.session is not None:
            gid = self.selection.session.gid
            self.backend.call(lambda peer: peer.delete(gid, mid))

    def toggle_reaction(self, mid: Mid, emoji: str) -> None:
        session = self.selection.session
        message = self._message(mid)
        if session is None or message is None:
            return
        mine = self.backend.pid in (message.reactions or {}).get(emoji, [])
        gid = session.gid
        self.backend.call(lambda peer: peer.react(gid, mid, emoji, not mine))

    def set_pinned(self, mid: Mid, on: bool) -> None:
        if self.selection.session is not None:
            gid = self.selection.session.gid
            self.backend.call(lambda peer: peer.pin(gid, mid, on))

    def save_topic(self) -> None:
        session = self.selection.session
        if session is None:
            return
        text = self.view.topic_edit.text().strip()
        if text == session.shown_topic:
            return
        gid = session.gid
        self.backend.call(lambda peer: peer.set_topic(gid, text),
                          on_error=lambda error: self.view.show_error(f"Topic not set: {describe_error(error)}"))
