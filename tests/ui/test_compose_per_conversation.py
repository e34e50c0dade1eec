"""The compose box as a person uses it across conversations (issue 32, items 2 and 3): a draft per
group that never follows the reader into another group and outlives a restart, and replies that go
where the reader is looking when one thread is open.  Real windows (Xvfb), real keys and clicks."""

from PySide6.QtCore import QSettings, Qt

from conftest import ANN, BOB, CAT, activate, lunch_conversation, message, save_screenshot
from m2mc.middleware.types import Member
from m2mc.ui.main_window import MainWindow
from m2mc.ui.message_model import MessageRole
from m2mc.ui.model.state import Draft

GID = ""  # inject_group takes the messages into the group it makes


def two_groups(qtbot, window, backend):
    """'Travel & lunch' (the lunch talk) and a private group with one message; both loaded."""
    me = Member(backend.pid, backend.name)
    talk = lunch_conversation(GID)
    lunch = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                         history=talk).gid
    private = backend.manager.inject_group("Surprise party", members=(ANN, me), joined=True, private=True,
                                           history=[message(GID, ANN, 7, "Not a word to Bob!")]).gid
    window.start()
    sessions = window.session_controller.sessions
    qtbot.waitUntil(lambda: lunch in sessions and private in sessions
                    and len(sessions[lunch].tree) == len(talk) and len(sessions[private].tree) == 1)
    return lunch, private, talk


def click_group(qtbot, window, gid):
    item = window.groups_pane.item(gid)
    rect = window.groups_pane.group_list.visualItemRect(item)
    qtbot.mouseClick(window.groups_pane.group_list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.current.gid == gid


def click_message(qtbot, window, mid):
    index = window.conversation._view_index(mid)
    window.conversation.tree_view.scrollTo(index)
    rect = window.conversation.tree_view.visualRect(index)
    qtbot.mouseClick(window.conversation.tree_view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.conversation.selected_message().mid == mid


def click_thread(qtbot, window, root_mid):
    threads = window.threads_pane.thread_list.model()
    qtbot.waitUntil(lambda: any(threads.index(r).data(MessageRole).mid == root_mid for r in range(threads.rowCount())))
    row = next(r for r in range(threads.rowCount()) if threads.index(r).data(MessageRole).mid == root_mid)
    rect = window.threads_pane.thread_list.visualRect(threads.index(row))
    qtbot.mouseClick(window.threads_pane.thread_list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: window.current.thread is not None and window.current.thread.root.message.mid == root_mid)


def type_and_send(qtbot, window, backend, text):
    count = len(backend.manager.sent)
    qtbot.keyClicks(window.conversation.compose, text)
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(backend.manager.sent) == count + 1 and window.conversation.compose.toPlainText() == "")
    return backend.manager.sent[-1]


def make_window(qtbot, backend, settings):
    window = MainWindow(backend, settings=settings)
    qtbot.addWidget(window)
    window.resize(1100, 680)
    window.show()
    activate(qtbot, window)
    return window


def test_a_draft_stays_in_its_group_and_comes_back_after_a_restart(qtbot, backend, tmp_path):
    settings = QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)  # as app/chat.py keeps it
    window = make_window(qtbot, backend, settings)
    lunch, private, talk = two_groups(qtbot, window, backend)
    click_group(qtbot, window, lunch)
    click_message(qtbot, window, talk[3].mid)  # Cat: "No, not yet. Is it worth the trip in summer?"
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(window.conversation.compose, "Bob keeps a surprise")

    click_group(qtbot, window, private)
    assert window.conversation.compose.toPlainText() == "" and not window.conversation.compose_box.reply_banner.isVisible()
    click_message(qtbot, window, (ANN.pid, 7))  # "Not a word to Bob!"
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(window.conversation.compose, "Cake at 6")

    click_group(qtbot, window, lunch)
    assert window.conversation.compose.toPlainText() == "Bob keeps a surprise"
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying to Cat: No, not yet.")
    window.conversation.compose.setFocus()
    qtbot.keyClicks(window.conversation.compose, " for you")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(backend.manager.sent) == 1)
    assert backend.manager.sent == [(lunch, "Bob keeps a surprise for you", talk[3].mid)]
    qtbot.waitUntil(lambda: window.conversation.compose.toPlainText() == "")

    click_group(qtbot, window, private)
    assert window.conversation.compose.toPlainText() == "Cake at 6"
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(window.conversation.compose, "candles?")
    window.close()
    settings.sync()

    # A restart: a new window on the same data dir's settings file.
    again = make_window(qtbot, backend, QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat))
    again.start()
    sessions = again.session_controller.sessions
    qtbot.waitUntil(lambda: private in sessions and sessions[private].loaded and lunch in sessions)
    click_group(qtbot, again, private)
    assert again.conversation.compose.toPlainText() == "Cake at 6\ncandles?"
    assert again.conversation.compose_box.reply_banner.label.text() == "Replying to Ann: Not a word to Bob!"
    click_group(qtbot, again, lunch)
    assert again.conversation.compose.toPlainText() == "" and not again.conversation.compose_box.reply_banner.isVisible()  # sent: no draft left


