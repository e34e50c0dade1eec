"""Direct messages in the real window (issue 29), over the in-memory backend (the middleware's own direct
channel, sealed, acknowledged and SES-ordered between cores): a conversation opened from the members pane
with a right click, written to with keys, its outgoing marks following the statuses the middleware
tells; a message arriving makes a conversation with an unread badge and a notification, and reading it
clears both and sends the receipt; a message held past SES's limit shows "late"; the read-receipt switch
is kept and told."""

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMenu

from conftest import ANN, BOB, activate, lunch_conversation, save_screenshot
from conftest import message as group_message
from m2mc.middleware.events import DirectStatusChanged
from m2mc.middleware.presence import OFFLINE_AFTER
from m2mc.middleware.types import Member, key_fingerprint
from m2mc.ui.controllers.direct import READ_RECEIPTS_KEY, SEEN_DELAY_MS
from m2mc.ui.direct_pane import QUEUED_FALLBACK, DirectList, PeerRole
from m2mc.ui.main_window import MainWindow
from m2mc.ui.member_list import MemberPidRole
from m2mc.ui.message_model import MessageRole
from m2mc.ui.widgets import UnreadCountRole


def open_group(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Build", members=(ANN, BOB, me), joined=True, history=lunch_conversation("")[:2])
    backend.manager.pass_time(31)  # a heartbeat from each: they are online, and direct messages go
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == 2)
    window.status_controller.fill_members()
    return window.current


def go_offline(backend, member):
    """``member``'s app closes, and long enough ago for this peer to count it offline."""
    backend.manager.set_online(member, False)
    backend.manager.pass_time(OFFLINE_AFTER + 1)


def a_late_message(manager):
    """Bob writes to us while we hear nothing, then tells Ann, who writes to us: hers comes after his in
    causal order, and his app is closed before it can send his again.  SES holds hers for its limit, then
    delivers it anyway: late."""
    lan, me = manager.lan, manager.pid
    bob, ann = manager.peer(BOB), manager.peer(ANN)
    lan.down.add(me)
    lan.run(bob, lambda core: core.send_direct(me, "the build is broken", None, lan.wall()))
    lan.run(bob, lambda core: core.send_direct(ANN.pid, "I told Dana", None, lan.wall()))
    lan.settle(2)
    mid = lan.run(ann, lambda core: core.send_direct(me, "did you see Bob's note?", None, lan.wall()))
    lan.down.add(BOB.pid)
    lan.down.discard(me)
    manager.pass_time(10)
    assert manager.core.direct.held() == 1
    manager.pass_time(125)  # past SES's hold limit (120 s)
    return mid


def right_click_menu(qtbot, widget, pos):
    """A right click as the window system delivers it (through the window, so Qt makes the context
    menu event); the menu that pops up."""
    global_pos = widget.mapToGlobal(pos)
    window = widget.window().windowHandle()
    QTest.mouseClick(window, Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier,
                     widget.window().mapFromGlobal(global_pos))
    qtbot.waitUntil(lambda: isinstance(QApplication.activePopupWidget(), QMenu))
    return QApplication.activePopupWidget()


def click_action(qtbot, menu, text):
    action = next(a for a in menu.actions() if a.text() == text)
    qtbot.mouseClick(menu, Qt.MouseButton.LeftButton, pos=menu.actionGeometry(action).center())


def row_of(view, mid):
    model = view.model()
    return model.index_for(mid)


def marks_of(window, mid):
    """What the row says to a screen reader, and the mark its delegate draws."""
    view = window.direct_pane.view
    index = row_of(view, mid)
    found = window.direct_pane.delegate.mark_rect(view.visualRect(index), index)
    return index.data(Qt.ItemDataRole.AccessibleTextRole), found[1] if found else ""


