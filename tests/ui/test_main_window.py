"""The main and discovery windows over the in-memory backend (no sockets): reply flow, unread, filter, export."""

import json

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialogButtonBox, QWidget

from conftest import ANN, BOB, CAT, lunch_conversation, message, save_screenshot
from m2mc.middleware.events import SyncProgress
from m2mc.middleware.types import Member
from m2mc.ui.controllers.compose import ComposeView
from m2mc.ui.controllers.direct import DirectView
from m2mc.ui.controllers.joins import JoinsView
from m2mc.ui.controllers.status import StatusView
from m2mc.ui.dialogs import CreateGroupDialog, JoinDialog
from m2mc.ui.memory_backend import sim_member
from m2mc.ui.message_model import MessageRole

EVE = sim_member("Eve")


def open_lunch(qtbot, window, backend, history=6):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                 left=(EVE,), history=lunch_conversation("")[:history])
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == history)
    return window.current


def test_reply_flow_select_type_enter_sends_with_that_parent(qtbot, window, backend):
    session = open_lunch(qtbot, window, backend)
    talk = lunch_conversation(session.gid)
    assert window.conversation.select_message(talk[3].mid)
    assert not window.conversation.compose_box.reply_banner.isVisible()  # selecting is reading, not answering
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert window.conversation.compose_box.reply_banner.isVisible()
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying to Cat: No, not yet.")
    window.conversation.compose.setFocus()
    qtbot.keyClicks(window.conversation.compose, "Try December")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(window.conversation.compose, "or January")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(session.tree) == 7)
    assert backend.manager.sent == [(session.gid, "Try December\nor January", talk[3].mid)]
    assert window.conversation.compose.toPlainText() == ""
    mine = session.tree_model.index_for((backend.pid, 1))
    assert mine.parent().data(MessageRole).mid == talk[3].mid
    assert window.conversation.tree_view.isExpanded(mine.parent())
    assert not session.tree.unread  # own messages are never new

    # ✕ starts a new thread: the next message has no parent.
    qtbot.mouseClick(window.conversation.compose_box.reply_banner.close_button, Qt.MouseButton.LeftButton)
    assert not window.conversation.compose_box.reply_banner.isVisible()
    qtbot.keyClicks(window.conversation.compose, "New topic")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Enter)
    qtbot.waitUntil(lambda: len(backend.manager.sent) == 2)
    assert backend.manager.sent[-1] == (session.gid, "New topic", None)


def test_send_error_is_shown_and_text_kept(qtbot, window, backend):
    open_lunch(qtbot, window, backend)
    window.conversation.compose.setPlainText("x" * 8001)
    window.compose_controller.send_message()
    qtbot.waitUntil(window.conversation.compose_box.compose_error.isVisible)
    assert "too long" in window.conversation.compose_box.compose_error.text()
    assert len(window.conversation.compose.toPlainText()) == 8001


def test_new_messages_are_marked_and_next_unread_walks_them(qtbot, window, backend):
    session = open_lunch(qtbot, window, backend)
    talk = lunch_conversation(session.gid)
    backend.manager.inject_messages(session.gid, talk[6:])
    qtbot.waitUntil(lambda: len(session.tree) == 8)
    assert session.tree.unread == {talk[6].mid, talk[7].mid}
    assert window.groups_pane.item(session.gid).data(Qt.ItemDataRole.UserRole + 11) == 2  # the groups pane badge
    assert window.windowTitle().startswith("(2)")
    assert window.conversation.tree_view.isExpanded(session.tree_model.index_for(talk[6].mid))  # path to the new reply
    save_screenshot(window, "main-window.png")
    window.session_controller.next_unread()
    assert window.conversation.selected_message().mid == talk[6].mid
    assert session.tree.unread == {talk[7].mid}
    window.menus.next_unread_action.trigger()
    assert window.conversation.selected_message().mid == talk[7].mid and not session.tree.unread
    assert window.compose_controller.reply_target is None
    assert window.groups_pane.item(session.gid).data(Qt.ItemDataRole.UserRole + 11) == 0


def test_time_ordered_view_and_filter(qtbot, window, backend):
    session = open_lunch(qtbot, window, backend, history=8)
    window.menus.time_action.trigger()
    assert window.conversation.stack.currentWidget() is window.conversation.timeline_view
    model = window.conversation.timeline_view.model()
    assert [model.index(r, 0).data(MessageRole).text for r in range(model.rowCount())] == \
        [m.text for m in lunch_conversation(session.gid)]
    save_screenshot(window, "main-window-time-ordered.png")
    window.menus.time_action.trigger()
    assert window.conversation.stack.currentWidget() is window.conversation.tree_view

    window.menus.find_action.trigger()
    qtbot.keyClicks(window.conversation.filter_edit, "december")
    proxy = window.conversation.tree_view.model()
    assert proxy is window.conversation.tree_proxy
    # The matches and the thread above them stay; other threads go.
    assert proxy.rowCount() == 1
    top = proxy.index(0, 0)
    assert top.data(MessageRole).text == "Did you visit Chennai?"
    window.conversation.filter_edit.clear()
    assert window.conversation.tree_view.model() is session.tree_model


