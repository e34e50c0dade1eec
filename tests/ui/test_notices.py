"""Topic changes and pins leave a trace in the conversation (issue 32, item 5): a centred, muted notice row
among the messages, in time order, from the store on open and live, on a real window (Xvfb) with real keys
and clicks.  A notice is not a message: not unread, not notified, no thread, not selectable, no menu,
passed over by the keyboard; its pinned message's link is followed with one click."""

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QApplication

from conftest import ANN, BOB, CAT, activate, lunch_conversation, message, save_screenshot
from m2mc.middleware.types import Member
from m2mc.ui.delegate import NOTICE_MARGIN, NOTICE_PAD
from m2mc.ui.message_model import MessageRole
from m2mc.ui.notices import is_notice


def open_with_stored_operations(qtbot, window, backend):
    """Travel & lunch, whose store holds a topic set, a pin and the topic set again, then one message."""
    me = Member(backend.pid, backend.name)
    talk = lunch_conversation("")
    gid = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True, history=talk).gid
    manager = backend.manager
    lunch = talk[6].mid  # Bob's "Lunch at the canteen at 12:30?"
    for author, seqno, kind, target, fields in ((ANN, 4, "topic", None, {"text": "Chennai in December"}),
                                                (BOB, 3, "pin", lunch, {}),
                                                (CAT, 4, "topic", None, {"text": "lunch Fridays 12:30"})):
        operation = manager.operation_message(gid, author, seqno, kind, target, **fields)
        manager.inject_messages(gid, [operation], notify=False)
    manager.inject_messages(gid, [message(gid, ANN, 5, "See you all there")], notify=False)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    return window.current, talk


def top_rows(session):
    return [(is_notice(node.message), node.message.text) for node in session.tree.roots()]


def spoken(session, mid):
    return session.tree_model.index_for(mid).data(Qt.ItemDataRole.AccessibleTextRole)


def test_stored_topic_changes_and_pins_show_as_notices_in_time_order_and_are_not_messages(qtbot, window, backend,
                                                                                          monkeypatch):
    monkeypatch.setattr(window.conversation, "mark_visible_read", lambda: None)  # what is unread stays so, however slow the run
    session, talk = open_with_stored_operations(qtbot, window, backend)
    gid = session.gid
    rows = top_rows(session)
    assert [text[:24] for _notice, text in rows] == [
        "Did you visit Delhi?", "Did you visit Chennai?", "Lunch at the canteen at ",
        "changed the topic to “Ch", f"pinned m2mc://message/{gid}"[:24], "changed the topic to “lu", "See you all there"]
    assert [notice for notice, _text in rows] == [False, False, False, True, True, True, False]
    notices = [node.message for node in session.tree.roots() if is_notice(node.message)]
    assert spoken(session, notices[0].mid) == "Ann changed the topic to “Chennai in December”"
    assert spoken(session, notices[1].mid) == "Bob pinned Bob's message “Lunch at the canteen at 12:30?”"
    assert spoken(session, notices[2].mid) == \
        "Cat changed the topic to “lunch Fridays 12:30” (it was “Chennai in December”)"
    # not messages: no thread, nothing unread, not selectable; scripts' history has none of them
    qtbot.waitUntil(lambda: session.threads.rowCount() == 4)
    see_you = session.tree.roots()[-1].message.mid
    assert session.tree.unread == {see_you} and window.windowTitle() == "(1) M2MC chat"  # the message after them
    assert not session.tree_model.index_for(notices[0].mid).flags() & Qt.ItemFlag.ItemIsSelectable
    assert [m.text for m in backend.manager.history(gid)] == [m.text for m in talk] + ["See you all there"]

    # drawn centred and muted: the pin's link reads as the conversation reads links
    view = window.conversation.tree_view
    delegate = view.itemDelegate()
    pin_index = window.conversation._view_index(notices[1].mid)
    view.scrollTo(pin_index)
    layout = delegate.body_layout(pin_index)
    assert layout.text().startswith("Bob pinned ↗ Bob: Lunch at the canteen at 12:30? (Travel & lunch) · ")
    line = layout.lineAt(0)
    assert line.naturalTextRect().left() > 40  # centred, not at the left edge
    save_screenshot(window, "notices.png")

    # the keyboard passes over the notices: Down from the last reply above goes to the message below
    activate(qtbot, window)
    window.conversation.select_message(talk[7].mid)  # "Count me in", the reply just above the notices
    view.setFocus()
    qtbot.keyClick(view, Qt.Key.Key_Down)
    assert view.currentIndex().data(MessageRole).text == "See you all there"
    qtbot.keyClick(view, Qt.Key.Key_Up)
    assert view.currentIndex().data(MessageRole).mid == talk[7].mid

    # the filter steps from message to message: F3 never stops on a notice that matches it
    qtbot.keyClicks(window.conversation.filter_edit, "lunch")
    qtbot.waitUntil(lambda: bool(window.conversation.matches()))
    assert all(not is_notice(session.tree.message(mid)) for mid in window.conversation.matches())
    window.conversation.filter_edit.clear()

    # a right click on a notice offers nothing (no Reply, Pin or React on what is not a message)
    rect = view.visualRect(window.conversation._view_index(notices[0].mid))
    window.conversation._message_menu(view, rect.center())
    assert QApplication.activePopupWidget() is None

    # one plain click on the pinned message's link opens it (a notice cannot be selected first)
    pin_index = window.conversation._view_index(notices[1].mid)
    view.scrollTo(pin_index)
    rect = view.visualRect(pin_index)
    start = len("Bob pinned ")
    x = rect.left() + NOTICE_MARGIN + int(line.cursorToX(start + 4)[0])
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton,
                     pos=QPoint(x, rect.top() + NOTICE_PAD + int(line.height() / 2)))
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == talk[6].mid)


