"""Conversation → Mentions…: the Mentions window (ui.mentions), made on first use and filled from the
middleware's ``mentions`` query with the groups' titles and members' names; a message chosen there is
opened as a link to it would be."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from ...middleware.types import ChatMessage, Mid, format_mid
from ..bridge import Backend
from ..mentions import MENTIONS_LISTED, MentionsWindow
from ..model.sessions import member_names
from .sessions import SessionController


class MentionsController(QObject):
    def __init__(self, backend: Backend, sessions: SessionController, open_link: Callable[[str], None],
                 window_parent: QWidget) -> None:
        super().__init__(window_parent)
        self.backend, self.sessions, self.open_link = backend, sessions, open_link
        self.window_parent = window_parent
        self.window: MentionsWindow | None = None  # made on the first show

    def show(self) -> None:
        """The messages that mention me, newest first, across groups."""
        window = self.window
        if window is None:
            window = self.window = MentionsWindow(self.window_parent, self.jump_to_message)
        self.backend.call(lambda peer: peer.mentions(MENTIONS_LISTED), on_result=self._show)
        window.show()
        window.raise_()
        window.activateWindow()

    def _show(self, messages: list[ChatMessage]) -> None:
        sessions = self.sessions.sessions
        if self.window is not None:
            self.window.show_mentions(
                messages, {gid: session.title for gid, session in sessions.items()},
                lambda gid: member_names(sessions[gid].view) if gid in sessions else {})

    def jump_to_message(self, gid: str, mid: Mid) -> None:
        self.open_link(f"m2mc://message/{gid}/{format_mid(mid)}")
