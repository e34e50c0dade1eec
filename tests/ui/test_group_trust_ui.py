"""Group trust in the GUI: the passphrase strength meter, weak passphrases refused, and members
told apart by their key fingerprints when they share a display name."""

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from conftest import ANN, BOB, CAT
from m2mc.middleware.gjlp import FETCH_INTERVAL
from m2mc.middleware.types import Member, short_fingerprint
from m2mc.ui.dialogs import CreateGroupDialog
from m2mc.ui.memory_backend import sim_member
from m2mc.ui.member_list import DUPLICATE_MARK


def test_the_create_dialog_meters_strength_and_refuses_a_common_password(qtbot, backend):
    dialog = CreateGroupDialog(backend)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.desc_edit.setText("Board room")
    dialog.private_check.setChecked(True)
    assert dialog.strength.isVisible()
    qtbot.keyClicks(dialog.passphrase_edit, "Password1!")
    assert dialog.strength.bar.value() == 1 and "very weak" in dialog.strength.label.text()
    dialog.confirm_edit.setText("Password1!")
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    assert dialog.error_label.text().startswith("This passphrase is too easy to guess")
    assert dialog.created_gid is None and backend.manager.groups() == []
    strong = "copper kettle midnight orchard"
    dialog.passphrase_edit.setText(strong)
    assert dialog.strength.bar.value() >= 3 and "weak" not in dialog.strength.label.text()
    dialog.confirm_edit.setText(strong)
    dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: dialog.created_gid is not None)
    assert backend.manager.group(dialog.created_gid).private


def test_members_show_fingerprints_and_a_shared_name_is_marked(qtbot, window, backend):
    impostor = sim_member("Ann", seed="impostor")
    me = Member(backend.pid, "Me")
    backend.manager.inject_group("Lunch", members=(ANN, BOB, CAT, impostor, me), joined=True, notify=False)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.members_pane.member_list.count() >= 6)
    # Each member row starts with its presence mark ("○ Bob"); compare what follows it.
    rows = {window.members_pane.member_list.item(i).text().split(" ", 1)[-1]: window.members_pane.member_list.item(i).toolTip()
            for i in range(window.members_pane.member_list.count())}
    marked = [text for text in rows if text.startswith(DUPLICATE_MARK)]
    assert len(marked) == 2 and all("Ann" in text for text in marked)
    assert any(short_fingerprint(ANN.pid)[:9] in text for text in marked)
    assert any(short_fingerprint(impostor.pid)[:9] in text for text in marked)
    assert f"key fingerprint {short_fingerprint(BOB.pid)}" in rows["Bob"]
    assert "More than one member" in next(tip for text, tip in rows.items() if text in marked)


def test_a_group_seen_only_in_zeroconf_is_checking_and_not_joinable(qtbot, window, backend):
    window.start()
    view = backend.manager.inject_group("Board (open!)", members=(ANN,), verified=False)
    discovery = window.discovery
    qtbot.waitUntil(lambda: discovery.model.rowCount() == 1)
    assert discovery.model.index(0, 2).data() == "checking…"
    assert discovery.select_gid(view.gid) and not discovery.join_button.isEnabled()
    backend.manager.pass_time(FETCH_INTERVAL + 1)  # this peer fetches the signed descriptor, and checks it
    qtbot.waitUntil(lambda: discovery.model.index(0, 2).data() == "open")
    discovery.select_gid(view.gid)
    assert discovery.join_button.isEnabled()
    assert short_fingerprint(ANN.pid) in discovery.model.index(0, 0).data(Qt.ItemDataRole.ToolTipRole)