def test_message_a_member_from_the_members_pane_and_see_the_marks_follow_the_statuses(qtbot, window, backend):
    open_group(qtbot, window, backend)
    go_offline(backend, ANN)  # what we write waits for her
    members = window.members_pane.member_list
    ann_row = next(members.item(i) for i in range(members.count()) if members.item(i).data(MemberPidRole) == ANN.pid)
    menu = right_click_menu(qtbot, members.viewport(), members.visualItemRect(ann_row).center())
    click_action(qtbot, menu, "Message Ann…")

    pane = window.direct_pane
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is pane)
    assert window.current is None  # no group is shown: no group action acts behind the conversation
    assert not window.pane_layout.side_splitter.isVisible()  # nor the threads and members of one
    assert pane.compose.hasFocus()
    assert "Ann" in pane.title_label.text() and pane.title_label.text().startswith("○")  # offline
    assert key_fingerprint(ANN.pid) in pane.fingerprint_label.text()
    assert window.groups_pane.direct_list.currentItem().data(PeerRole) == ANN.pid

    qtbot.keyClicks(pane.compose, "the build is broken")
    qtbot.keyClick(pane.compose, Qt.Key.Key_Return)
    first = (backend.pid, 1)
    qtbot.waitUntil(lambda: row_of(pane.view, first).isValid())
    assert pane.compose.toPlainText() == ""
    text, mark = marks_of(window, first)
    assert mark in ("⏱", QUEUED_FALLBACK) and "queued: kept here until Ann is online" in text

    # The statuses come as the middleware's events, through the bridge, as a real peer's do.
    backend.post(DirectStatusChanged(ANN.pid, first, "sent"))
    qtbot.waitUntil(lambda: marks_of(window, first)[1] == "✓")
    assert "sent, not yet acknowledged" in marks_of(window, first)[0]

    backend.manager.set_online(ANN, True)  # she is back: sent, then delivered
    qtbot.waitUntil(lambda: marks_of(window, first)[1] == "✓✓")
    assert "delivered to Ann" in marks_of(window, first)[0]

    backend.manager.inject_direct_read(ANN, first)
    qtbot.waitUntil(lambda: "read by Ann" in marks_of(window, first)[0])
    assert pane.delegate.marks.status[first] == "read"

    # A reply within the conversation, by a click on the row's Reply button: it goes under its parent.
    view = pane.view
    index = row_of(view, first)
    reply_at = pane.delegate._geometry(view.visualRect(index), index)["reply"].center()
    qtbot.mouseMove(view.viewport(), reply_at)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=reply_at)
    assert pane.reply_banner.isVisible() and "the build is broken" in pane.reply_banner.label.text()
    qtbot.keyClicks(pane.compose, "I told Bob too")
    qtbot.keyClick(pane.compose, Qt.Key.Key_Return)
    second = (backend.pid, 2)
    qtbot.waitUntil(lambda: row_of(view, second).isValid())
    assert row_of(view, second).parent().data(MessageRole).mid == first
    assert marks_of(window, second)[1] == "✓✓"  # she is online: delivered at once, not read yet
    assert "delivered to Ann" in marks_of(window, second)[0]
    assert not pane.reply_banner.isVisible()

    backend.manager.inject_direct(ANN, "Fixed it, thanks", parent=second)
    qtbot.waitUntil(lambda: row_of(view, (ANN.pid, 1)).isValid())
    qtbot.waitUntil(lambda: pane.title_label.text().startswith("●"))  # online, as the middleware now says
    go_offline(backend, ANN)
    qtbot.keyClicks(pane.compose, "Lunch at one?")
    qtbot.keyClick(pane.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: row_of(view, (backend.pid, 3)).isValid())
    assert "queued" in marks_of(window, (backend.pid, 3))[0]
    view.clearSelection()
    qtbot.mouseMove(pane.compose)
    window.resize(1000, 560)
    qtbot.wait(SEEN_DELAY_MS + 300)
    path = save_screenshot(window, "direct-messages.png")
    assert path.exists()


