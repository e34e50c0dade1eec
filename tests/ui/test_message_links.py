"""m2mc://message links as a person meets them: a link reads as the linked message's author and
first words (not its ids), a click follows it across groups, and Back (Alt+Left) returns to where
the reader was."""

from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest

from conftest import ANN, BOB, CAT, activate, lunch_conversation, message, save_screenshot
from m2mc.middleware.types import Member, format_mid
from m2mc.ui.message_model import MessageRole, ThreadRole


def open_a_group_linking_to_another(qtbot, window, backend, after_link):
    """Travel & lunch, and Winter trip, where Bob's message links to Ann's first one in Travel & lunch
    followed by ``after_link``; Winter trip is shown.  Returns (Travel & lunch's view, its talk, Bob's message)."""
    me = Member(backend.pid, backend.name)
    talk = lunch_conversation("")
    lunch = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True, history=talk)
    link = f"m2mc://message/{lunch.gid}/{format_mid(talk[0].mid)}"
    pointer = message("", BOB, 1, f"{link}{after_link}")
    plans = backend.manager.inject_group("Winter trip", members=(ANN, BOB, CAT, me), joined=True,
                                         history=[message("", CAT, 1, "Plans?"), pointer])
    window.start()
    qtbot.waitUntil(lambda: len(window.session_controller.sessions) == 2 and all(
        s.loaded and len(s.tree) for s in window.session_controller.sessions.values()))
    window.select_group(plans.gid)
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == plans.gid)
    activate(qtbot, window)
    return lunch, talk, pointer


def test_a_link_reads_as_its_message_opens_it_and_back_returns(qtbot, window, backend):
    lunch, talk, pointer = open_a_group_linking_to_another(qtbot, window, backend, " was the answer, and more below")
    delhi, plans_gid = talk[0], window.current.gid
    view = window.conversation.tree_view
    index = window.conversation._view_index(pointer.mid)
    delegate = view.itemDelegate()
    shown = delegate.body_layout(index).text()
    assert shown.startswith("↗ Ann: Did you visit Delhi? (Travel & lunch)") and lunch.gid not in shown
    assert shown.endswith("was the answer, and more below")
    save_screenshot(window, "message-link-titled.png")

    geometry = delegate._geometry(view.visualRect(index), index)
    on_link = QPoint(geometry["left"] + 20, geometry["body_top"] + 6)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, pos=on_link)
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == lunch.gid)
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == delhi.mid)  # read from the store

    QTest.keyClick(window.conversation.tree_view, Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: window.current.gid == plans_gid)
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == pointer.mid)  # read from the store


def test_a_link_to_a_message_not_here_stays_as_written(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    link = "m2mc://message/aaaaaaaaaaaaaaaaaaaaaaaaaa/0123456789abcdef0123456789abcdef:9"
    note = message("", BOB, 1, f"see {link}")
    backend.manager.inject_group("Winter trip", members=(ANN, BOB, CAT, me), joined=True, history=[note])
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and window.current.loaded)
    index = window.conversation._view_index(note.mid)
    assert index.data(MessageRole).mid == note.mid
    assert window.conversation.tree_view.itemDelegate().body_layout(index).text() == f"see {link}"


def test_the_threads_pane_names_a_link_as_the_conversation_does(qtbot, window, backend):
    lunch, _talk, pointer = open_a_group_linking_to_another(qtbot, window, backend, " was the answer")
    threads = window.threads_pane.thread_list
    row = window.current.threads.row_of(pointer.mid)
    index = threads.model().index(row, 0)
    shown = threads.itemDelegate().snippet(index.data(ThreadRole))
    assert shown == "↗ Ann: Did you visit Delhi? (Travel & lunch) was the answer"
    assert lunch.gid not in shown and "m2mc://" not in shown
    # the thread opened from the pane is headed the same way
    threads.scrollTo(index)
    qtbot.mouseClick(threads.viewport(), Qt.MouseButton.LeftButton, pos=threads.visualRect(index).center())
    qtbot.waitUntil(lambda: window.current.thread is not None)
    assert "↗ Ann: Did you visit Delhi?" in window.conversation.thread_label.text() and "m2mc://" not in window.conversation.thread_label.text()
