"""Status: the status bar (network state and address, peers, sync, replies waiting), warnings, and
the members pane with presence.

Warnings from the middleware are never modal: the group's banner shows the latest, the status
bar says it whatever group is open, the group gets a warning sign in the groups pane until
looked at, and the warnings window keeps them all.  Pending replies and presence are polled.
"""

from __future__ import annotations

import logging
from typing import Protocol

from PySide6.QtCore import QObject, Qt, QTimer
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QListWidgetItem

from ...middleware.events import Event, MessagesDelivered, NetworkChanged, SyncProgress, WarningRaised
from ...middleware.names import lookalikes
from ..bridge import Backend
from ..delegate import MessageDelegate
from ..dialogs import WarningLogWindow
from ..member_list import fill_member_list
from ..model.state import Selection
from ..widgets import ThreadListDelegate, WarningBanner
from .sessions import GroupSession, SessionController

log = logging.getLogger(__name__)

PRESENCE_POLL_MS = 5000


class StatusBar(Protocol):
    """The status bar's parts (ui.panes.status.StatusPane)."""

    def show_network(self, text: str, state: str) -> None: ...
    def show_peers(self, count: int) -> None: ...
    def show_waiting(self, waiting: int) -> None: ...
    def show_sync(self, sync: tuple[int, int] | None) -> None: ...


class StatusView(Protocol):
    """The status pane, the warnings, the members pane and the views whose names it keeps."""

    warning_log: WarningLogWindow
    warning_banner: WarningBanner
    @property
    def status_pane(self) -> StatusBar: ...
    member_list: QListWidget

    def named_views(self) -> tuple[QAbstractItemView, ...]: ...
    def show_status(self, text: str, timeout: int) -> None: ...


