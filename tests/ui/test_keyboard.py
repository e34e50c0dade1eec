"""The keyboard, as a person uses it: F1 lists every shortcut, Tab never lands in the topic field
(whose Enter changes it for everyone), and every stop of the Tab chain shows where the focus is."""

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDialog, QTableWidget

from conftest import ANN, BOB, CAT, activate, lunch_conversation, save_screenshot
from m2mc.middleware.types import Member


def open_group(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                 history=lunch_conversation(""))
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)


def tab_chain(qtbot, window, start, stops=14):
    start.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(start.hasFocus)
    seen = []
    for _ in range(stops):
        QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        seen.append(QApplication.focusWidget())
    return seen


def test_f1_lists_every_shortcut_of_the_window(qtbot, window, backend):
    open_group(qtbot, window, backend)
    activate(qtbot, window)
    QTest.keyClick(window.conversation.compose, Qt.Key.Key_F1)
    qtbot.waitUntil(lambda: window.findChild(QDialog, "shortcutsDialog") is not None)
    dialog = window.findChild(QDialog, "shortcutsDialog")
    qtbot.waitExposed(dialog)
    table = dialog.findChild(QTableWidget, "shortcutTable")
    listed = {table.item(row, 0).text(): table.item(row, 1).text() for row in range(table.rowCount())}
    for action in window.actions():
        if not action.shortcut().isEmpty() and action.text():
            assert action.text().replace("&", "").rstrip("…") in listed, action.text()
    assert listed["Next unread"] == "Ctrl+U" and listed["Send the message"] == "Enter"
    assert listed["Keyboard shortcuts"] == "F1"
    save_screenshot(dialog, "keyboard-shortcuts.png")
    activate(qtbot, dialog)
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: window.findChild(QDialog, "shortcutsDialog") is None)


def test_tab_never_lands_in_the_topic_and_the_menu_still_reaches_it(qtbot, window, backend):
    open_group(qtbot, window, backend)
    activate(qtbot, window)
    seen = tab_chain(qtbot, window, window.conversation.compose)
    assert window.conversation.topic_edit not in seen
    assert window.conversation.compose in seen[1:], "the chain comes back round"
    window.menus.topic_action.trigger()
    assert window.conversation.topic_edit.hasFocus() and window.conversation.topic_edit.selectedText() == window.conversation.topic_edit.text()


def test_every_stop_of_the_tab_chain_shows_the_focus(qtbot, window, backend):
    open_group(qtbot, window, backend)
    activate(qtbot, window)
    seen = tab_chain(qtbot, window, window.conversation.compose)
    stops = []
    for widget in seen:
        if widget not in stops:
            stops.append(widget)
    checked = [w for w in stops if w.objectName() in ("groupList", "threadList", "memberList", "filter",
                                                      "sendButton", "compose")]
    assert {w.objectName() for w in checked} >= {"groupList", "threadList", "filter", "sendButton"}
    for widget in checked:
        widget.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(widget.hasFocus)
        QApplication.processEvents()
        focused = widget.grab().toImage()
        window.conversation.tree_view.setFocus(Qt.FocusReason.TabFocusReason)
        qtbot.waitUntil(lambda: not widget.hasFocus())
        QApplication.processEvents()
        assert widget.grab().toImage() != focused, f"{widget.objectName()} looks the same with and without focus"
