"""A new user's first minutes, on real windows with real keys: no group yet, a group created or joined
by invite from the keyboard alone, and the first message typed straight after.

Xvfb has no window manager, so nothing gives the main window back its activation when a modal
dialog closes; :func:`conftest.activate` does what the desktop would, and the keys then go to the
widget the window kept focused."""

from PySide6.QtCore import Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from conftest import activate, save_screenshot
from m2mc.ui.dialogs import CreateGroupDialog

CTRL_SHIFT = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier


def in_next_dialog(kind, keys, ready=lambda dialog: True):
    """Once a modal dialog of ``kind`` is up and ``ready``, ``keys(dialog)`` runs in it (its exec()
    blocks the test)."""
    def act():
        dialog = QApplication.activeModalWidget()
        if not isinstance(dialog, kind) or not ready(dialog):
            QTimer.singleShot(20, act)
            return
        keys(dialog)
    QTimer.singleShot(20, act)


def type_and_enter(dialog, text):
    QTest.keyClicks(dialog.focusWidget(), text)
    QTest.keyClick(dialog.focusWidget(), Qt.Key.Key_Return)


def create_by_keys(qtbot, window, desc):
    in_next_dialog(CreateGroupDialog, lambda dialog: type_and_enter(dialog, desc))
    QTest.keyClick(window, Qt.Key.Key_N, CTRL_SHIFT)  # File → Create group…
    qtbot.waitUntil(lambda: window.current is not None and window.current.title == desc)
    activate(qtbot, window)  # the desktop gives the window back its activation when the dialog closes


def test_a_new_group_offers_no_older_messages(qtbot, window, backend):
    window.start()
    create_by_keys(qtbot, window, "Lunch crew")
    qtbot.waitUntil(lambda: window.current.loaded)
    save_screenshot(window, "first-run-new-group.png")
    assert not window.older_button.isVisible()
    assert window.tree_view.empty_hint  # what it does show: how to start