class StatusController(QObject):
    """What the status bar, the warnings and the members pane show."""

    def __init__(self, backend: Backend, selection: Selection[GroupSession], sessions: SessionController,
                 view: StatusView, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.backend = backend
        self.selection = selection
        self.sessions = sessions
        self._pending_timer = QTimer(self, interval=1000)
        self._pending_timer.timeout.connect(self._poll_pending)
        self._pending_timer.start()
        self._presence_timer = QTimer(self, interval=PRESENCE_POLL_MS)
        self._presence_timer.timeout.connect(self.poll_presence)
        self._presence_timer.start()
        self.network: NetworkChanged | None = None  # none told yet (a backend with no network)
        self.backend.peer_event.connect(self._on_event)
        self.backend.failed.connect(self.show_error)

    def _on_event(self, event: Event) -> None:
        match event:
            case SyncProgress(gid, received, expected):
                self._on_sync_progress(gid, received, expected)
            case WarningRaised(gid, text):
                self._on_warning(gid, text)
            case NetworkChanged():
                self._on_network(event)
            case MessagesDelivered(_, messages) if self.network is not None and self.network.state != "connected":
                self._mark_queued([m.mid for m in messages if m.sender == self.backend.pid])

    def _on_network(self, event: NetworkChanged) -> None:
        """The peer moved, lost or found its network: said in the status bar until it changes; once
        connected, what was written meanwhile has gone out (the groups resync), so it is queued no more."""
        self.network = event
        if event.state == "connected":
            if event.address:
                self.backend.interface = event.address
            self._mark_queued([], clear=True)
        self.refresh()

    def _mark_queued(self, mids: list, clear: bool = False) -> None:
        """Own messages written while offline show "queued" (stored, sent when the network is back)."""
        if not mids and not clear:
            return
        for conversation in self.view.named_views():
            delegate = conversation.itemDelegate()
            if not isinstance(delegate, MessageDelegate):
                continue
            changed = set(delegate.queued) if clear else set(mids)
            delegate.queued = set() if clear else delegate.queued | set(mids)
            for mid in changed:
                delegate.forget(mid)
            if changed:
                conversation.scheduleDelayedItemsLayout()
                conversation.viewport().update()

    def _on_sync_progress(self, gid: str, received: int, expected: int) -> None:
        session = self.sessions.sessions.get(gid) or self.sessions.session(gid)
        session.sync = (received, expected) if received < expected else None
        if self.selection.is_current(session):
            self.refresh()

    def _on_warning(self, gid: str, text: str) -> None:
        view = self.sessions.known_groups.get(gid)
        session = self.sessions.sessions.get(gid)
        title = session.title if session is not None else view.desc if view is not None else gid or "network"
        log.warning("group %s: %s", gid, text)
        self.view.warning_log.add(title, text)
        self.view.show_status(f"⚠ Warning in {title}: {text}", 15000)
        if session is None:
            return
        if self.selection.is_current(session):
            session.warnings.append(text)
            session.warning_dismissed = False
            self.show_warning_banner()
        else:
            self.sessions.sessions.warned(session, text)

    def show_warning_banner(self) -> None:
        session = self.selection.session
        if session is None or not session.warnings or session.warning_dismissed:
            self.view.warning_banner.show_warning(None)
        else:
            self.view.warning_banner.show_warning(session.warnings[-1], len(session.warnings))
            self.sessions.sessions.warning_seen(session)

    def dismiss_warning(self) -> None:
        if self.selection.session is not None:
            self.selection.session.warning_dismissed = True

    def show_warning_log(self) -> None:
        self.view.warning_log.show()
        self.view.warning_log.raise_()
        self.view.warning_log.activateWindow()

    def _poll_pending(self) -> None:
        session = self.selection.session
        if session is None:
            return
        gid = session.gid
        self.backend.call(lambda peer: peer.pending(gid), on_result=lambda n: self._on_pending(session, n),
                          on_error=lambda _e: None)

    def _on_pending(self, session: GroupSession, count: int) -> None:
        if session.pending != count:
            session.pending = count
            self.refresh()

    def refresh(self) -> None:
        pane = self.view.status_pane
        pane.show_network(network_text(self.network, f"{self.backend.interface or '?'}:{self.backend.port}"),
                          self.network.state if self.network else "connected")
        # A member who left a group is still a peer that was seen: their machine is still there.
        known = self.sessions.known_groups.values()
        pane.show_peers(len({m.pid for view in known for m in view.members + view.left} - {self.backend.pid}))
        session = self.selection.session
        pane.show_waiting((session.pending + session.tree.waiting_count) if session is not None else 0)
        pane.show_sync(session.sync if session is not None else None)

    def fill_members(self) -> None:
        session = self.selection.session
        view = session.view if session is not None else None
        if view is not None:
            names = {m.pid: m.name for m in (*view.members, *view.left)}
            look_alike = lookalikes(view.members)
            for conversation in self.view.named_views():
                delegate = conversation.itemDelegate()
                assert isinstance(delegate, (MessageDelegate, ThreadListDelegate))
                if delegate.names != names or delegate.lookalikes != look_alike:
                    delegate.names, delegate.lookalikes = names, look_alike
                    conversation.viewport().update()
        presence = session.presence if session is not None else {}
        fill_member_list(self.view.member_list, view, self.backend.pid, self._member_header,
                         lambda pid: presence.get(pid, "offline"), session.direct if session is not None else set())

    def _member_header(self, text: str) -> QListWidgetItem:
        item = QListWidgetItem(text)
        item.setFlags(Qt.ItemFlag.ItemIsEnabled)
        font = item.font()
        font.setBold(True)
        item.setFont(font)
        return item

    def show_error(self, message: str) -> None:
        self.view.show_status(message, 8000)

    def poll_presence(self) -> None:
        session = self.selection.session
        if session is None or session.view is None or not session.view.joined:
            return
        gid = session.gid
        self.backend.call(lambda peer: (peer.presence_of(gid), peer.reached_directly(gid)),
                          on_result=lambda result: self._on_presence(session, *result),
                          on_error=lambda _e: None)

    def _on_presence(self, session: GroupSession, statuses: dict, direct: list[str]) -> None:
        if statuses != session.presence or set(direct) != session.direct:
            session.presence = dict(statuses)
            session.direct = set(direct)
            if self.selection.is_current(session):
                self.fill_members()


def network_text(network: NetworkChanged | None, address: str) -> str:
    """What the status bar says of the network: "Connected · 192.168.1.20:47477",
    "Reconnecting on wlan0 (192.168.1.23)…" or "Offline: no network"."""
    if network is None:
        return address
    if network.state == "connected":
        return f"Connected on {network.interface} · {address}" if network.interface else f"Connected · {address}"
    if network.state == "reconnecting":
        return f"Reconnecting {network.reason}…" if network.reason else "Reconnecting…"
    return f"Offline: {network.reason}" if network.reason else "Offline"
