"""Private groups and warnings in the GUI over the in-memory backend: create and join with a passphrase, see warnings."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from conftest import ANN, BOB, CAT, lunch_conversation, save_screenshot
from m2mc.middleware.types import Member
from m2mc.ui.dialogs import CreateGroupDialog, JoinDialog
from m2mc.ui.memory_backend import cheap_group_key
from m2mc.ui.resources import apply_theme

SECRET = "correct horse battery"
EQUIVOCATION = f"two different messages claim id {ANN.pid}:7; the first one is kept"


def ok_button(dialog):
    return dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)


def test_create_dialog_private_option_validates_and_creates_a_private_group(qtbot, backend):
    apply_theme(QApplication.instance())
    dialog = CreateGroupDialog(backend)
    qtbot.addWidget(dialog)
    dialog.show()
    assert not dialog.passphrase_edit.isVisible() and not dialog.confirm_edit.isVisible()
    dialog.desc_edit.setText("Board room")
    qtbot.mouseClick(dialog.private_check, Qt.MouseButton.LeftButton)
    assert dialog.passphrase_edit.isVisible() and dialog.confirm_edit.isVisible()
    assert dialog.passphrase_edit.echoMode() == dialog.passphrase_edit.EchoMode.Password

    qtbot.keyClicks(dialog.passphrase_edit, "short")
    qtbot.keyClicks(dialog.confirm_edit, "short")
    ok_button(dialog).click()
    assert dialog.error_label.isVisible()
    assert dialog.error_label.text() == "The passphrase needs at least 8 characters (it has 5)."

    dialog.passphrase_edit.setText(SECRET)
    dialog.confirm_edit.setText(SECRET + "!")
    ok_button(dialog).click()
    assert dialog.error_label.text() == "The two passphrases differ: type the same one in both fields."
    assert dialog.created_gid is None and backend.manager.groups() == []
    dialog.resize(460, dialog.sizeHint().height())
    save_screenshot(dialog, "create-group-private.png")

    dialog.confirm_edit.setText(SECRET)
    ok_button(dialog).click()
    qtbot.waitUntil(lambda: dialog.created_gid is not None)
    view = backend.manager.group(dialog.created_gid)
    assert view.private and view.desc == "Board room"
    core = backend.manager.core  # the group's key is the one SECRET makes (checked_key refuses another)
    record = core.known(dialog.created_gid)
    core.checked_key(record, cheap_group_key(SECRET, core.kdf_args(record)[0]))


def test_unticking_private_creates_an_open_group(qtbot, backend):
    dialog = CreateGroupDialog(backend)
    qtbot.addWidget(dialog)
    dialog.desc_edit.setText("Open lunch")
    dialog.private_check.setChecked(True)
    dialog.passphrase_edit.setText("x")  # left behind when unticked: not a passphrase any more
    dialog.private_check.setChecked(False)
    ok_button(dialog).click()
    qtbot.waitUntil(lambda: dialog.created_gid is not None)
    assert not backend.manager.group(dialog.created_gid).private


def test_joining_a_private_group_asks_for_the_passphrase_and_keeps_asking_when_wrong(qtbot, window, backend):
    window.start()
    santa = backend.manager.inject_group("Secret santa", members=(ANN,), passphrase=SECRET).gid
    discovery = window.discovery
    qtbot.waitUntil(lambda: discovery.model.rowCount() == 1)
    assert discovery.model.index(0, 2).data() == "private"
    assert discovery.select_gid(santa)
    assert discovery.join_button.text() == "Join…"
    qtbot.mouseClick(discovery.join_button, Qt.MouseButton.LeftButton)

    dialog = window.join_controller.join_dialog
    assert dialog is not None and dialog.isVisible() and "Secret santa" in dialog.summary.desc_label.text()
    qtbot.keyClicks(dialog.passphrase_edit, "guess guess")
    ok_button(dialog).click()
    qtbot.waitUntil(dialog.error_label.isVisible)
    assert dialog.error_label.text() == "That passphrase does not open this group."
    assert dialog.isVisible() and santa not in window.session_controller.sessions
    assert ok_button(dialog).isEnabled()  # free to try again

    dialog.passphrase_edit.setText(SECRET)
    ok_button(dialog).click()
    qtbot.waitUntil(lambda: santa in window.session_controller.sessions and window.current is window.session_controller.sessions[santa])
    assert not dialog.isVisible()
    assert backend.manager.group(santa).joined


def test_join_by_id_takes_an_optional_passphrase(qtbot, backend):
    poker = backend.manager.inject_group("Poker", members=(BOB,), passphrase=SECRET).gid
    chess = backend.manager.inject_group("Open chess", members=(CAT,)).gid
    join = JoinDialog(backend)
    qtbot.addWidget(join)
    join.show()
    join.gid_edit.setText(poker)
    ok_button(join).click()
    qtbot.waitUntil(join.error_label.isVisible)
    assert join.error_label.text() == "“Poker” is a private group: enter its passphrase."
    join.passphrase_edit.setText(SECRET)
    ok_button(join).click()
    qtbot.waitUntil(lambda: join.joined_gid == poker)

    open_join = JoinDialog(backend)
    qtbot.addWidget(open_join)
    open_join.gid_edit.setText(chess)
    ok_button(open_join).click()  # looks it up: what is verified of it shows, and OK becomes Join
    qtbot.waitUntil(lambda: open_join.found is not None and ok_button(open_join).text() == "Join")
    assert open_join.joined_gid is None and not backend.manager.group(chess).joined
    ok_button(open_join).click()
    qtbot.waitUntil(lambda: open_join.joined_gid == chess)


def test_a_warning_shows_in_the_main_window_without_blocking(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    gid = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                       history=lunch_conversation("")[:4]).gid
    quiet_gid = backend.manager.inject_group("Quiet group", members=(CAT, me), joined=True).gid
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == gid)
    assert not window.conversation.warning_banner.isVisible()

    backend.manager.inject_warning(gid, EQUIVOCATION)
    qtbot.waitUntil(window.conversation.warning_banner.isVisible)
    assert window.conversation.warning_banner.text == f"⚠  {EQUIVOCATION}"
    assert EQUIVOCATION in window.statusBar().currentMessage()
    assert QApplication.activeModalWidget() is None
    log = window.warning_log.texts()
    assert len(log) == 1 and log[0].endswith(f"Travel & lunch: {EQUIVOCATION}")
    save_screenshot(window, "main-window-warning.png")

    # A warning for a group not on screen: status bar, log and a sign on that group; the banner stays ours.
    backend.manager.inject_warning(quiet_gid, "two different messages claim id x:1; the first one is kept")
    qtbot.waitUntil(lambda: len(window.warning_log.texts()) == 2)
    quiet = window.session_controller.sessions[quiet_gid]
    assert "Quiet group" in window.statusBar().currentMessage()
    assert window.groups_pane.item(quiet.gid).toolTip().startswith("Warning: two different messages")
    assert window.conversation.warning_banner.text == f"⚠  {EQUIVOCATION}"

    qtbot.mouseClick(window.conversation.warning_banner.close_button, Qt.MouseButton.LeftButton)
    assert not window.conversation.warning_banner.isVisible()
    window.select_group(quiet_gid)
    assert window.conversation.warning_banner.isVisible() and "x:1" in window.conversation.warning_banner.text
    window.select_group(gid)
    assert not window.conversation.warning_banner.isVisible()  # dismissed stays dismissed until the next warning

    window.conversation.warning_banner.show_all.emit()
    assert window.warning_log.isVisible() and not window.warning_log.isModal()
