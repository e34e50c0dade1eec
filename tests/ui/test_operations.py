"""Edits, deletes, reactions, pins and the topic in the app (issue 20), on real windows (Xvfb).

The in-memory backend applies the middleware's own rules (middleware.chatops),
so what these tests see is what a member sees when the network delivers the
same operations.
"""

import emoji as emoji_data
from PySide6.QtCore import QPoint, Qt, QTimer

from conftest import ANN, BOB, CAT, lunch_conversation, message
from m2mc.middleware.obg import MAX_REACTION_EMOJI, is_reaction_emoji
from m2mc.middleware.types import Member
from m2mc.ui.panes.message_menu import REACTION_CHOICES

GID = ""  # the messages' own gid: inject_* takes the group's real one


def open_group(qtbot, window, backend, history):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True, history=history)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    return window.current


def shown(window, mid):
    return window.current.tree.message(mid)


def menu_actions(menu):
    return {action.text(): action for action in menu.actions() if action.text()}


def send_own(qtbot, window, session, text):
    """Type ``text`` and press Enter, as the user does; the message as this peer shows it."""
    qtbot.keyClicks(window.conversation.compose, text)
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    own = window.backend.pid
    qtbot.waitUntil(lambda: any(n.message.sender == own and n.message.text == text for n in session.tree.arrival))
    return [n.message for n in session.tree.arrival if n.message.sender == own][-1]


def test_edit_by_context_menu_and_up_key_marks_the_message_edited(qtbot, window, backend):
    session = open_group(qtbot, window, backend, lunch_conversation(GID))
    mine = send_own(qtbot, window, session, "See you at 12:30")
    # Up in the empty compose box: our last message comes back to be edited
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Up)
    assert window.compose_controller.edit_target == mine.mid and window.conversation.compose.toPlainText() == "See you at 12:30"
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Editing your message")
    window.conversation.compose.selectAll()
    qtbot.keyClicks(window.conversation.compose, "See you at 13:00")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: shown(window, mine.mid).text == "See you at 13:00")
    assert shown(window, mine.mid).edited == 1 and window.compose_controller.edit_target is None
    # the delegate draws the mark, and the row is where it was
    index = window.conversation.tree_view.model().mapFromSource(session.tree_model.index_for(mine.mid)) \
        if hasattr(window.conversation.tree_view.model(), "mapFromSource") else session.tree_model.index_for(mine.mid)
    delegate = window.conversation.tree_view.itemDelegate()
    geometry = delegate._geometry(window.conversation.tree_view.visualRect(index), index)
    assert "edited" in geometry["meta"]
    # the context menu edits too, and offers Edit only on our own messages
    menu = window.message_menu(shown(window, mine.mid))
    menu_actions(menu)["Edit"].trigger()
    assert window.compose_controller.edit_target == mine.mid
    window.compose_controller.start_new_thread()
    assert "Edit" not in menu_actions(window.message_menu(session.tree.message(lunch_conversation(GID)[0].mid)))


def test_a_deleted_message_shows_message_deleted_and_keeps_its_replies(qtbot, window, backend):
    talk = lunch_conversation(GID)
    session = open_group(qtbot, window, backend, talk)
    question = talk[3]  # Cat's, answered by Ann, answered by Cat
    deletion = backend.manager.operation_message(session.gid, CAT, 50, "delete", question.mid)
    backend.manager.inject_messages(session.gid, [deletion])
    qtbot.waitUntil(lambda: shown(window, question.mid).deleted)
    assert shown(window, question.mid).text == ""
    node = session.tree.node(question.mid)
    assert [child.message.mid for child in node.children] == [talk[4].mid]
    index = session.tree_model.index_for(question.mid)
    assert window.conversation.tree_view.itemDelegate().body_layout(index).text() == "message deleted"
    # a forged delete (by someone else) changes nothing
    as_ann = backend.manager.operation_message(session.gid, ANN, 0, "delete", talk[0].mid).text
    forged = message(GID, BOB, 60, as_ann, talk[0].mid)  # Ann's delete, sent by Bob
    backend.manager.inject_messages(session.gid, [forged])
    assert not backend.manager.history(session.gid)[0].deleted
    assert backend.manager.stats_dict()["operations_rejected"] == 1


