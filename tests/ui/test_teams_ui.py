"""Roles and removal in the app (issue 44): the members pane shows roles, the owner makes an admin and
removes a member from the pane's menu (a right click, as the window system delivers it), the removal
asks first and says what it does to a private group, and the conversation says what happened."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from conftest import ANN, BOB, CAT, lunch_conversation, save_screenshot
from m2mc.middleware.types import Member
from m2mc.ui.member_list import MemberPidRole
from m2mc.ui.notices import is_notice
from test_direct_messages import click_action, right_click_menu


def _row(members, pid):
    return next(members.item(i) for i in range(members.count()) if members.item(i).data(MemberPidRole) == pid)


def _texts(members):
    return [members.item(i).text() for i in range(members.count())]


def _menu_for(qtbot, window, pid):
    members = window.members_pane.member_list
    return right_click_menu(qtbot, members.viewport(), members.visualItemRect(_row(members, pid)).center())


def test_the_owner_makes_an_admin_and_removes_a_member_with_a_confirmation(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Team room", members=(me, ANN, BOB, CAT), joined=True, private=True, creator=me,
                                 history=lunch_conversation("")[:2])
    backend.manager.pass_time(31)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == 2)
    window.status_controller.fill_members()
    members = window.members_pane.member_list
    assert any(text.endswith("Dana (you)  · owner") for text in _texts(members))

    menu = _menu_for(qtbot, window, BOB.pid)
    assert [a.text() for a in menu.actions()] == ["Message Bob…", "Make admin", "Remove from group…"]
    click_action(qtbot, menu, "Make admin")
    qtbot.waitUntil(lambda: "admin" in _row(window.members_pane.member_list, BOB.pid).text())
    qtbot.waitUntil(lambda: any(is_notice(m) and "made Bob an admin" in m.text for m in
                                window.current.notices))
    assert backend.manager.peer(ANN).group(window.current.gid).roles[BOB.pid] == "admin"

    seen = {}

    def answer_the_question():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(50, answer_the_question)
            return
        seen["text"] = box.text()
        remove = next(b for b in box.buttons() if b.text() == "&Remove")
        qtbot.mouseClick(remove, Qt.MouseButton.LeftButton)

    def answer_delete():
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(50, answer_delete)
            return
        seen["delete"] = box.text()
        qtbot.mouseClick(next(b for b in box.buttons() if b.text() == "Delete"), Qt.MouseButton.LeftButton)

    menu = _menu_for(qtbot, window, CAT.pid)
    QTimer.singleShot(50, answer_the_question)
    click_action(qtbot, menu, "Remove from group…")
    qtbot.waitUntil(lambda: "Removed (1)" in _texts(window.members_pane.member_list))
    assert "new key that Cat does not get" in seen["text"] and "keeps the messages" in seen["text"]
    assert "Cat — removed" in _texts(window.members_pane.member_list)
    qtbot.waitUntil(lambda: any(is_notice(m) and m.text == "removed Cat from the group" for m in
                                window.current.notices))
    cat_core = backend.manager.peer(CAT)
    assert window.current.gid not in cat_core.joined  # Cat's own peer took the removal
    # Moderation: the owner removes Ann's message for everyone; all see who removed it.
    (first,) = [node.message for node in window.current.tree.arrival if node.message.text == "Did you visit Delhi?"]
    menu = window.message_menu(first)
    action = next(a for a in menu.actions() if a.text() == "Remove for everyone…")
    QTimer.singleShot(50, answer_delete)
    action.trigger()
    gid = window.current.gid
    qtbot.waitUntil(lambda: any(m.removed_by == backend.pid for m in backend.manager.peer(BOB).history(gid)))
    qtbot.waitUntil(lambda: any(node.message.removed_by == backend.pid for node in window.current.tree.arrival))
    assert "Dana's message" not in seen.get("delete", "") and "Ann's message" in seen["delete"]
    # Bob, an admin, sees no role actions for the owner; a plain member sees none at all.
    assert backend.manager.peer(BOB).group(window.current.gid).roles[backend.pid] == "owner"
    # The owner's setting, from the Conversation menu: only admins pin and change the topic.
    window.team_controller.update_actions()
    action = window.team_controller.admins_only_action
    assert action.isEnabled() and not action.isChecked()
    action.trigger()
    qtbot.waitUntil(lambda: backend.manager.peer(ANN).group(gid).admins_only)
    window.members_pane.member_list.clearSelection()
    window.resize(1100, 600)
    qtbot.wait(300)
    assert save_screenshot(window, "teams-members.png").exists()


def test_a_plain_member_is_offered_no_role_actions_and_the_removed_peer_is_told(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    view = backend.manager.inject_group("Team room", members=(ANN, BOB, me), joined=True, private=True, creator=ANN,
                                        history=lunch_conversation("")[:1])
    backend.manager.pass_time(31)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == 1)
    window.status_controller.fill_members()
    menu = _menu_for(qtbot, window, BOB.pid)
    assert [a.text() for a in menu.actions()] == ["Message Bob…"]
    menu.close()
    lan = backend.manager.lan
    lan.run(backend.manager.peer(ANN), lambda core: core.remove_member(view.gid, backend.pid, lan.now))
    backend.manager.pass_time(2)
    qtbot.waitUntil(lambda: any(is_notice(m) and m.text.startswith("removed you from Team room")
                                for m in window.current.notices))
    row = next(m for m in window.current.notices if is_notice(m) and m.text.startswith("removed you"))
    assert row.sender_name == "Ann"
    qtbot.waitUntil(lambda: not window.conversation.compose.isEnabled())  # nothing more can be sent there
    assert "removed from this group" in window.conversation.compose.placeholderText() and not window.conversation.compose_box.send_button.isEnabled()
    window.team_controller.update_actions()
    assert not window.team_controller.admins_only_action.isEnabled()  # only the owner's
    window.resize(1100, 600)
    qtbot.wait(300)
    assert save_screenshot(window, "teams-removed.png").exists()
