"""Compose: what the compose box answers or edits, sending, and the operations on messages
(edit, delete, react, pin, the topic).

Selecting a message never changes the reply target; only Reply (hover button, context menu,
Ctrl+R) or Quote does, and ✕ or Esc clears it.  The compose box is cleared once the middleware
has taken the message, and a refusal is shown above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject

from ...middleware.types import ChatMessage, Mid
from ..bridge import describe_error

if TYPE_CHECKING:
    from ..main_window import MainWindow


class ComposeController(QObject):
    """The compose box's target and the calls that write to a group."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.backend = window.backend
        self.reply_target: Mid | None = None
        self.edit_target: Mid | None = None  # the own message the compose box is editing

    def reply_to(self, mid: Mid) -> None:
        """Make ``mid`` what the compose box answers (hover button, context menu, Ctrl+R)."""
        message = self.window.current.tree.message(mid) if self.window.current is not None else None
        if message is None:
            return
        self.reply_target = mid
        self.window.reply_banner.show_target(message)
        self.window.compose.setFocus()

    def reply_to_selected(self) -> None:
        message = self.window.selected_message() if self.window.current is not None else None
        if message is not None:
            self.reply_to(message.mid)
        else:
            self.window.compose.setFocus()

    def start_new_thread(self) -> None:
        """Forget the reply target (and an edit): the next message starts a thread (✕ or Esc)."""
        self.reply_target = None
        if self.edit_target is not None:
            self.edit_target = None
            self.window.compose.clear()
        self.window.reply_banner.show_target(None)
        self.window.compose.setFocus()

    def send_message(self) -> None:
        session = self.window.current
        text = self.window.compose.toPlainText()
        if session is None or not text.strip():
            return
        parent = self.reply_target
        self.window.compose_error.hide()
        gid, target = session.gid, self.edit_target
        if target is not None:
            self.backend.call(lambda peer: peer.edit(gid, target, text), on_result=lambda _mid: self._edited(text),
                              on_error=self._send_failed)
            return
        self.backend.call(lambda peer: peer.send(gid, text, parent), on_result=lambda _mid: self._sent(text),
                          on_error=self._send_failed)

    def _edited(self, text: str) -> None:
        if self.window.compose.toPlainText() == text:
            self.edit_target = None
            self.window.compose.clear()
            self.window.reply_banner.show_target(None)

    def _sent(self, text: str) -> None:
        if self.window.compose.toPlainText() == text:
            self.window.compose.clear()

    def _send_failed(self, error: Exception) -> None:
        self.window.compose_error.setText(f"Not sent: {describe_error(error)}")
        self.window.compose_error.show()

    def start_edit(self, mid: Mid) -> bool:
        """Put our own message ``mid`` in the compose box to edit it (context menu, Up)."""
        message = self.window.current.tree.message(mid) if self.window.current is not None else None
        if message is None or message.sender != self.backend.pid or message.deleted:
            return False
        self.reply_target = None
        self.edit_target = mid
        self.window.reply_banner.show_editing(message)
        self.window.compose.setPlainText(message.text)
        self.window.compose.moveCursor(self.window.compose.textCursor().MoveOperation.End)
        self.window.compose.setFocus()
        return True

    def edit_last(self) -> None:
        """Up in an empty compose box: edit our last message in this group."""
        if self.window.current is None:
            return
        for node in reversed(self.window.current.tree.arrival):
            message = node.message
            if message.sender == self.backend.pid and not message.deleted:
                self.start_edit(message.mid)
                return

    def quote(self, message: ChatMessage) -> None:
        """Answer ``message`` with its text quoted ("> ") at the top of the compose box."""
        self.reply_to(message.mid)
        quoted = "\n".join("> " + line for line in message.text[:500].splitlines()) + "\n"
        self.window.compose.setPlainText(quoted + self.window.compose.toPlainText())
        self.window.compose.moveCursor(self.window.compose.textCursor().MoveOperation.End)

    def delete_message(self, mid: Mid) -> None:
        if self.window.current is not None:
            gid = self.window.current.gid
            self.backend.call(lambda peer: peer.delete(gid, mid))

    def toggle_reaction(self, mid: Mid, emoji: str) -> None:
        message = self.window.current.tree.message(mid) if self.window.current is not None else None
        if message is None:
            return
        mine = self.backend.pid in (message.reactions or {}).get(emoji, [])
        gid = self.window.current.gid
        self.backend.call(lambda peer: peer.react(gid, mid, emoji, not mine))

    def set_pinned(self, mid: Mid, on: bool) -> None:
        if self.window.current is not None:
            gid = self.window.current.gid
            self.backend.call(lambda peer: peer.pin(gid, mid, on))

    def save_topic(self) -> None:
        session = self.window.current
        if session is None:
            return
        text = self.window.topic_edit.text().strip()
        if text == self.window.shown_topic(session):
            return
        gid = session.gid
        self.backend.call(lambda peer: peer.set_topic(gid, text),
                          on_error=lambda error: self.window.status_controller.show_error(
                              f"Topic not set: {describe_error(error)}"))
