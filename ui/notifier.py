"""Desktop notifications for new messages while the window is not active.

Where the session bus has the desktop's notification service
(org.freedesktop.Notifications, found with QtDBus) a notification goes there:
the desktop draws it in its own theme, light or dark.  The call itself is made
by ``gdbus`` (GLib's D-Bus tool, present wherever that service is): PySide6
cannot give QtDBus the unsigned ``replaces_id`` that ``Notify`` requires
(every Python int goes out as a signed one, and the service refuses the
call).  Without the service the tray balloon is the fallback; it is drawn
with the palette's tooltip colours, which :func:`ui.resources.apply_theme`
keeps readable.  Either way the window manager is asked to flag the window,
and at most one notification goes out per few seconds, so a busy group does
not flood the desktop.
"""

from __future__ import annotations

import shutil
import time
from typing import Callable

from PySide6.QtCore import QProcess
from PySide6.QtWidgets import QApplication, QSystemTrayIcon, QWidget

from .resources import app_icon

MIN_INTERVAL = 3.0
SERVICE = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"


def _gvariant_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def _start_quietly(program: str, args: list[str]) -> bool:
    process = QProcess()
    process.setProgram(program)
    process.setArguments(args)
    process.setStandardOutputFile(QProcess.nullDevice())
    process.setStandardErrorFile(QProcess.nullDevice())
    return process.startDetached()[0]


class DesktopNotifications:
    """org.freedesktop.Notifications on the session bus, if the desktop has it."""

    def __init__(self, run: Callable[[str, list[str]], bool] | None = None, available: bool | None = None) -> None:
        self._run = run or _start_quietly
        self.available = self._service_present() if available is None else available

    @staticmethod
    def _service_present() -> bool:
        if shutil.which("gdbus") is None:
            return False
        try:
            from PySide6.QtDBus import QDBusConnection
        except ImportError:
            return False
        bus = QDBusConnection.sessionBus()
        if not bus.isConnected():
            return False
        reply = bus.interface().isServiceRegistered(SERVICE)
        return bool(reply.isValid() and reply.value())

    def notify(self, title: str, body: str, timeout_ms: int = 5000) -> bool:
        if not self.available:
            return False
        args = ["call", "--session", "--dest", SERVICE, "--object-path", PATH, "--method", f"{SERVICE}.Notify",
                _gvariant_string("M2MC chat"), "0", _gvariant_string("m2mc-chat"), _gvariant_string(title),
                _gvariant_string(body), "[]", "{}", str(timeout_ms)]
        return self._run("gdbus", args)


class Notifier:
    def __init__(self, window: QWidget, desktop: DesktopNotifications | None = None) -> None:
        self.window = window
        self.desktop = desktop if desktop is not None else DesktopNotifications()
        self.tray: QSystemTrayIcon | None = None
        self.shown = 0
        self.last_via = ""
        self._last = {False: 0.0, True: 0.0}  # per kind: a busy group's messages never hold back a mention
        if not self.desktop.available and QSystemTrayIcon.isSystemTrayAvailable():
            self.tray = QSystemTrayIcon(app_icon(), window)
            self.tray.setToolTip("M2MC chat")
            self.tray.activated.connect(lambda _reason: self._raise())
            self.tray.messageClicked.connect(self._raise)
            self.tray.show()

    def notify(self, title: str, body: str, mention: bool = False) -> bool:
        """Show a notification unless the window is active; True if one was shown.  Mentions of
        this peer are limited apart from other messages (each kind at most one per MIN_INTERVAL)."""
        if self.window.isActiveWindow():
            return False
        QApplication.alert(self.window)
        now = time.monotonic()
        if now - self._last[mention] < MIN_INTERVAL:
            return False
        self._last[mention] = now
        if self.desktop.notify(title, body):
            self.last_via = "desktop"
        elif self.tray is not None and QSystemTrayIcon.supportsMessages():
            self.tray.showMessage(title, body, app_icon(), 5000)
            self.last_via = "tray"
        else:
            return False
        self.shown += 1
        return True

    def _raise(self) -> None:
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()
