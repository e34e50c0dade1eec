"""The start and the restart: the loads a start begins, and what was on show at the last close (a group
and its open thread, or a direct conversation), kept at the close and opened again once it is known
(issue 45)."""

from __future__ import annotations

from typing import Any, Protocol

from ...middleware.types import Mid
from ..discovery_window import DiscoveryWindow
from ..model.settings import read_setting, write_setting
from ..model.state import OnShow
from .direct import DirectController
from .sessions import GroupSession, SessionController
from .status import StatusController

ON_SHOW_SETTING = "window/on_show"


class RestartView(Protocol):
    """What the window shows now: a direct conversation, else its group (if any)."""

    def direct_on_show(self) -> bool: ...

    @property
    def current(self) -> GroupSession | None: ...


class RestartController:
    """Starts the window's loads and opens again what was on show at the last close: a direct conversation
    at once, a group once the joined groups are known (:meth:`group_to_open`), its thread once the group's
    history is (:meth:`restored_thread`).  ``settings`` keeps it across runs."""

    def __init__(self, view: RestartView, settings: Any, status: StatusController, sessions: SessionController,
                 direct: DirectController, discovery: DiscoveryWindow) -> None:
        self.view, self.settings = view, settings
        self.status, self.sessions, self.direct, self.discovery = status, sessions, direct, discovery
        # Taken once: a group or thread chosen before it is known is not covered by the restart.
        self.restoring = OnShow.parse(read_setting(settings, ON_SHOW_SETTING))

    def start(self) -> None:
        """Load the joined groups, direct conversations and their histories (asynchronously)."""
        self.status.refresh()
        self.sessions.load()
        self.direct.load()
        self.discovery.load()
        if self.restoring is not None and self.restoring.kind == "direct":
            self.direct.open_with(self.restoring.key)
            self.restoring = None

    def group_to_open(self, joined: list[str]) -> str | None:
        """The group a start opens among the ``joined`` (their gids): the one on show at the last close,
        else the first; None while a direct conversation is on show (restored: not to be covered)."""
        if self.view.direct_on_show():
            return None
        restoring = self.restoring
        if restoring is not None and restoring.kind == "group" and restoring.key in joined:
            if restoring.thread is None:
                self.restoring = None
            return restoring.key
        self.restoring = None
        return joined[0] if joined else None

    def restored_thread(self, gid: str) -> Mid | None:
        """The thread of ``gid`` open at the last close, once (then the restart is done)."""
        restoring, self.restoring = self.restoring, None
        return restoring.thread if restoring is not None and restoring.kind == "group" and restoring.key == gid else None

    def shown_now(self) -> OnShow | None:
        """What the window shows, as a restart is to show it again."""
        conversation = self.direct.current
        if self.view.direct_on_show() and conversation is not None:
            return OnShow("direct", conversation.peer)
        session = self.view.current
        if session is None:
            return None
        return OnShow("group", session.gid, session.thread.root.message.mid if session.thread is not None else None)

    def save(self) -> None:
        """At the close: what is on show, for the next start."""
        shown_now = self.shown_now()
        write_setting(self.settings, ON_SHOW_SETTING, shown_now.text() if shown_now is not None else "")
