"""Small things a person meets in the dialogs and the discovery window, driven with real clicks
and keys: the passphrase can be shown to read it back, a join says it is checking the passphrase
while the key is derived, and the discovery window closes with Esc and opens wholly on screen."""

import time

from PySide6.QtCore import QRect, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDialogButtonBox, QLineEdit, QPushButton, QToolButton

from conftest import ANN, activate, save_screenshot
from m2mc.ui.dialogs import CHECKING_PASSPHRASE, ConfirmJoinDialog

SECRET = "correct horse battery staple"


def eye_button(edit: QLineEdit) -> QToolButton:
    """The button Qt draws for the field's trailing action: what the user clicks."""
    buttons = [b for b in edit.findChildren(QToolButton) if b.defaultAction() is not None
               and b.defaultAction().objectName() == "showPassphrase"]
    assert len(buttons) == 1, "the passphrase field has one show/hide button"
    return buttons[0]


def test_the_passphrase_can_be_shown_and_the_join_says_it_is_checking(qtbot, backend):
    view = backend.manager.inject_group("Secret santa", members=(ANN,), passphrase=SECRET)
    dialog = ConfirmJoinDialog(backend, view)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    edit = dialog.passphrase_edit
    qtbot.keyClicks(edit, SECRET)
    assert edit.echoMode() == QLineEdit.EchoMode.Password and edit.displayText() != SECRET

    eye = eye_button(edit)
    assert eye.isVisible() and eye.toolTip() == "Show passphrase"
    qtbot.mouseClick(eye, Qt.MouseButton.LeftButton)
    assert edit.echoMode() == QLineEdit.EchoMode.Normal and edit.displayText() == SECRET
    assert eye.toolTip() == "Hide passphrase"
    save_screenshot(dialog, "join-passphrase-shown.png")
    qtbot.mouseClick(eye, Qt.MouseButton.LeftButton)
    assert edit.echoMode() == QLineEdit.EchoMode.Password

    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    QTest.keyClick(edit, Qt.Key.Key_Return)
    # The key is derived on a worker: until its answer, the dialog says what it waits for.
    assert dialog.busy_label.isVisible() and dialog.busy_label.text() == CHECKING_PASSPHRASE
    assert not ok.isEnabled()
    qtbot.waitUntil(lambda: dialog.joined_gid == view.gid, timeout=10_000)


def test_a_wrong_passphrase_replaces_checking_with_the_reason(qtbot, backend):
    view = backend.manager.inject_group("Poker night", members=(ANN,), passphrase=SECRET)
    dialog = ConfirmJoinDialog(backend, view)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.keyClicks(dialog.passphrase_edit, "not the right one at all")
    QTest.keyClick(dialog.passphrase_edit, Qt.Key.Key_Return)
    assert dialog.busy_label.isVisible()
    qtbot.waitUntil(dialog.error_label.isVisible, timeout=10_000)
    assert not dialog.busy_label.isVisible()
    assert dialog.error_label.text() == "That passphrase does not open this group."
    assert dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled()


def test_the_discovery_window_closes_with_escape(qtbot, window):
    window.start()
    discovery = window.discovery
    discovery.show()
    qtbot.waitExposed(discovery)
    activate(qtbot, discovery)
    QTest.keyClick(discovery.table, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not discovery.isVisible())
    assert window.isVisible()


def test_the_discovery_window_opens_wholly_on_screen(qtbot, window):
    discovery = window.discovery
    area = discovery.screen().availableGeometry()
    # Where a window manager put it on a small screen: its right half past the edge.
    discovery.move(area.right() - discovery.width() // 2, area.bottom() - 40)
    discovery.show()
    qtbot.waitExposed(discovery)
    qtbot.waitUntil(lambda: QRect(area).contains(discovery.frameGeometry()))
    assert discovery.frameGeometry().width() >= discovery.width()


def test_the_discovery_window_shows_who_is_active_in_each_group(qtbot, window, backend):
    from m2mc.middleware.presence import BEACON_INTERVAL, OFFLINE_AFTER
    from m2mc.middleware.types import Member

    from conftest import BOB, CAT

    me = Member(backend.pid, backend.name)
    lunch = backend.manager.inject_group("Lunch", members=(ANN, BOB, CAT, me), joined=True)
    window.start()
    backend.manager.pass_time(BEACON_INTERVAL + 1)  # their beacons: heard
    backend.manager.set_online(CAT, False)
    backend.manager.pass_time(OFFLINE_AFTER + 1)
    discovery = window.discovery
    discovery._ticker.setInterval(100)  # its 5 s refresh, sooner
    find = next(b for b in window.groups_pane.findChildren(QPushButton) if b.text() == "Find groups…")
    qtbot.mouseClick(find, Qt.MouseButton.LeftButton)
    qtbot.waitExposed(discovery)
    qtbot.waitUntil(lambda: lunch.gid in discovery.model._rows)
    active = discovery.model.index(discovery.model._rows[lunch.gid], 4)
    qtbot.waitUntil(lambda: active.data() == "2 online")  # Ann and Bob; Cat is gone, and I do not count
    save_screenshot(discovery, "discovery-active.png")


def test_leaving_a_group_asks_first_and_enter_keeps_you_in(qtbot, window, backend):
    """As Delete… does: a stray Enter must not take you out of a group (others see it; a private one
    needs its passphrase again)."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMessageBox

    from conftest import BOB
    from m2mc.middleware.types import Member

    me = Member(backend.pid, backend.name)
    lunch = backend.manager.inject_group("Lunch", members=(ANN, BOB, me), joined=True)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == lunch.gid)
    asked = []

    def press(key):
        started = time.monotonic()

        def act():
            box = QApplication.activeModalWidget()
            # A mnemonic (Alt+L) works only in the active window, and under load the box may be
            # shown a while before it is activated: wait for that, and never longer than 15 s (the
            # box is then closed, so the test fails on its assertions instead of hanging in exec()).
            if not isinstance(box, QMessageBox) or not box.isActiveWindow():
                if isinstance(box, QMessageBox) and time.monotonic() - started > 15:
                    asked.append("the box never became the active window")
                    box.done(QMessageBox.StandardButton.Cancel)
                    return
                if isinstance(box, QMessageBox):
                    box.activateWindow()
                QTimer.singleShot(20, act)
                return
            asked.append(box.text())
            save_screenshot(box, "leave-group-asks.png")
            QTest.keyClick(box.focusWidget() or box, key, Qt.KeyboardModifier.AltModifier if key == Qt.Key.Key_L
                           else Qt.KeyboardModifier.NoModifier)
        QTimer.singleShot(20, act)

    press(Qt.Key.Key_Return)
    window.menus.leave_action.trigger()  # File → Leave group
    qtbot.wait(100)
    assert asked == ["Leave “Lunch”? Others will see that you left."]
    assert backend.manager.group(lunch.gid).joined and window.current is not None

    press(Qt.Key.Key_L)  # Alt+L: the Leave button
    window.menus.leave_action.trigger()
    qtbot.waitUntil(lambda: window.current is None)
    assert not backend.manager.group(lunch.gid).joined
