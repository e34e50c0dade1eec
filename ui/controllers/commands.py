"""The commands that act on whatever conversation is on show, a group's or a direct one: Reply to
selected (Ctrl+R), Esc, and Next unread (Ctrl+U).  Each asks the direct controller first when a
direct conversation is concerned, else the group's controllers."""

from __future__ import annotations

from typing import Protocol

from ..model.state import ComposeTarget, Selection
from .compose import ComposeController
from .direct import DirectController
from .sessions import GroupSession, SessionController


class EscapedConversation(Protocol):
    """The conversation pane (ui.panes.conversation): what Esc undoes there."""

    def close_mention_popup(self) -> bool: ...
    def leave_header_field(self) -> bool: ...
    def close_thread(self) -> None: ...


class ConversationCommands:
    def __init__(self, selection: Selection[GroupSession], target: ComposeTarget, sessions: SessionController,
                 compose: ComposeController, direct: DirectController, conversation: EscapedConversation) -> None:
        self.selection, self.target, self.sessions = selection, target, sessions
        self.compose, self.direct, self.conversation = compose, direct, conversation

    def reply_to_selected(self) -> None:
        # On while no group is shown: a direct conversation answers Ctrl+R too.
        if not self.direct.reply_to_selected() and self.selection.session is not None:
            self.compose.reply_to_selected()

    def escape(self) -> None:
        """Esc undoes the nearest thing: the @-completer's list, then what the direct conversation has
        open, a field of the group's header, the reply or edit, the open thread; else a new thread."""
        if self.conversation.close_mention_popup():
            return
        elif self.direct.escape():
            return
        elif self.conversation.leave_header_field():
            return
        elif self.target.active:
            self.compose.reset_target()
        elif self.selection.session is not None and self.selection.session.thread is not None:
            self.conversation.close_thread()
        else:
            self.compose.start_new_thread()

    def next_unread(self) -> None:
        """The oldest unread message of the conversation shown, else of the next group or direct
        conversation with news (a direct conversation on show is looked at first)."""
        direct = self.direct
        if direct.current is not None and direct.current.tree.unread:
            direct.next_unread()
        else:
            self.sessions.next_unread(others=direct.next_unread)