def test_enter_on_a_member_opens_the_conversation_so_the_keyboard_alone_writes_to_them(qtbot, window, backend):
    open_group(qtbot, window, backend)
    go_offline(backend, ANN)
    activate(qtbot, window)
    window.conversation.compose.setFocus()
    members = window.members_pane.member_list
    for _ in range(12):  # Tab from the compose box to the members pane, as a person would
        if QApplication.focusWidget() is members:
            break
        QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
    assert QApplication.focusWidget() is members
    while members.currentItem() is None or members.currentItem().data(MemberPidRole) != ANN.pid:
        before = members.currentRow()
        QTest.keyClick(members, Qt.Key.Key_Down)
        assert members.currentRow() != before, "Ann's row is not reached with the arrow keys"
    QTest.keyClick(members, Qt.Key.Key_Return)
    qtbot.wait(100)
    save_screenshot(window, "members-enter-opens-direct.png")
    pane = window.direct_pane
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is pane)
    assert "Ann" in pane.title_label.text() and pane.compose.hasFocus()
    qtbot.keyClicks(QApplication.focusWidget(), "are you there?")
    QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: row_of(pane.view, (backend.pid, 1)).isValid())
    assert "queued" in marks_of(window, (backend.pid, 1))[0]


def test_a_new_conversation_shows_the_presence_the_members_pane_shows_and_follows_it(qtbot, window, backend):
    """Before its first message the middleware lists no conversation: its presence comes from the groups."""
    open_group(qtbot, window, backend)  # Ann's beacon heard: online
    window.direct_controller.open_with(ANN.pid, "Ann")
    pane = window.direct_pane
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is pane)
    qtbot.wait(200)
    save_screenshot(window, "direct-new-online.png")
    qtbot.waitUntil(lambda: pane.title_label.text() == "● Ann")
    go_offline(backend, ANN)
    window.direct_controller.refresh()  # the presence poll, sooner
    qtbot.waitUntil(lambda: pane.title_label.text() == "○ Ann")


def test_a_new_conversation_says_who_can_read_it_and_that_an_offline_peer_gets_it_later(qtbot, window, backend):
    open_group(qtbot, window, backend)
    go_offline(backend, ANN)
    window.direct_controller.open_with(ANN.pid, "Ann")
    pane = window.direct_pane
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is pane and pane.title_label.text() == "○ Ann")
    qtbot.wait(100)  # the side panes fold away
    save_screenshot(window, "direct-empty-offline.png")
    hint = pane.view.empty_hint
    assert "only the two of you" in hint and "Ann is offline" in hint and "when Ann is back" in hint
    image = pane.view.viewport().grab().toImage()
    background = image.pixelColor(2, 2)
    middle = image.height() // 2
    assert any(image.pixelColor(x, y) != background for x in range(0, image.width(), 2)
               for y in range(middle - 30, middle + 30)), "the hint is drawn in the empty conversation"

    backend.manager.set_online(ANN, True)  # she is back: the hint no longer says she is away
    backend.manager.pass_time(31)  # her next beacon
    window.direct_controller.refresh()  # the presence poll, sooner
    qtbot.waitUntil(lambda: pane.title_label.text() == "● Ann")
    assert "offline" not in pane.view.empty_hint
    qtbot.keyClicks(pane.compose, "hi")
    qtbot.keyClick(pane.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: row_of(pane.view, (backend.pid, 1)).isValid())  # rows, and no hint over them


def test_ctrl_r_replies_to_the_selected_direct_message_as_in_a_group(qtbot, window, backend):
    open_group(qtbot, window, backend)
    backend.manager.inject_direct(ANN, "lunch today?")
    backend.manager.inject_direct(ANN, "or tomorrow?")
    pane = window.direct_pane
    qtbot.waitUntil(lambda: window.groups_pane.direct_list.count() == 1)
    window.direct_controller.open_with(ANN.pid, "Ann")
    qtbot.waitUntil(lambda: row_of(pane.view, (ANN.pid, 2)).isValid())
    activate(qtbot, window)
    assert QApplication.focusWidget() is pane.compose
    QTest.keyClick(pane.compose, Qt.Key.Key_Backtab)  # Shift+Tab: up to the conversation
    assert QApplication.focusWidget() is pane.view
    while pane.view.currentIndex().data(MessageRole) is None or \
            pane.view.currentIndex().data(MessageRole).mid != (ANN.pid, 1):
        before = pane.view.currentIndex()
        QTest.keyClick(pane.view, Qt.Key.Key_Up)
        assert pane.view.currentIndex() != before or before.data(MessageRole) is None
    QTest.keyClick(pane.view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)  # Reply to selected
    qtbot.wait(50)
    save_screenshot(window, "direct-ctrl-r.png")
    assert pane.reply_banner.isVisible() and pane.reply_banner.label.text() == "Replying to Ann: lunch today?"
    assert QApplication.focusWidget() is pane.compose
    qtbot.keyClicks(pane.compose, "today works")
    QTest.keyClick(pane.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: row_of(pane.view, (backend.pid, 1)).isValid())
    assert row_of(pane.view, (backend.pid, 1)).parent().data(MessageRole).mid == (ANN.pid, 1)


