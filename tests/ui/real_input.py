"""Real X input for the GUI tests: keys and clicks sent through the X server (xdotool, which uses the
XTEST extension), as a person's keyboard and mouse send them, instead of events posted to a widget.

A posted QKeyEvent goes to the widget the test names; a real key goes wherever the X server's input
focus and Qt's focus widget are at that moment, which is what the focus tests need to find out.
xdotool runs while the Qt event loop keeps turning (qtbot.waitUntil), so the app handles each key as
it comes, with refreshes, page loads and arrivals interleaved as they would be.
"""

from __future__ import annotations

import shutil
import subprocess

from PySide6.QtCore import QPoint
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QApplication, QWidget

XDOTOOL = shutil.which("xdotool")


def xdo(qtbot, *args: str, timeout: int = 20_000) -> None:
    """Run xdotool with ``args`` while the event loop turns."""
    assert XDOTOOL, "xdotool is missing: packaging/system-deps.sh installs it"
    process = subprocess.Popen([XDOTOOL, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        qtbot.waitUntil(lambda: process.poll() is not None, timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, process.stderr.read().decode() if process.stderr else process.returncode
    QApplication.processEvents()


def keys(qtbot, *names: str) -> None:
    """Press and release each key (xdotool names: "ctrl+shift+f", "Return", "Down", "alt+Left")."""
    xdo(qtbot, "key", "--delay", "40", *names)


def type_text(qtbot, text: str, delay_ms: int = 20) -> None:
    """Type ``text`` key by key, as a person does (``delay_ms`` between keys)."""
    xdo(qtbot, "type", "--delay", str(delay_ms), text)


def click(qtbot, widget: QWidget, pos: QPoint | None = None) -> None:
    """A real left click on ``widget`` (at ``pos`` in its coordinates, else its centre)."""
    point = widget.mapToGlobal(pos if pos is not None else widget.rect().center())
    if QCursor.pos() == point:
        # Already there: "mousemove --sync" would wait for a motion that never comes (15 s of xdotool's).
        xdo(qtbot, "click", "1")
    else:
        xdo(qtbot, "mousemove", "--sync", str(point.x()), str(point.y()), "click", "1")