def test_live_topic_changes_and_pins_add_a_notice_at_the_end_unread_untouched_and_no_notification(
        qtbot, window, backend, monkeypatch):
    monkeypatch.setattr(window.conversation, "mark_visible_read", lambda: None)
    session, talk = open_with_stored_operations(qtbot, window, backend)
    notes = []
    monkeypatch.setattr(window, "notify", lambda *args, **kwargs: notes.append(args))
    manager, gid = backend.manager, session.gid
    manager.inject_messages(gid, [manager.operation_message(gid, ANN, 6, "pin", talk[6].mid, on=False)])
    manager.inject_messages(gid, [message(gid, BOB, 4, "Who books the table?")])
    manager.inject_messages(gid, [manager.operation_message(gid, BOB, 5, "topic", text="lunch Thursdays")])
    qtbot.waitUntil(lambda: len(session.tree.roots()) == 10)
    rows = top_rows(session)[7:]
    assert rows == [(True, f"unpinned m2mc://message/{gid}/{talk[6].mid[0]}:{talk[6].mid[1]}"),
                    (False, "Who books the table?"),
                    (True, "changed the topic to “lunch Thursdays” (it was “lunch Fridays 12:30”)")]
    assert len(session.tree.unread) == 2 and window.windowTitle() == "(2) M2MC chat"  # "See you…" and Bob's
    assert [title for title, *_ in notes] == ["Bob in Travel & lunch"]
    qtbot.waitUntil(lambda: window.conversation.topic_edit.text() == "lunch Thursdays")
    qtbot.waitUntil(lambda: session.threads.rowCount() == 5)  # the Threads pane asks the store again; notices are no threads

    # our own pin reads "You pinned …", and Up in the empty compose box still edits our last message
    qtbot.keyClicks(window.conversation.compose, "I'll book it")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: session.tree.roots()[-1].message.text == "I'll book it")
    mine = session.tree.roots()[-1].message
    pin = next(a for a in window.message_menu(mine).actions() if a.text() == "Pin")
    pin.trigger()
    qtbot.waitUntil(lambda: is_notice(session.tree.roots()[-1].message))
    assert spoken(session, session.tree.roots()[-1].message.mid) == "You pinned Dana's message “I'll book it”"
    window.conversation.compose.setFocus()
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Up)
    assert window.compose_controller.edit_target == mine.mid
    window.compose_controller.start_new_thread()

    # the time-ordered view shows them in the same order, and they cannot be selected there either
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.conversation.stack.currentWidget() is window.conversation.timeline_view)
    model = window.conversation.timeline_view.model()
    shown = [model.index(row, 0) for row in range(model.rowCount())]
    assert [is_notice(index.data(MessageRole)) for index in shown][-9:] == \
        [True, True, True, False, True, False, True, False, True]
    assert all(not index.flags() & Qt.ItemFlag.ItemIsSelectable for index in shown if is_notice(index.data(MessageRole)))


