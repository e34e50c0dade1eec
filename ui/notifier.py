"""Desktop notifications for new messages while the window is not active.

Uses the system tray where there is one (QSystemTrayIcon), and asks the
window manager to flag the window either way.  At most one balloon per few
seconds, so a busy group does not flood the desktop.
"""

from __future__ import annotations

import time

from PySide6.QtWidgets import QApplication, QSystemTrayIcon, QWidget

from .resources import app_icon

MIN_INTERVAL = 3.0


class Notifier:
    def __init__(self, window: QWidget) -> None:
        self.window = window
        self.tray: QSystemTrayIcon | None = None
        self.shown = 0
        self._last = 0.0
        if QSystemTrayIcon.isSystemTrayAvailable():
            self.tray = QSystemTrayIcon(app_icon(), window)
            self.tray.setToolTip("M2MC chat")
            self.tray.activated.connect(lambda _reason: self._raise())
            self.tray.messageClicked.connect(self._raise)
            self.tray.show()

    def notify(self, title: str, body: str) -> bool:
        """Show a notification unless the window is active; True if one was shown."""
        if self.window.isActiveWindow():
            return False
        QApplication.alert(self.window)
        now = time.monotonic()
        if now - self._last < MIN_INTERVAL:
            return False
        self._last = now
        self.shown += 1
        if self.tray is not None and QSystemTrayIcon.supportsMessages():
            self.tray.showMessage(title, body, app_icon(), 5000)
        return True

    def _raise(self) -> None:
        self.window.showNormal()
        self.window.raise_()
        self.window.activateWindow()