def test_an_incoming_message_lists_the_conversation_unread_and_notifies_and_reading_clears_it(
        qtbot, window, backend, monkeypatch):
    open_group(qtbot, window, backend)
    notes = []
    monkeypatch.setattr(window, "notify", lambda title, text, **_how: notes.append((title, text)))
    mid = backend.manager.inject_direct(ANN, "did you see the build?")
    direct = window.groups_pane.direct_list
    qtbot.waitUntil(lambda: direct.count() == 1)
    item = direct.item(0)
    qtbot.waitUntil(lambda: item.data(UnreadCountRole) == 1)
    assert item.text() == "● Ann" and "1 unread" in item.data(Qt.ItemDataRole.AccessibleTextRole)
    assert notes == [("Ann (direct message)", "did you see the build?")]
    assert window.windowTitle() == "(1) M2MC chat"  # counted with the groups' unread
    assert window.centre_stack.currentIndex() == 0  # the group stays on show

    qtbot.mouseClick(direct.viewport(), Qt.MouseButton.LeftButton, pos=direct.visualItemRect(item).center())
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    qtbot.waitUntil(lambda: item.data(UnreadCountRole) == 0, timeout=SEEN_DELAY_MS + 3000)
    assert window.windowTitle() == "M2MC chat"
    ann = backend.manager.peer(ANN)
    qtbot.waitUntil(lambda: ann.direct_history(backend.pid)[-1].status == "read")  # her receipt came
    assert ann.direct_history(backend.pid)[-1].mid == mid

    # A message while the conversation is read in the active window: no notification, read soon.
    second = backend.manager.inject_direct(ANN, "and the tests?")
    qtbot.waitUntil(lambda: ann.direct_history(backend.pid)[-1].status == "read", timeout=SEEN_DELAY_MS + 3000)
    assert ann.direct_history(backend.pid)[-1].mid == second and len(notes) == 1

    # One that waited for a message that never came is shown, and says so.
    late = a_late_message(backend.manager)
    qtbot.waitUntil(lambda: row_of(window.direct_pane.view, late).isValid())
    text, mark = marks_of(window, late)
    assert mark == "late" and "late: it waited for an earlier message" in text

    # Reply chosen, then Esc: the target is forgotten and the conversation's compose box keeps the focus.
    window.direct_controller.reply_to(mid)
    assert window.direct_pane.reply_banner.isVisible()
    qtbot.keyClick(window.direct_pane.compose, Qt.Key.Key_Escape)
    assert not window.direct_pane.reply_banner.isVisible() and window.direct_pane.compose.hasFocus()

    # Notifications for direct messages can be switched off (View menu), and stay off.
    window.direct_controller.notify_action.trigger()
    window.groups_pane.group_list.setCurrentRow(0)
    backend.manager.inject_direct(ANN, "quiet now?")
    qtbot.waitUntil(lambda: item.data(UnreadCountRole) == 1)
    assert len(notes) == 1 and window.settings["notify/direct"] == "false"
    window.groups_pane.direct_list.setCurrentItem(item)

    # Back to the group by a click: the conversation leaves the centre, its row is unselected.
    groups = window.groups_pane.group_list
    qtbot.mouseClick(groups.viewport(), Qt.MouseButton.LeftButton, pos=groups.visualItemRect(groups.item(0)).center())
    qtbot.waitUntil(lambda: window.current is not None)
    assert window.centre_stack.currentIndex() == 0 and direct.currentItem() is None
    assert window.pane_layout.side_splitter.isVisible()


def test_message_the_author_of_a_group_message_from_its_menu(qtbot, window, backend):
    session = open_group(qtbot, window, backend)
    theirs = session.tree.message(lunch_conversation(session.gid)[0].mid)
    menu = window.message_menu(theirs)
    action = next(a for a in menu.actions() if a.text() == "Message Ann…")
    action.trigger()
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    assert window.groups_pane.direct_list.currentItem().data(PeerRole) == ANN.pid

    window.direct_controller.open_with(BOB.pid, "Bob")
    assert window.groups_pane.direct_list.count() == 2 and "Bob" in window.direct_pane.title_label.text()