def test_typing_in_an_open_thread_replies_there_and_the_banner_says_so(qtbot, window, backend):
    lunch, private, talk = two_groups(qtbot, window, backend)
    q1, q2, a3, a4 = talk[0], talk[1], talk[4], talk[5]
    click_group(qtbot, window, lunch)
    click_thread(qtbot, window, q2.mid)  # "Did you visit Chennai?", opened alone
    assert window.conversation.compose_box.reply_banner.label.text() == "Replying in the thread of Ann: Did you visit Chennai?"
    save_screenshot(window, "thread-reply-banner.png")
    assert type_and_send(qtbot, window, backend, "Any hotel tips?") == (lunch, "Any hotel tips?", q2.mid)
    mine = (backend.pid, 1)
    qtbot.waitUntil(lambda: window.conversation._view_index(mine).isValid())  # in view, not a thread elsewhere

    # Another target in the thread; after sending, the next message follows the user's own reply
    # (Slack's thread pane), and Esc goes back to the thread's root.
    click_message(qtbot, window, a4.mid)
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying to Cat: Noted")
    assert type_and_send(qtbot, window, backend, "Me too")[2] == a4.mid
    me_too = (backend.pid, 2)
    qtbot.waitUntil(lambda: window.conversation.compose_box.reply_banner.label.text().endswith(": Me too"))  # once it is shown
    assert type_and_send(qtbot, window, backend, "And the food?")[2] == me_too
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Escape)
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying in the thread of Ann")
    assert type_and_send(qtbot, window, backend, "Any bookshops?")[2] == q2.mid

    # A target chosen in one thread does not follow the reader into another.
    click_message(qtbot, window, a3.mid)
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    qtbot.mouseClick(window.conversation.thread_bar.back_button, Qt.MouseButton.LeftButton)
    click_thread(qtbot, window, q1.mid)
    assert window.conversation.compose_box.reply_banner.label.text() == "Replying in the thread of Ann: Did you visit Delhi?"
    click_group(qtbot, window, private)  # away and back: the thread is still open, and still the target
    assert not window.conversation.compose_box.reply_banner.isVisible()
    click_group(qtbot, window, lunch)
    assert window.conversation.compose_box.reply_banner.label.text() == "Replying in the thread of Ann: Did you visit Delhi?"
    assert type_and_send(qtbot, window, backend, "When?")[2] == q1.mid
    when = (backend.pid, 5)
    qtbot.waitUntil(lambda: window.conversation._view_index(when).isValid())
    assert window.current.tree.message(when).text == "When?"

    # ✕ still starts a thread of its own; Esc brings the thread's root back.
    qtbot.mouseClick(window.conversation.compose_box.reply_banner.close_button, Qt.MouseButton.LeftButton)
    assert window.conversation.compose_box.reply_banner.label.text().startswith("New thread")
    save_screenshot(window, "thread-new-thread-banner.png")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Escape)
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying in the thread of Ann: Did you visit Delhi?")
    qtbot.mouseClick(window.conversation.compose_box.reply_banner.close_button, Qt.MouseButton.LeftButton)
    assert type_and_send(qtbot, window, backend, "Museum trip Sunday?")[2] is None

    # All threads again: no default target, and none after sending.
    qtbot.mouseClick(window.conversation.thread_bar.back_button, Qt.MouseButton.LeftButton)
    assert not window.conversation.compose_box.reply_banner.isVisible()
    click_message(qtbot, window, q2.mid)
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert type_and_send(qtbot, window, backend, "Booked!")[2] == q2.mid
    assert not window.conversation.compose_box.reply_banner.isVisible()
    assert type_and_send(qtbot, window, backend, "Lunch tomorrow?")[2] is None


def test_a_draft_answering_a_message_is_named_in_the_banner_once_the_history_is_in(qtbot, backend):
    me = Member(backend.pid, backend.name)
    talk = lunch_conversation(GID)
    lunch = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                         history=talk).gid
    settings = {"draft/" + lunch: Draft("It is worth it", talk[3].mid).encode()}  # left by the last run
    window = make_window(qtbot, backend, settings)
    window.start()  # the group opens at start, before its history is in
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    assert window.conversation.compose.toPlainText() == "It is worth it"
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying to Cat: No, not yet.")


def test_editing_a_message_does_not_lose_the_draft_typed_before_it(qtbot, window, backend):
    lunch, _private, talk = two_groups(qtbot, window, backend)
    click_group(qtbot, window, lunch)
    type_and_send(qtbot, window, backend, "See you at 12:30")
    mine = (backend.pid, 1)
    qtbot.waitUntil(lambda: window.current.tree.message(mine) is not None)
    click_message(qtbot, window, talk[6].mid)  # Bob: "Lunch at the canteen at 12:30?"
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(window.conversation.compose, "Half a thought")
    edit = next(a for a in window.message_menu(window.current.tree.message(mine)).actions() if a.text() == "Edit")
    edit.trigger()  # the context menu's Edit
    assert window.conversation.compose.toPlainText() == "See you at 12:30"
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Escape)  # give the edit up: the draft is back, target and all
    assert window.conversation.compose.toPlainText() == "Half a thought"
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying to Bob: Lunch at the canteen")
    edit = next(a for a in window.message_menu(window.current.tree.message(mine)).actions() if a.text() == "Edit")
    edit.trigger()
    window.conversation.compose.selectAll()
    qtbot.keyClicks(window.conversation.compose, "See you at 13:00")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)  # saved: the draft is back again
    qtbot.waitUntil(lambda: window.current.tree.message(mine).text == "See you at 13:00")
    qtbot.waitUntil(lambda: window.conversation.compose.toPlainText() == "Half a thought")
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying to Bob: Lunch at the canteen")
