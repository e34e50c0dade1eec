"""Nothing is joined unseen: the join dialogs show what is verified of a group (its signed description,
its creator's name and key fingerprint, its member count) and join only on Join; Cancel leaves the user
out, an invite's own description is checked against the signed one, and an unverified group cannot
be joined.  Driven like a user: real windows, mouse clicks and keys."""

from dataclasses import replace

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDialogButtonBox

from conftest import ANN, BOB, CAT, save_screenshot
from m2mc.middleware.types import short_fingerprint
from m2mc.ui.dialogs import ConfirmJoinDialog, JoinDialog
from m2mc.ui.memory_backend import sim_member


def button(dialog, which):
    return dialog.buttons.button(which)


OK, CANCEL = QDialogButtonBox.StandardButton.Ok, QDialogButtonBox.StandardButton.Cancel


def test_join_from_discovery_shows_the_verified_group_and_cancel_leaves_you_out(qtbot, window, backend):
    window.start()
    pay = backend.manager.inject_group("Payroll questions", members=(ANN, BOB, CAT)).gid
    discovery = window.discovery
    discovery.show()
    qtbot.waitUntil(lambda: discovery.model.rowCount() == 1)
    assert discovery.select_gid(pay)
    qtbot.mouseClick(discovery.join_button, Qt.MouseButton.LeftButton)

    dialog = window.join_controller.join_dialog
    assert dialog is not None and dialog.isVisible(), "Join must ask first"
    assert not backend.manager.group(pay).joined and pay not in window.session_controller.sessions
    summary = dialog.summary
    assert summary.desc_label.text() == "“Payroll questions”"
    assert summary.creator_label.text() == f"Ann (key {short_fingerprint(ANN.pid)})"
    assert summary.members_label.text() == "3"
    assert summary.kind_label.text().startswith("open")
    assert button(dialog, OK).text() == "Join" and not dialog.passphrase_edit.isVisible()
    qtbot.waitExposed(dialog)
    save_screenshot(dialog, "join-confirm.png")

    qtbot.mouseClick(button(dialog, CANCEL), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.isVisible())
    qtbot.wait(50)
    assert not backend.manager.group(pay).joined and pay not in window.session_controller.sessions

    # Double-click the row this time, and press Join.
    rect = discovery.table.visualRect(discovery.model.index(0, 0))
    QTest.mouseClick(discovery.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    QTest.mouseDClick(discovery.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: window.join_controller.join_dialog is not dialog
                    and window.join_controller.join_dialog.isVisible())
    qtbot.mouseClick(button(window.join_controller.join_dialog, OK), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == pay)
    assert backend.manager.group(pay).joined


def test_a_creator_without_a_known_record_shows_its_fingerprint_and_escape_cancels(qtbot, backend):
    stranger = sim_member("Stranger").pid
    made = backend.manager.inject_group("Book club", members=(BOB,), passphrase="long enough words")
    # As the view reads when the creator's record is not held (never heard, or dropped at the member cap).
    view = replace(made, creator=stranger)
    dialog = ConfirmJoinDialog(backend, view)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    assert dialog.summary.creator_label.text() == f"a member not seen yet (key {short_fingerprint(stranger)})"
    assert dialog.summary.kind_label.text().startswith("private") and dialog.passphrase_edit.isVisible()
    assert dialog.focusWidget() is dialog.passphrase_edit
    QTest.keyClick(dialog.focusWidget(), Qt.Key.Key_Escape)
    assert not dialog.isVisible() and dialog.joined_gid is None and not backend.manager.group(view.gid).joined


def test_an_invite_naming_a_group_falsely_is_contradicted_before_joining(qtbot, backend):
    mal = sim_member("Payroll team", seed="mal")
    giveaway = backend.manager.inject_group("Mal's giveaway", members=(mal,)).gid
    join = JoinDialog(backend, invite=f"Join “Payroll” on M2MC: m2mc://join/{giveaway}?desc=Payroll")
    qtbot.addWidget(join)
    join.show()
    qtbot.waitExposed(join)
    assert button(join, OK).text() == "Look up" and not join.summary.isVisible()
    QTest.keyClick(join.focusWidget(), Qt.Key.Key_Return)  # Enter looks the group up, never joins
    qtbot.waitUntil(lambda: join.summary.isVisible())
    save_screenshot(join, "join-invite-contradicted.png")
    assert join.summary.desc_label.text() == "“Mal's giveaway”"
    assert join.summary.note_label.text().startswith("The invite calls it “Payroll”, but the description "
                                                     "its creator signed is “Mal's giveaway”.")
    assert join.summary.creator_label.text() == f"Payroll team (key {short_fingerprint(mal.pid)})"
    assert button(join, OK).text() == "Join" and not backend.manager.group(giveaway).joined
    qtbot.mouseClick(button(join, CANCEL), Qt.MouseButton.LeftButton)
    assert join.joined_gid is None and not backend.manager.group(giveaway).joined

    # Editing the id forgets what was looked up: the next OK looks up again.
    again = JoinDialog(backend, invite=f"m2mc://join/{giveaway}?desc=Payroll")
    qtbot.addWidget(again)
    again.show()
    qtbot.mouseClick(button(again, OK), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: again.summary.isVisible())
    QTest.keyClicks(again.gid_edit, "x")
    assert not again.summary.isVisible() and button(again, OK).text() == "Look up"


def test_an_unverified_group_says_so_and_cannot_be_joined(qtbot, window, backend):
    window.start()
    view = backend.manager.inject_group("Board (open!)", members=(ANN,), verified=False)
    dialog = ConfirmJoinDialog(backend, view)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.summary.note_label.text().startswith("Not verified yet")
    assert not button(dialog, OK).isEnabled() and dialog.error_label.text().endswith("it is not verified.")
    assert dialog.summary.creator_label.text() == "unknown"

    join = JoinDialog(backend, gid=view.gid)
    qtbot.addWidget(join)
    join.show()
    qtbot.mouseClick(button(join, OK), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: join.summary.isVisible())
    assert join.summary.note_label.text().startswith("Not verified yet") and not button(join, OK).isEnabled()
    QTest.keyClick(join.gid_edit, Qt.Key.Key_Return)
    qtbot.wait(50)
    assert not backend.manager.group(view.gid).joined
