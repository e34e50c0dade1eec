"""Compose: what the compose box answers or edits, sending, and the operations on messages
(edit, delete, react, pin, the topic).

Selecting a message never changes the reply target; only Reply (hover button, context menu,
Ctrl+R) or Quote does, and ✕ or Esc clears it.  With a thread open on its own, a message goes to
its root unless another target is chosen.  Each group keeps its own draft (text and reply target),
in the window's settings so that it outlives a restart.  The compose box is cleared once the middleware
has taken the message, and a refusal is shown above it.  The target itself is a Qt-free
:class:`~ui.model.state.ComposeTarget` that the window shares.
"""

from __future__ import annotations

from typing import Any, Protocol

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel, QLineEdit

from ...middleware.files import readable_text
from ...middleware.mentions import MAX_MENTIONS, shown_text, with_tokens
from ...middleware.types import ChatMessage, GroupView, Mid
from ..bridge import Backend, describe_error
from ..notices import is_notice
from ..model.state import ComposeTarget, Draft, Drafts, Selection
from ..widgets import ComposeEdit, ReplyBanner
from ..model.sessions import member_names
from .sessions import GroupSession


def typed_mentions(text: str, view: GroupView | None) -> list[str]:
    """The pids of the current members whose "@Name" is in ``text`` (completed or typed in full);
    the middleware makes each a mention only where the name stands whole."""
    if view is None or "@" not in text:
        return []
    return [m.pid for m in view.members if f"@{m.name}" in text][:MAX_MENTIONS]


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
                 view: ComposeView, parent: QObject | None = None, settings: Any = None) -> None:
        super().__init__(parent)
        self.view = view
        self.backend = backend
        self.selection = selection
        self.target = target
        self.drafts = Drafts(settings)
        self._restoring = False

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

    def _as_shown(self, message: ChatMessage | None) -> ChatMessage | None:
        """``message`` with its mention tokens as "@Name", for the banner."""
        return message._replace(text=self._readable(message.text)) if message is not None else None

    def show_target(self) -> None:
        """The banner says where the next message goes (or what it edits)."""
        banner = self.view.reply_banner
        if self.target.edit is not None:
            edited = self._as_shown(self._message(self.target.edit))
            if edited is not None:
                banner.show_editing(edited)
                return
        parent = self.target.parent
        if parent is not None:
            banner.show_target(self._as_shown(self._message(parent)), in_thread=parent == self.target.thread,
                               known=False)
        elif self.target.new_thread and self.target.thread is not None:
            banner.show_new_thread()
        else:
            banner.show_target(None)

    def messages_shown(self, mids: list[Mid]) -> None:
        """Messages just shown: the banner names its target once that one is in (the user's own
        reply, which the next message follows, arrives after the send's answer)."""
        if self.target.parent in mids or self.target.edit in mids:
            self.show_target()

    # -- drafts ------------------------------------------------------------------------------

    def keep_draft(self) -> None:
        """Store what the open group's compose box holds (on every change: a crash loses nothing).

        An edit in progress is not a draft (restored without its target it would post the
        edited text as a new message): the draft typed before it stays stored, and comes back
        when the edit ends."""
        session = self.selection.session
        if session is None or self._restoring or self.target.edit is not None:
            return
        self.drafts.put(session.gid, Draft(self.view.compose.toPlainText(), self.target.reply))

    def restore_draft(self, session: GroupSession | None) -> None:
        """Show ``session``'s own draft and target (on opening a group)."""
        draft = self.drafts.get(session.gid) if session is not None else Draft()
        self.target.clear()
        if session is not None and session.thread is not None:
            self.target.open_thread(session.thread.root.message.mid)
        if draft.reply is not None:
            self.target.reply_to(draft.reply)
        self._show_text(draft.text)
        self.show_target()

    def _show_text(self, text: str) -> None:
        self._restoring = True
        try:
            compose = self.view.compose
            if compose.toPlainText() != text:
                compose.setPlainText(text)
                compose.moveCursor(compose.textCursor().MoveOperation.End)
        finally:
            self._restoring = False

    def _end_edit(self) -> None:
        """Back from an edit (saved or given up): the draft typed before it returns."""
        self.target.edit = None
        session = self.selection.session
        draft = self.drafts.get(session.gid) if session is not None else Draft()
        if self.target.reply is None and not self.target.new_thread:
            self.target.reply = draft.reply
        self._show_text(draft.text)
        self.keep_draft()

    # -- the target ----------------------------------------------------------------------------

    def thread_opened(self, root: Mid) -> None:
        self.target.open_thread(root)
        self.keep_draft()
        self.show_target()

    def thread_closed(self) -> None:
        self.target.close_thread()
        self.show_target()

    def reset_target(self) -> None:
        """Esc: forget the chosen target (or edit); the default (the open thread's root) is back."""
        if self.target.edit is not None:  # the draft comes back with its own target
            self.target.reply = None
            self.target.new_thread = False
            self._end_edit()
        else:
            self.target.reset()
            self.keep_draft()
        self.show_target()

    def reply_to(self, mid: Mid) -> None:
        """Make ``mid`` what the compose box answers (hover button, context menu, Ctrl+R)."""
        message = self._message(mid)
        if message is None:
            return
        self.target.reply_to(mid)
        self.keep_draft()
        self.show_target()
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
        if self.target.edit is not None:
            self.target.new_thread = True
            self._end_edit()
        self.target.start_new_thread()
        self.keep_draft()
        self.show_target()
        self.view.compose.setFocus()

    def send_message(self) -> None:
        session = self.selection.session
        text = self.view.compose.toPlainText()
        if session is None or not text.strip():
            return
        parent = self.target.parent
        self.view.compose_error.hide()
        gid, target = session.gid, self.target.edit
        names = member_names(session.view)
        mentions = typed_mentions(text, session.view)
        if target is not None:
            # An edit carries no mentions list: the tokens go in its text as a send's do.
            edited = with_tokens(text, mentions, names)
            self.backend.call(lambda peer: peer.edit(gid, target, edited), on_result=lambda _mid: self._edited(text),
                              on_error=self._send_failed)
            return
        self.backend.call(lambda peer: peer.send(gid, text, parent, mentions),
                          on_result=lambda mid: self._sent(gid, text, mid), on_error=self._send_failed)

    def _shown(self, text: str) -> str:
        """A message's text with its mention tokens as "@Name", as the compose box holds it."""
        session = self.selection.session
        return shown_text(text, member_names(session.view if session is not None else None))

    def _readable(self, text: str) -> str:
        """A message's text as banners and quotes show it (a file offer as its caption)."""
        session = self.selection.session
        return readable_text(text, member_names(session.view if session is not None else None))

    def _edited(self, text: str) -> None:
        if self.view.compose.toPlainText() == text:
            self._end_edit()
            self.show_target()

    def _sent(self, gid: str, text: str, mid: Mid) -> None:
        session = self.selection.session
        if session is None or session.gid != gid:
            # Sent, then the reader moved on before the answer: the stored draft must not post it twice.
            if self.drafts.get(gid).text == text:
                self.drafts.put(gid, Draft())
            return
        if self.view.compose.toPlainText() == text:
            self.target.sent(mid)
            self.view.compose.clear()
            self.show_target()

    def file_shared(self) -> None:
        """A file went out to the target: a chosen reply is used up, the draft's text stays."""
        if self.target.reply is not None and self.target.edit is None:
            self.target.reply = None
            self.keep_draft()
            self.show_target()

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
        self.show_target()
        compose.setPlainText(self._shown(message.text))
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
            if message.sender == self.backend.pid and not message.deleted and not is_notice(message):
                self.start_edit(message.mid)
                return

    def quote(self, message: ChatMessage) -> None:
        """Answer ``message`` with its text quoted ("> ") at the top of the compose box."""
        self.reply_to(message.mid)
        quoted = "\n".join("> " + line for line in self._readable(message.text)[:500].splitlines()) + "\n"
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

    def save_topic(self, text: str) -> None:
        """Set the open group's topic to ``text`` (Enter in the topic field, which checked it changed)."""
        session = self.selection.session
        if session is None or text == session.shown_topic:
            return
        gid = session.gid
        self.backend.call(lambda peer: peer.set_topic(gid, text),
                          on_error=lambda error: self.view.show_error(f"Topic not set: {describe_error(error)}"))
