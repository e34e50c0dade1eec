"""A new user's first minutes, on real windows with real keys: no group yet, a group created or joined
by invite from the keyboard alone, and the first message typed straight after.

Xvfb has no window manager, so nothing gives the main window back its activation when a modal
dialog closes; :func:`conftest.activate` does what the desktop would, and the keys then go to the
widget the window kept focused."""

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from conftest import ANN, BOB, CAT, activate, lunch_conversation, save_screenshot
from m2mc.middleware.types import Member
from m2mc.ui.dialogs import CreateGroupDialog, JoinDialog

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


def test_a_group_created_from_the_keyboard_takes_the_first_message_typed_next(qtbot, window, backend):
    window.start()
    create_by_keys(qtbot, window, "Lunch crew")
    qtbot.keyClicks(QApplication.focusWidget(), "Who is in for Friday?")
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    qtbot.wait(100)
    save_screenshot(window, "first-run-typed-after-create.png")
    qtbot.waitUntil(lambda: len(window.current.tree) == 1)
    assert [text for _gid, text, _parent in backend.manager.sent] == ["Who is in for Friday?"]
    assert window.conversation.compose.toPlainText() == ""


def test_a_group_joined_by_invite_from_the_keyboard_takes_the_first_message_typed_next(qtbot, window, backend):
    book = backend.manager.inject_group("Book club", members=(ANN, BOB, CAT))
    backend.manager.inject_messages(book.gid, lunch_conversation(book.gid), notify=False)
    invite = backend.manager.peer(ANN).invite(book.gid)
    window.start()
    QGuiApplication.clipboard().setText(f"Join “Book club” on M2MC: {invite}")

    def look_up_then_join(dialog):
        QTest.keyClick(dialog.focusWidget(), Qt.Key.Key_Return)  # Look up; what it finds turns it into Join
        ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
        in_next_dialog(JoinDialog, lambda d: QTest.keyClick(d.focusWidget(), Qt.Key.Key_Return),
                       ready=lambda _d: ok.text() == "Join" and ok.isEnabled())

    in_next_dialog(JoinDialog, look_up_then_join)
    QTest.keyClick(window, Qt.Key.Key_I, CTRL_SHIFT)  # File → Join from invite… (the link is on the clipboard)
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == book.gid)
    qtbot.waitUntil(lambda: len(window.current.tree) == len(lunch_conversation(book.gid)))
    activate(qtbot, window)
    assert QApplication.focusWidget() is window.conversation.compose
    qtbot.keyClicks(QApplication.focusWidget(), "Hello all")
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: [text for _gid, text, _parent in backend.manager.sent] == ["Hello all"])


def test_a_new_group_offers_no_older_messages(qtbot, window, backend):
    window.start()
    create_by_keys(qtbot, window, "Lunch crew")
    qtbot.waitUntil(lambda: window.current.loaded)
    save_screenshot(window, "first-run-new-group.png")
    assert not window.conversation.header.older_button.isVisible()
    assert window.conversation.tree_view.empty_hint  # what it does show: how to start


def test_a_group_on_the_network_is_joined_from_the_keyboard(qtbot, window, backend):
    """Ctrl+G, Enter on the group listed, Enter to join, Esc: then the keys write in the group."""
    book = backend.manager.inject_group("Book club", members=(ANN, BOB, CAT))
    window.start()
    QTest.keyClick(window, Qt.Key.Key_G, Qt.KeyboardModifier.ControlModifier)
    discovery = window.discovery
    qtbot.waitUntil(discovery.isVisible)
    activate(qtbot, discovery)
    qtbot.waitUntil(lambda: discovery.model.rowCount() == 1)
    assert QApplication.focusWidget() is discovery.table
    save_screenshot(discovery, "first-run-discovery-keys.png")
    QTest.keyClick(discovery.table, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.join_controller.join_dialog is not None
                    and window.join_controller.join_dialog.isVisible(), timeout=2000)
    confirm = window.join_controller.join_dialog
    activate(qtbot, confirm)
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)  # Join
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == book.gid)
    activate(qtbot, discovery)
    QTest.keyClick(discovery.table, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not discovery.isVisible())
    activate(qtbot, window)
    qtbot.keyClicks(QApplication.focusWidget(), "Hi, I'm new here")
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: [text for _gid, text, _parent in backend.manager.sent] == ["Hi, I'm new here"])