def test_no_message_action_for_oneself_and_a_refusal_is_shown(qtbot, window, backend):
    open_group(qtbot, window, backend)
    members = window.members_pane.member_list
    me = next(members.item(i) for i in range(members.count()) if members.item(i).data(MemberPidRole) == backend.pid)
    assert window.direct_controller.member_menu(me, members) is None
    stranger = "ab" * 16  # nobody we share a group with: no key known
    window.direct_controller.open_with(stranger, "Stranger")
    pane = window.direct_pane
    qtbot.keyClicks(pane.compose, "hello?")
    qtbot.keyClick(pane.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(pane.compose_error.isVisible)
    assert "share a group with them first" in pane.compose_error.text()
    assert pane.compose.toPlainText() == "hello?"


def test_the_read_receipts_switch_is_kept_and_told_to_the_middleware(qtbot, backend):
    settings: dict = {}
    window = MainWindow(backend, settings=settings)
    qtbot.addWidget(window)
    action = window.direct_controller.read_receipts_action
    assert action.isChecked() and action in window.menuBar().actions()[2].menu().actions()  # View menu
    action.trigger()
    assert settings[READ_RECEIPTS_KEY] == "false" and backend.manager.core.direct.receipts is False

    backend.manager.set_read_receipts(True)  # as if the store had lost it
    again = MainWindow(backend, settings=settings)
    qtbot.addWidget(again)
    assert not again.direct_controller.read_receipts_action.isChecked()
    again.start()
    qtbot.waitUntil(lambda: backend.manager.core.direct.receipts is False)


def test_a_conversations_model_passes_the_model_tester_as_replies_and_statuses_arrive(qtmodeltester, qapp):
    from m2mc.middleware.types import DirectMessage
    from m2mc.ui.direct_api import Marks, as_chat_message
    from m2mc.ui.direct_pane import DirectTreeModel
    from m2mc.ui.message_tree import MessageTree

    me = "d" * 32
    tree, marks = MessageTree(me), Marks()
    model = DirectTreeModel(tree, marks, lambda: "Ann")
    qtmodeltester.check(model, force_py=False)
    talk = [DirectMessage(ANN.pid, (me, 1), None, "Dana", "the build is broken", 1, 1, True, "queued", 1),
            DirectMessage(ANN.pid, (ANN.pid, 1), (me, 1), "Ann", "on it", 2, 2, False, "received", 2),
            DirectMessage(ANN.pid, (me, 2), (ANN.pid, 1), "Dana", "thanks", 3, 3, True, "sent", 3)]
    for message in talk:
        marks.take(message)
    tree.add_messages([as_chat_message(m) for m in talk[:1]])
    tree.add_messages([as_chat_message(m) for m in talk[1:]])
    assert marks.set_status((me, 1), "read") and not marks.set_status((me, 1), "read")
    model.status_changed((me, 1))
    qtmodeltester.check(model, force_py=False)
    reply = model.index_for((me, 2))
    assert reply.parent().data(MessageRole).mid == (ANN.pid, 1)
    assert reply.data(Qt.ItemDataRole.AccessibleTextRole) == "Dana: thanks (sent, not yet acknowledged)"
    assert "read by Ann" in model.index_for((me, 1)).data(Qt.ItemDataRole.ToolTipRole)


def test_an_empty_direct_messages_list_says_how_to_start_one(qtbot, window, backend):
    window.start()
    direct_list = window.findChild(DirectList, "directList")
    assert direct_list is not None and direct_list.count() == 0
    qtbot.waitExposed(direct_list)
    image = direct_list.viewport().grab().toImage()
    background = image.pixelColor(image.width() - 2, image.height() - 2)
    inked = sum(1 for x in range(0, image.width(), 2) for y in range(0, min(image.height(), 60), 2)
                if image.pixelColor(x, y) != background)
    assert inked > 20, "the hint is drawn where the list is empty"
    assert "“Message …”" in DirectList.EMPTY_HINT


def test_the_conversation_with_the_newest_message_heads_the_list(qtbot, window, backend):
    open_group(qtbot, window, backend)
    backend.manager.inject_direct(ANN, "first, from Ann")
    direct = window.groups_pane.direct_list
    qtbot.waitUntil(lambda: direct.count() == 1)
    backend.manager.inject_direct(BOB, "then Bob")
    qtbot.waitUntil(lambda: direct.count() == 2)
    qtbot.waitUntil(lambda: direct.item(0).data(PeerRole) == BOB.pid)
    direct.setCurrentItem(direct.item(1))  # Ann's open
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    backend.manager.inject_direct(ANN, "Ann again")
    qtbot.waitUntil(lambda: direct.item(0).data(PeerRole) == ANN.pid)
    assert direct.currentItem() is direct.item(0), "the open conversation stays selected as it moves"
    assert window.centre_stack.currentWidget() is window.direct_pane


def test_each_conversation_keeps_its_own_draft_across_switches_and_a_restart(qtbot, window, backend):
    open_group(qtbot, window, backend)
    backend.manager.inject_direct(ANN, "are you there?")
    backend.manager.inject_direct(BOB, "lunch?")
    direct = window.groups_pane.direct_list
    qtbot.waitUntil(lambda: direct.count() == 2)

    def open_row(pid):
        row = next(direct.item(i) for i in range(direct.count()) if direct.item(i).data(PeerRole) == pid)
        qtbot.mouseClick(direct.viewport(), Qt.MouseButton.LeftButton, pos=direct.visualItemRect(row).center())
        qtbot.waitUntil(lambda: window.direct_controller.current is not None
                        and window.direct_controller.current.peer == pid)

    compose = window.direct_pane.compose
    open_row(ANN.pid)
    qtbot.keyClicks(compose, "half a thought for Ann")
    open_row(BOB.pid)
    assert compose.toPlainText() == "", "Ann's draft must not follow into Bob's conversation"
    qtbot.keyClicks(compose, "for Bob")
    open_row(ANN.pid)
    assert compose.toPlainText() == "half a thought for Ann"
    qtbot.keyClick(compose, Qt.Key.Key_Return)  # sent: the draft goes
    qtbot.waitUntil(lambda: compose.toPlainText() == "")

    again = MainWindow(backend, settings=window.settings)  # a restart over the same settings
    qtbot.addWidget(again)
    again.show()
    again.start()
    qtbot.waitUntil(lambda: again.groups_pane.direct_list.count() == 2)
    again.direct_controller.open_with(BOB.pid, BOB.name)
    assert again.direct_pane.compose.toPlainText() == "for Bob"
    again.direct_controller.open_with(ANN.pid, ANN.name)
    assert again.direct_pane.compose.toPlainText() == ""


def test_next_unread_ctrl_u_walks_into_direct_conversations_and_back_to_groups(qtbot, window, backend):
    session = open_group(qtbot, window, backend)
    session.tree.mark_all_read()
    first = backend.manager.inject_direct(ANN, "are you at your desk?")
    second = backend.manager.inject_direct(ANN, "the build is red")
    qtbot.waitUntil(lambda: window.groups_pane.direct_list.count() == 1 and window.direct_controller.unread_total() == 2)
    activate(qtbot, window)
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_U, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    pane_view = window.direct_pane.view
    assert pane_view.currentIndex().data(MessageRole).mid == first
    qtbot.keyClick(pane_view, Qt.Key.Key_U, Qt.KeyboardModifier.ControlModifier)  # the next, in the same one
    assert pane_view.currentIndex().data(MessageRole).mid == second
    assert window.direct_controller.unread_total() == 0

    # news in the group, read from the conversation: Ctrl+U goes back to the group's message
    backend.manager.inject_messages(session.gid, [group_message(session.gid, ANN, 3, "lunch moved to 13:00")])
    qtbot.waitUntil(lambda: bool(session.tree.unread))
    qtbot.keyClick(pane_view, Qt.Key.Key_U, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.current is session and window.centre_stack.currentIndex() == 0)
    assert window.conversation.selected_message().text == "lunch moved to 13:00" and not session.tree.unread
