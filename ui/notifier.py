"""Desktop notifications for new messages while the window is not active, and the unread count in the
tray.

Where the session bus has the desktop's notification service (org.freedesktop.Notifications) a
notification goes there, through the app's one bus connection (:mod:`ui.session_bus`): the desktop
draws it in its own theme, light or dark.  Each carries a default action; clicking the notification
(or its "Open" button) brings the window up on the conversation it is about, the message selected.
Without the service the tray balloon is the fallback; it is drawn with the palette's tooltip colours,
which :func:`ui.resources.apply_theme` keeps readable.  Either way the window manager is asked to flag
the window.  A conversation raises at most one notification per MIN_INTERVAL, and a mention of this
peer is counted apart, so a busy group neither floods the desktop nor holds back a mention or another
conversation's message.  The tray icon's tooltip (and the window title) carry the unread count.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any, Callable

from PySide6.QtWidgets import QApplication, QSystemTrayIcon, QWidget

from .resources import app_icon

try:  # jeepney is a Linux dependency: elsewhere there is no session bus to ask
    from jeepney import MatchRule

    from .session_bus import SessionBus, SessionBusError
except ImportError:  # pragma: no cover - not on Linux
    SessionBus = None  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)

MIN_INTERVAL = 3.0
SERVICE = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"
APP_NAME = "M2MC chat"
DESKTOP_ENTRY = "m2mc-chat"  # the desktop file's name: the desktop finds the app's icon and name by it
KEPT_ACTIONS = 64  # notifications whose click is remembered; an older one's click only raises the window
_DEFAULT = object()


class DesktopNotifications:
    """org.freedesktop.Notifications on the session bus, if the desktop has it: one per bus, shared by
    every window (:meth:`shared`).  ``bus`` None: no service (the tray's balloon is used)."""

    _shared: dict[int, "DesktopNotifications"] = {}

    def __init__(self, bus: Any = None) -> None:
        self.bus = bus
        self.available = bus is not None and bus.has_name(SERVICE)
        self.sent = 0
        # notification id -> what its click does; bounded, the oldest forgotten first
        self._clicks: OrderedDict[int, Callable[[], None]] = OrderedDict()
        if self.available:
            bus.listen(MatchRule(type="signal", interface=SERVICE, path=PATH, member="ActionInvoked"), self._invoked)
            bus.listen(MatchRule(type="signal", interface=SERVICE, path=PATH, member="NotificationClosed"),
                       lambda message: self._clicks.pop(message.body[0], None))

    @classmethod
    def shared(cls) -> "DesktopNotifications":
        bus = SessionBus.shared() if SessionBus is not None else None
        key = id(bus)
        if key not in cls._shared:
            cls._shared[key] = cls(bus)
        return cls._shared[key]

    def notify(self, title: str, body: str, on_click: Callable[[], None] | None = None,
               timeout_ms: int = 5000) -> bool:
        """Show a notification; ``on_click`` runs when the user clicks it (its default action)."""
        if not self.available:
            return False
        hints = {"desktop-entry": ("s", DESKTOP_ENTRY), "category": ("s", "im.received")}
        try:
            (notification,) = self.bus.call_method(
                SERVICE, PATH, SERVICE, "Notify", "susssasa{sv}i",
                (APP_NAME, 0, DESKTOP_ENTRY, title, body, ["default", "Open"], hints, timeout_ms))
        except SessionBusError as exc:
            log.info("the desktop did not take a notification: %s", exc)
            return False
        self.sent += 1
        if on_click is not None:
            self._clicks[notification] = on_click
            while len(self._clicks) > KEPT_ACTIONS:
                self._clicks.popitem(last=False)
        return True

    def _invoked(self, message) -> None:
        notification, action = message.body
        click = self._clicks.pop(notification, None) if action in ("default", "Open") else None
        if click is not None:
            click()


class Notifier:
    """One window's notifications.  ``open_target(target)`` shows what a clicked notification is about
    (``target`` as given to :meth:`notify`)."""

    def __init__(self, window: QWidget, desktop: DesktopNotifications | None = None,
                 open_target: Callable[[Any], object] | None = None) -> None:
        self.window = window
        self.desktop = desktop if desktop is not None else DesktopNotifications.shared()
        self.open_target = open_target
        self.shown = 0
        self.last_via = ""
        self.unread = 0
        # per (conversation, mention): a busy group holds back neither a mention nor another conversation
        self._last: dict[tuple[Any, bool], float] = {}
        self._tray_target: Any = None
        # The tray icon carries the unread count and raises the window; shown where there is a tray.
        self.tray = QSystemTrayIcon(app_icon(), window)
        self.tray.setToolTip(APP_NAME)
        self.tray.activated.connect(lambda _reason: self._raise())
        self.tray.messageClicked.connect(lambda: self._open(self._tray_target))
        if QSystemTrayIcon.isSystemTrayAvailable():
            self.tray.show()

    def notify(self, title: str, body: str, mention: bool = False, target: Any = None) -> bool:
        """Show a notification unless the window is active; True if one was shown.  ``target``: what a
        click opens, ``(conversation, message)`` (its limit is counted per conversation)."""
        if self.window.isActiveWindow():
            return False
        QApplication.alert(self.window)
        now = time.monotonic()
        key = (target[0] if isinstance(target, tuple) else target, mention)  # the conversation, not the message
        last = self._last.get(key)
        if last is not None and now - last < MIN_INTERVAL:
            return False
        self._last[key] = now
        if self.desktop.notify(title, body, on_click=lambda: self._open(target)):
            self.last_via = "desktop"
        elif self.tray.isVisible() and QSystemTrayIcon.supportsMessages():
            self._tray_target = target
            self.tray.showMessage(title, body, app_icon(), 5000)
            self.last_via = "tray"
        else:
            return False
        self.shown += 1
        return True

    def show_unread(self, count: int) -> None:
        """The tray icon's tooltip says how many messages are unread."""
        self.unread = count
        self.tray.setToolTip(f"{APP_NAME}: {count} unread" if count else APP_NAME)

    def _open(self, target: Any) -> None:
        self._raise()
        if target is not None and self.open_target is not None:
            self.open_target(target)

    def _raise(self) -> None:
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()