def test_the_app_opens_with_the_keys_in_the_compose_box_of_the_group_shown(qtbot, window, backend):
    """Typing into the groups list searched it: "hello" jumped to the group "Holiday" and sent nothing."""
    me = Member(backend.pid, backend.name)
    lunch = backend.manager.inject_group("Lunch", members=(ANN, BOB, me), joined=True)
    backend.manager.inject_group("Holiday", members=(ANN, CAT, me), joined=True)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    shown = window.current.gid
    activate(qtbot, window)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.conversation.compose)
    qtbot.keyClicks(QApplication.focusWidget(), "hello")
    qtbot.wait(50)
    save_screenshot(window, "first-run-typed-at-start.png")
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: backend.manager.sent == [(shown, "hello", None)], timeout=2000)
    assert window.current.gid == shown and lunch.gid in window.session_controller.sessions


def test_typing_after_clicking_a_group_writes_in_it_and_the_arrows_still_walk_the_list(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    lunch = backend.manager.inject_group("Lunch", members=(ANN, BOB, me), joined=True)
    holiday = backend.manager.inject_group("Holiday", members=(ANN, CAT, me), joined=True)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded
                    and len(window.session_controller.sessions) == 2)
    activate(qtbot, window)
    groups = window.groups_pane.group_list
    item = window.groups_pane.item(lunch.gid)
    qtbot.mouseClick(groups.viewport(), Qt.MouseButton.LeftButton, pos=groups.visualItemRect(item).center())
    qtbot.waitUntil(lambda: window.current.gid == lunch.gid)
    for key in "hi there":  # "h" searched the list: Holiday.  Each key goes where the focus is then
        QTest.keyClick(QApplication.focusWidget(), key)
    qtbot.wait(50)
    save_screenshot(window, "first-run-typed-after-click.png")
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: backend.manager.sent == [(lunch.gid, "hi there", None)], timeout=2000)
    assert window.current.gid == lunch.gid

    groups.setFocus()  # the arrow keys are the list's: they go from group to group
    QTest.keyClick(groups, Qt.Key.Key_Down if groups.row(item) == 0 else Qt.Key.Key_Up)
    qtbot.waitUntil(lambda: window.current.gid == holiday.gid)
    assert QApplication.focusWidget() is groups


def test_with_no_group_yet_the_header_offers_no_topic_to_edit(qtbot, window, backend):
    window.start()
    qtbot.wait(100)
    save_screenshot(window, "first-run-no-group.png")
    assert window.conversation.stack.currentWidget() is window.conversation.empty_page
    assert not window.conversation.topic_edit.isVisible()  # "Add a topic for everyone…" of no group at all
    create_by_keys(qtbot, window, "Lunch crew")
    assert window.conversation.topic_edit.isVisible() and window.conversation.topic_edit.placeholderText() == "Add a topic for everyone…"


def test_with_no_group_yet_enter_finds_groups(qtbot, window, backend):
    """At first run the keys were in the empty groups list, where Enter did nothing."""
    window.start()
    qtbot.waitUntil(lambda: window.conversation.stack.currentWidget() is window.conversation.empty_page)
    activate(qtbot, window)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.conversation.empty_page.buttons[0])
    assert window.conversation.empty_page.buttons[0].text() == "Find groups…"
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.discovery.isVisible())
    window.discovery.close()


def test_letters_typed_in_the_direct_messages_list_never_go_to_a_group(qtbot, window, backend):
    """With a group on show and no direct conversation open, "hi bob" typed in the Direct messages list
    went to the group's compose box, and Enter sent it to the whole group."""
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Lunch", members=(ANN, BOB, me), joined=True)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    activate(qtbot, window)
    window.groups_pane.direct_list.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is window.groups_pane.direct_list)
    qtbot.keyClicks(window.groups_pane.direct_list, "hi bob")
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    qtbot.wait(200)
    assert backend.manager.sent == [] and window.conversation.compose.toPlainText() == ""
