"""Shared fixtures of the GUI tests: real X11 windows, an in-memory backend, a main window, screenshots.

pytest-xvfb starts an Xvfb display for the session (``make setup`` installs
Xvfb), so the windows are real xcb windows that take real key and mouse
events; without a display Qt falls back to its offscreen platform.
"""

import os
from pathlib import Path

import pytest

from m2mc.middleware.types import ChatMessage
from m2mc.ui.memory_backend import sim_member



def pytest_sessionstart(session):
    # Not at import: this conftest can load before pytest-xvfb has started the display.  Not in an
    # xdist controller either (tests/ui named on the command line loads this there): it runs no
    # test and has no display, and its "offscreen" would pass to every worker it starts.
    if getattr(session.config.option, "numprocesses", None) and not hasattr(session.config, "workerinput"):
        return
    os.environ.setdefault("QT_QPA_PLATFORM", "xcb" if os.environ.get("DISPLAY") else "offscreen")


SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"

# Peers the in-memory LAN runs (each with a key of its own): what they write is signed and checked.
ANN = sim_member("Ann")
BOB = sim_member("Bob")
CAT = sim_member("Cat")


def message(gid, member, seqno, text, parent=None, at=1_700_000_000_000):
    return ChatMessage(gid, (member.pid, seqno), parent, member.name, text, at + seqno * 1000, at + seqno * 1000)


def lunch_conversation(gid):
    """A small threaded talk: two questions, answers under each, a reply to a reply."""
    q1 = message(gid, ANN, 1, "Did you visit Delhi?")
    q2 = message(gid, ANN, 2, "Did you visit Chennai?")
    a1 = message(gid, BOB, 1, "Yes — twice, the Red Fort was wonderful.", q1.mid)
    a2 = message(gid, CAT, 1, "No, not yet. Is it worth the trip in summer?", q2.mid)
    a3 = message(gid, ANN, 3, "It is hot in May; go in December. Marina beach at sunrise is lovely "
                              "and the filter coffee alone is worth it.", a2.mid)
    a4 = message(gid, CAT, 2, "Noted, December it is!", a3.mid)
    t2 = message(gid, BOB, 2, "Lunch at the canteen at 12:30?")
    a5 = message(gid, CAT, 3, "Count me in", t2.mid)
    return [q1, q2, a1, a2, a3, a4, t2, a5]


@pytest.fixture
def backend(qapp):
    from m2mc.ui.memory_backend import MemoryBackend

    return MemoryBackend(name="Dana")


@pytest.fixture
def window(qtbot, backend):
    from m2mc.ui.main_window import MainWindow
    from m2mc.ui.resources import apply_theme

    apply_theme(qapp_instance())
    win = MainWindow(backend)
    qtbot.addWidget(win)
    win.resize(1100, 680)
    win.show()
    activate(qtbot, win)
    return win


def activate(qtbot, widget):
    """Make ``widget`` the active window, as a click on it would: shortcuts need one."""
    widget.raise_()
    widget.activateWindow()
    qtbot.waitUntil(widget.isActiveWindow, timeout=3000)


def search_everywhere(qtbot, window, query):
    """Ctrl+Shift+F, as a person presses it, then ``query`` typed into Search everywhere; the window."""
    from PySide6.QtCore import Qt
    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    search = window.search_window
    qtbot.waitUntil(search.isVisible)
    activate(qtbot, search)
    qtbot.keyClicks(search.query_edit, query)
    return search


def qapp_instance():
    from PySide6.QtWidgets import QApplication

    return QApplication.instance()


def save_screenshot(widget, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    assert widget.grab().save(str(path)), f"could not save {path}"
    return path
