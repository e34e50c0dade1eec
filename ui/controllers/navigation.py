"""Jumps and the way back: a message link, a search result or a notification opens its message wherever
it is (in its group's thread, after loading older history if need be, or in a direct conversation), and
Back (Alt+Left) returns to where the reader was before, else out of the open thread."""

from __future__ import annotations

import functools
from typing import Callable, Protocol

from PySide6.QtCore import QObject, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QAbstractItemView

from ...middleware.types import ChatMessage, Mid
from ..bridge import Backend
from ..delegate import root_text
from ..dialogs import parse_message_link
from ..direct_api import CONVERSATION_PREFIX, conversation_peer
from ..focus import Navigation
from ..message_model import MessageRole
from ..model.state import Selection
from .direct import DirectController
from .sessions import GroupSession, SessionController

MAX_WAY_BACK = 50  # places Back (Alt+Left) remembers


class NavigationView(Protocol):
    """What a jump asks of the window: to open a group, to come up, and to put the keys in place."""

    def select_group(self, gid: str) -> None: ...
    def raise_(self) -> None: ...
    def activateWindow(self) -> None: ...  # noqa: N802 - Qt's name
    def apply_focus(self, navigation: Navigation) -> None: ...


class ShownConversation(Protocol):
    """What a jump asks of the conversation pane (ui.panes.conversation)."""

    def open_thread(self, mid: Mid, then: Callable[[], object] | None = None,
                    missing: Callable[[], object] | None = None) -> bool: ...
    def select_message(self, mid: Mid) -> bool: ...
    def close_thread(self) -> None: ...
    def selected_message(self) -> ChatMessage | None: ...


class NavigationController(QObject):
    def __init__(self, backend: Backend, selection: Selection[GroupSession], sessions: SessionController,
                 direct: DirectController, show_error: Callable[[str], None], view: NavigationView,
                 conversation: ShownConversation, direct_view: QAbstractItemView,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.backend, self.selection, self.sessions, self.direct = backend, selection, sessions, direct
        self.show_error, self.view, self.conversation, self.direct_view = show_error, view, conversation, direct_view
        # (gid, open thread, selected) before a jump; a direct conversation's place has its conversation_key as gid
        self.way_back: list[tuple[str, Mid | None, Mid | None]] = []

    def open_link(self, url: str) -> None:
        """A message link (m2mc://message/…) selects that message; any other link opens outside."""
        target = parse_message_link(url)
        if target is None:
            QDesktopServices.openUrl(QUrl(url))
            return
        self.show_message(*target)

    def link_title(self, url: str) -> str | None:
        """What an m2mc://message link shows instead of its ids: the linked message's author and
        first words, when that message has reached this peer."""
        target = parse_message_link(url)
        session = self.sessions.sessions.get(target[0]) if target is not None else None
        message = session.tree.message(target[1]) if session is not None and target is not None else None
        if message is None or session is None:
            return None
        return f"↗ {message.sender_name}: {root_text(message, 50)} ({session.title})"

    def show_message(self, gid: str, mid: Mid) -> bool:
        """Open ``mid`` in its thread, in view and selected, whichever group is shown (message links,
        search results); a direct message (``gid`` its conversation, ``dm:<pid>:<pid>``) in its
        conversation.  Where the reader was is kept: Back (Alt+Left) returns there."""
        peer = conversation_peer(gid, self.backend.pid)
        if peer is not None:
            self._keep_place()
            self.direct.show_message(peer, mid, missing=self._not_here)
            self.view.raise_()
            self.view.activateWindow()
            return True
        session = self.sessions.sessions.get(gid)
        if session is None:
            self.show_error("That message is in a group you have not joined.")
            return False
        self._keep_place()
        if self.selection.session is not session:
            self.view.select_group(gid)
        if session.tree.node(mid) is None and session.loaded and self.selection.session is session:
            # Older than the pages loaded: its page comes from the store first.
            self.sessions.load_back_to(session, mid, lambda _found: self._show_held(session, mid))
            return True
        return self._show_held(session, mid)

    def go_back(self) -> None:
        """Alt+Left: to where the reader was before following a link or a search result, else out of
        the open thread to all threads."""
        self._go_back()
        # Back is pressed in the search window too (Shortcuts work from every window): the window
        # comes up with the keys in the compose box of where it went back to.
        self.view.raise_()
        self.view.activateWindow()
        self.view.apply_focus(Navigation.BACK)

    def _go_back(self) -> None:
        conversation = self.conversation
        while self.way_back:
            gid, thread, mid = self.way_back.pop()
            if gid.startswith(CONVERSATION_PREFIX):
                peer = gid.removeprefix(CONVERSATION_PREFIX)
                if mid is not None:
                    self.direct.show_message(peer, mid, missing=self._not_here)
                else:
                    self.direct.open_with(peer)
                return
            if gid not in self.sessions.sessions:
                continue  # left since
            current = self.selection.session
            if current is None or current.gid != gid:
                self.view.select_group(gid)
            if thread is not None:
                if mid is not None:
                    conversation.open_thread(thread, then=functools.partial(conversation.select_message, mid))
                else:
                    conversation.open_thread(thread)
                return
            conversation.close_thread()
            if mid is not None:
                conversation.select_message(mid)
            return
        conversation.close_thread()

    def _keep_place(self) -> None:
        """Where the reader is, for Back (Alt+Left) to return to after a jump."""
        here = self.selection.session
        direct = self.direct.current
        if here is not None:
            selected = self.conversation.selected_message()
            thread = here.thread.root.message.mid if here.thread is not None else None
            self.way_back.append((here.gid, thread, selected.mid if selected is not None else None))
        elif direct is not None:
            index = self.direct_view.currentIndex()
            message: ChatMessage | None = index.data(MessageRole) if index.isValid() else None
            self.way_back.append((direct.key, None, message.mid if message is not None else None))
        del self.way_back[:-MAX_WAY_BACK]

    def _show_held(self, session: GroupSession, mid: Mid) -> bool:
        def shown() -> None:
            if self.conversation.select_message(mid):
                self.view.raise_()
                self.view.activateWindow()
                self.view.apply_focus(Navigation.SEARCH_JUMP)
            else:
                self._not_here()

        if self.selection.session is not session:
            return self._not_here()
        return self.conversation.open_thread(mid, then=shown, missing=self._not_here)

    def _not_here(self) -> bool:
        self.show_error("That message has not reached this peer (yet).")
        return False