def test_reactions_show_counts_who_and_toggle_from_the_picker_and_the_row(qtbot, window, backend):
    talk = lunch_conversation(GID)
    session = open_group(qtbot, window, backend, talk)
    lunch = talk[6]
    backend.manager.inject_messages(session.gid, [
        backend.manager.operation_message(session.gid, ANN, 50, "react", lunch.mid, emoji="👍"),
        backend.manager.operation_message(session.gid, CAT, 50, "react", lunch.mid, emoji="👍"),
    ])
    qtbot.waitUntil(lambda: shown(window, lunch.mid).reactions == {"👍": sorted([ANN.pid, CAT.pid])})
    menu = window.message_menu(shown(window, lunch.mid))
    react = menu_actions(menu)["React"].menu()
    menu_actions(react)["🎉"].trigger()
    qtbot.waitUntil(lambda: "🎉" in (shown(window, lunch.mid).reactions or {}))
    index = session.tree_model.index_for(lunch.mid)
    window.conversation.tree_view.scrollTo(index)
    delegate = window.conversation.tree_view.itemDelegate()
    chips = delegate._geometry(window.conversation.tree_view.visualRect(index), index)["chips"]
    assert [(emoji, len(pids)) for _rect, emoji, pids in chips] == [("🎉", 1), ("👍", 2)]
    assert delegate.reaction_tooltip("👍", chips[1][2]) == "👍 Ann, Cat"
    # clicking our own chip takes the reaction back
    rect = chips[0][0]
    qtbot.mouseClick(window.conversation.tree_view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(rect.center()))
    qtbot.waitUntil(lambda: "🎉" not in (shown(window, lunch.mid).reactions or {}))
    assert shown(window, lunch.mid).reactions == {"👍": sorted([ANN.pid, CAT.pid])}


def test_a_message_with_50_different_reactions_refuses_a_new_one_and_says_why(qtbot, window, backend):
    talk = lunch_conversation(GID)
    session = open_group(qtbot, window, backend, talk)
    lunch = talk[6]
    others = sorted(e for e in emoji_data.EMOJI_DATA if is_reaction_emoji(e) and e not in REACTION_CHOICES)
    backend.manager.inject_messages(session.gid, [
        backend.manager.operation_message(session.gid, (ANN, BOB, CAT)[n % 3], 100 + n, "react", lunch.mid, emoji=emoji)
        for n, emoji in enumerate(others[:MAX_REACTION_EMOJI + 10])])
    qtbot.waitUntil(lambda: len(shown(window, lunch.mid).reactions or {}) == MAX_REACTION_EMOJI)
    menu_actions(menu_actions(window.message_menu(shown(window, lunch.mid)))["React"].menu())["🎉"].trigger()
    qtbot.waitUntil(lambda: "50 different reactions" in window.statusBar().currentMessage())
    assert "🎉" not in shown(window, lunch.mid).reactions
    # adding yourself to one already shown still works
    window.compose_controller.toggle_reaction(lunch.mid, others[0])
    qtbot.waitUntil(lambda: backend.pid in shown(window, lunch.mid).reactions[others[0]])
    assert session is window.current


def test_pins_fill_the_pinned_list_live(qtbot, window, backend):
    talk = lunch_conversation(GID)
    session = open_group(qtbot, window, backend, talk)
    assert not window.conversation.header.pinned_button.isVisible()
    menu_actions(window.message_menu(shown(window, talk[6].mid)))["Pin"].trigger()
    backend.manager.inject_messages(session.gid, [backend.manager.operation_message(session.gid, BOB, 50, "pin", talk[0].mid)])
    qtbot.waitUntil(lambda: len(window.conversation.pinned_messages()) == 2)
    assert [m.mid for m in window.conversation.pinned_messages()] == [talk[0].mid, talk[6].mid]
    assert window.conversation.header.pinned_button.isVisible() and window.conversation.header.pinned_button.text() == "Pinned (2)"
    window.conversation._fill_pinned_menu()
    assert len(window.conversation.pinned_menu.actions()) == 2
    menu_actions(window.message_menu(shown(window, talk[6].mid)))["Unpin"].trigger()
    qtbot.waitUntil(lambda: len(window.conversation.pinned_messages()) == 1)
    assert window.conversation.header.pinned_button.text() == "Pinned (1)"