def test_members_pane_and_status_bar(qtbot, window, backend):
    session = open_lunch(qtbot, window, backend)
    names = [window.members_pane.member_list.item(i).text() for i in range(window.members_pane.member_list.count())]
    assert names == ["In the group (4)", "● Ann  · owner", "● Bob", "● Cat", "● Dana (you)", "Left (1)",
                     "Eve — left the group"]
    assert window.status_pane.peers_label.text() == "4 peers seen"  # Eve left the group, not the network
    assert "127.0.0.1" in window.status_pane.address_label.text()
    # Two replies to a message this peer missed: held until it comes (the LAN's timers stand still).
    missed = message(session.gid, BOB, 2, "Whose turn is it to book?")
    backend.manager.inject_messages(session.gid, [missed], missed=True)
    backend.manager.inject_messages(session.gid, [message(session.gid, ANN, 4, "Mine", missed.mid),
                                                  message(session.gid, CAT, 3, "Not mine", missed.mid)])
    qtbot.waitUntil(lambda: "2 replies waiting" in window.status_pane.pending_label.text(), timeout=3000)
    backend.post(SyncProgress(session.gid, 3, 10))
    qtbot.waitUntil(window.status_pane.sync_bar.isVisible)
    assert (window.status_pane.sync_bar.value(), window.status_pane.sync_bar.maximum()) == (3, 10)
    backend.post(SyncProgress(session.gid, 10, 10))
    qtbot.waitUntil(lambda: not window.status_pane.sync_bar.isVisible())
    backend.manager.inject_member(session.gid, CAT, joined=False)
    qtbot.waitUntil(lambda: "Left (2)" in [window.members_pane.member_list.item(i).text() for i in range(window.members_pane.member_list.count())])


def test_export_writes_json_lines(qtbot, window, backend, tmp_path):
    open_lunch(qtbot, window, backend)
    out = tmp_path / "chat.jsonl"
    window.export.export_to(str(out))
    qtbot.waitUntil(out.exists)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text"] for r in rows] == [m.text for m in lunch_conversation("")[:6]]
    assert rows[2]["parent"] == f"{ANN.pid}:1" and rows[0]["group_desc"] == "Travel & lunch"


def test_what_needs_a_group_is_on_only_while_one_is_shown(qtbot, window, backend):
    """Showing a group (ui.controllers.shown_group) turns on Leave, Export and the rest; no group, off."""
    menus = window.menus
    needs_a_group = (menus.leave_action, menus.export_action, menus.invite_action, menus.send_action)
    assert not any(action.isEnabled() for action in needs_a_group)
    open_lunch(qtbot, window, backend)
    assert all(action.isEnabled() for action in needs_a_group)
    window.show_session(None)
    assert window.current is None and not any(action.isEnabled() for action in needs_a_group)


def test_the_window_names_a_panes_widget_only_for_a_controllers_view(window):
    """Tests, app/screenshots.py and the benches reach a widget or an action through the pane or the menu
    bar that owns it (window.conversation.tree_view, window.menus.leave_action); the window holds one under
    a name of its own only where a controller's view protocol asks it for that name."""
    asked = set()
    for protocol in (ComposeView, JoinsView, StatusView, DirectView):
        asked |= set(protocol.__annotations__) | {name for name, value in vars(protocol).items()
                                                  if isinstance(value, property)}
    owners = (window.conversation, window.conversation.compose_box, window.groups_pane, window.members_pane,
              window.threads_pane, window.direct_pane, window.menus, window.status_pane)
    owned = {id(value) for owner in owners for value in vars(owner).values() if isinstance(value, (QWidget, QAction))}
    again = {name for name, value in vars(window).items() if id(value) in owned}
    assert again and again <= asked, sorted(again - asked)


def test_discovery_lists_groups_and_joins(qtbot, window, backend):
    window.start()
    board = backend.manager.inject_group("Board games night", members=(BOB, CAT)).gid
    backend.manager.inject_group("Secret santa", members=(ANN,), private=True)
    discovery = window.discovery
    qtbot.waitUntil(lambda: discovery.model.rowCount() == 2)
    discovery.resize(640, 300)
    assert discovery.select_gid(board)
    assert discovery.join_button.isEnabled()
    save_screenshot(discovery, "discovery-window.png")
    qtbot.mouseClick(discovery.join_button, Qt.MouseButton.LeftButton)
    confirm = window.join_controller.join_dialog  # what is verified of the group, then Join
    assert confirm is not None and confirm.isVisible() and confirm.summary.desc_label.text() == "“Board games night”"
    qtbot.mouseClick(confirm.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: board in window.session_controller.sessions and window.current is window.session_controller.sessions[board])
    qtbot.waitUntil(lambda: discovery.model.view_for(board).joined)
    assert not discovery.join_button.isEnabled()
    assert discovery.model.index(1, 2).data() == "private"


def test_create_and_join_dialogs_validate(qtbot, backend):
    dialog = CreateGroupDialog(backend)
    qtbot.addWidget(dialog)
    ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
    ok.click()
    assert dialog.error_label.text() == "A group needs a description."
    dialog.desc_edit.setText("x" * 201)
    ok.click()
    assert "too long" in dialog.error_label.text()
    dialog.desc_edit.setText("Friday lunch")
    ok.click()
    qtbot.waitUntil(lambda: dialog.created_gid is not None)
    assert backend.manager.group(dialog.created_gid).desc == "Friday lunch"

    join = JoinDialog(backend)
    qtbot.addWidget(join)
    join.gid_edit.setText("no-such-group")
    join.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    qtbot.waitUntil(lambda: join.error_label.text().startswith("No group with that id is known here."))
    assert join.joined_gid is None