def test_the_models_pass_the_model_tester_with_notices_among_the_messages(qtmodeltester, qapp):
    from m2mc.middleware.types import Notice
    from m2mc.ui.message_model import MessageTreeModel, TimelineModel
    from m2mc.ui.message_tree import MessageTree
    from m2mc.ui.notices import notice_row, with_notices

    talk = [m._replace(order=2 * number) for number, m in enumerate(lunch_conversation("g"), start=1)]
    topic = message("g", ANN, 20, "op")._replace(order=7)  # delivered between the third and fourth messages
    pin = message("g", BOB, 20, "op")._replace(order=17)
    rows = [notice_row(Notice(topic, "topic", None, "lunch Fridays")), notice_row(Notice(pin, "pin", talk[6].mid))]
    tree = MessageTree("d" * 32)
    tree_model = MessageTreeModel(tree)
    timeline = TimelineModel(tree_model)  # (the Threads pane reads the store, where notices are no threads)
    tree.add_messages(with_notices(talk, rows[:1]), unread=False)
    assert [node.message.order for node in tree.arrival] == [2, 4, 6, 7, 8, 10, 12, 14, 16]
    tree.add_messages([rows[1], message("g", CAT, 9, "later")._replace(order=18)], unread=True)
    assert tree.unread == {(CAT.pid, 9)}
    for model in (tree_model, timeline):
        qtmodeltester.check(model)


def test_a_notice_older_than_the_page_held_comes_with_its_page_of_history(qtbot, window, backend):
    """Scroll-back: a group opens with its last page; a topic set long before shows once its page is loaded."""
    from m2mc.ui.controllers.sessions import HISTORY_PAGE

    me = Member(backend.pid, backend.name)
    manager = backend.manager
    early = [message("", (ANN, BOB, CAT)[n % 3], n // 3 + 1, f"early {n}") for n in range(30)]
    gid = manager.inject_group("Big lunch", members=(ANN, BOB, CAT, me), joined=True, history=early).gid
    manager.inject_messages(gid, [manager.operation_message(gid, ANN, 20, "topic", None, text="long ago")],
                            notify=False)
    manager.inject_messages(gid, [message(gid, BOB, 100 + n, f"late {n}") for n in range(HISTORY_PAGE + 20)],
                            notify=False)
    manager.inject_messages(gid, [manager.operation_message(gid, CAT, 20, "topic", None, text="lately")],
                            notify=False)
    manager.core.mark_read(gid, [(1, 10**6)])  # all read: the group opens at its end
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    session = window.current

    def notices():
        return [node.message.text for node in session.tree.roots() if is_notice(node.message)]
    assert notices() == ["changed the topic to “lately” (it was “long ago”)"]  # the older one's page is not held
    while not session.history_complete or session.tree.hidden_threads:  # "Older messages": shown, or loaded
        held = len(session.tree), session.tree.hidden_threads
        qtbot.mouseClick(window.conversation.header.older_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: (len(session.tree), session.tree.hidden_threads) != held)
    assert notices() == ["changed the topic to “long ago”", "changed the topic to “lately” (it was “long ago”)"]
    texts = [node.message.text for node in session.tree.roots()]
    assert texts.index("changed the topic to “long ago”") == 30  # after the 30 early messages, before the late ones