def test_the_topic_shows_in_the_header_edits_there_and_follows_others_live(qtbot, window, backend):
    session = open_group(qtbot, window, backend, lunch_conversation(GID))
    assert window.conversation.topic_edit.text() == "" and window.conversation.topic_edit.isEnabled()
    window.conversation.topic_edit.setFocus(Qt.FocusReason.MouseFocusReason)  # as a click gives it (ui.focus, rule 3)
    qtbot.keyClicks(window.conversation.topic_edit, "Friday lunch plans")
    qtbot.keyClick(window.conversation.topic_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: backend.manager.topic(session.gid) == ("Friday lunch plans", backend.pid))
    qtbot.waitUntil(lambda: window.current.topic == "Friday lunch plans")  # heard back, as from the network
    window.conversation.topic_edit.setFocus(Qt.FocusReason.MouseFocusReason)
    qtbot.keyClicks(window.conversation.topic_edit, " and more")
    qtbot.keyClick(window.conversation.topic_edit, Qt.Key.Key_Escape)  # undoes the typing, sets nothing
    assert window.conversation.topic_edit.text() == "Friday lunch plans" and not window.conversation.topic_edit.hasFocus()
    assert backend.manager.topic(session.gid) == ("Friday lunch plans", backend.pid)
    window.conversation.tree_view.setFocus()
    backend.manager.inject_messages(session.gid, [backend.manager.operation_message(session.gid, BOB, 50, "topic", text="Moved to Monday")])
    qtbot.waitUntil(lambda: window.conversation.topic_edit.text() == "Moved to Monday")
    assert backend.manager.group(session.gid).topic == "Moved to Monday"


def test_delete_asks_first_and_a_deleted_thread_root_is_named_in_the_threads_pane(qtbot, window, backend):
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication, QMessageBox

    from conftest import save_screenshot
    from m2mc.ui.delegate import root_text
    from m2mc.ui.message_model import ThreadRole

    session = open_group(qtbot, window, backend, lunch_conversation(GID))
    mine = send_own(qtbot, window, session, "Who brings the cake?")
    actions = [a.text() for a in window.message_menu(shown(window, mine.mid)).actions()]
    assert actions[-3:] == ["Edit", "", "Delete…"]  # a separator between them

    answers = []

    def answer(key_or_button):
        box = QApplication.activeModalWidget()
        assert isinstance(box, QMessageBox) and "for everyone" in box.text()
        answers.append(box.text())
        if key_or_button == "enter":
            QTest.keyClick(box, Qt.Key.Key_Return)  # the default is Cancel
        else:
            delete = next(b for b in box.buttons() if b.text() == "Delete")
            qtbot.mouseClick(delete, Qt.MouseButton.LeftButton)

    QTimer.singleShot(150, lambda: answer("enter"))
    menu_actions(window.message_menu(shown(window, mine.mid)))["Delete…"].trigger()
    assert answers and not backend.manager.history(session.gid)[-1].deleted
    QTimer.singleShot(150, lambda: answer("click"))
    menu_actions(window.message_menu(shown(window, mine.mid)))["Delete…"].trigger()
    qtbot.waitUntil(lambda: shown(window, mine.mid).deleted)

    threads = window.threads_pane.thread_list.model()

    def thread_root_shown():  # the Threads pane's refresh is coalesced: it comes a moment later
        rows = [threads.index(row, 0).data(ThreadRole) for row in range(threads.rowCount())]
        return next((summary.root for summary in rows if summary.root.mid == mine.mid), None)

    qtbot.waitUntil(lambda: thread_root_shown() is not None and thread_root_shown().deleted)
    root = thread_root_shown()
    assert root.deleted and root_text(root) == "message deleted"
    save_screenshot(window, "deleted-thread-root.png")


def test_editing_shows_a_pencil_and_save_instead_of_reply_and_send(qtbot, window, backend):
    from conftest import save_screenshot

    session = open_group(qtbot, window, backend, lunch_conversation(GID))
    send_own(qtbot, window, session, "See you at 12:30")
    assert window.conversation.compose_box.send_button.text() == "Send"
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Up)
    assert window.conversation.compose_box.reply_banner.editing and window.conversation.compose_box.send_button.text() == "Save"
    assert window.conversation.compose_box.reply_banner.close_button.toolTip().startswith("Cancel the edit")
    save_screenshot(window, "editing-a-message.png")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Escape)
    assert not window.conversation.compose_box.reply_banner.editing and window.conversation.compose_box.send_button.text() == "Send"
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Up)
    window.conversation.compose.selectAll()
    qtbot.keyClicks(window.conversation.compose, "See you at 13:00")
    qtbot.mouseClick(window.conversation.compose_box.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.conversation.compose_box.send_button.text() == "Send")
    mine = [n.message for n in session.tree.arrival if n.message.sender == backend.pid][-1]
    assert mine.text == "See you at 13:00" and mine.edited
