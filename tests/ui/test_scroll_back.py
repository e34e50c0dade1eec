"""Scroll-back with real keys, wheel and clicks: a big group opens at its end with one page of rows, older
pages load as the reader scrolls up without moving what they read, and a search result or a link older
than the pages loaded brings its page in."""

import time

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication

from conftest import ANN, BOB, CAT, message, save_screenshot, search_everywhere
from m2mc.middleware.types import Member, format_mid
from m2mc.ui.controllers import sessions
from m2mc.ui.controllers.sessions import HISTORY_PAGE, OPEN_UNREAD_LIMIT
from m2mc.ui.widgets import UnreadCountRole
from m2mc.ui.panes.conversation import AT_END, SCROLL_BACK_MARGIN
from m2mc.ui.message_model import MessageRole, ThreadRole

GROUP_SIZE = 5_000


def big_history(count=GROUP_SIZE):
    """Threads of a few messages each; every 50th message answers one 1,000 messages back."""
    members = (ANN, BOB, CAT)
    history, seqnos = [], {m.pid: 0 for m in members}
    for n in range(count):
        member = members[n % 3]
        seqnos[member.pid] += 1
        parent = None
        if n % 5:
            parent = history[n - 1 - n % 5 + 1].mid if n % 5 == 1 else history[n - 1].mid
        if n % 50 == 49 and n >= 1000:
            parent = history[n - 1000].mid
        history.append(message("", member, seqnos[member.pid], f"Message {n}: the {n % 7} plan", parent))
    return history


def open_big_group(qtbot, window, backend, history, then_write=()):
    me = Member(backend.pid, backend.name)
    view = backend.manager.inject_group("Big team", members=(ANN, BOB, CAT, me), joined=True, history=history)
    backend.manager.inject_messages(view.gid, [make(view.gid) for make in then_write])
    window.start()
    session = None

    def loaded():
        nonlocal session
        session = window.session_controller.sessions.get(view.gid)
        return session is not None and session.loaded and window.current is session and session.opened
    qtbot.waitUntil(loaded, timeout=20_000)
    return session


def top_row(view):
    index = view.indexAt(QPoint(4, 2))
    return index.data(MessageRole).mid, view.visualRect(index).top()


def wheel_up(view, steps=3):
    pos = QPointF(view.viewport().rect().center())
    for _ in range(steps):
        event = QWheelEvent(pos, view.viewport().mapToGlobal(pos), QPoint(0, 0), QPoint(0, 120),
                            Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase,
                            False)
        QApplication.sendEvent(view.viewport(), event)


def test_a_big_group_opens_at_its_end_with_one_page_and_scrolling_up_loads_older_pages_in_place(
        qtbot, window, backend, monkeypatch):
    history = big_history()
    session = open_big_group(qtbot, window, backend, history)
    view = window.conversation.tree_view
    assert len(session.tree) == HISTORY_PAGE  # 5,000 in the store, one page in the model
    assert not session.history_complete and window.conversation.header.older_button.isVisible()
    bar = view.verticalScrollBar()
    assert bar.value() == bar.maximum()  # at the end
    last = view.indexAt(QPoint(4, view.viewport().height() - 3)).data(MessageRole)
    assert last.mid == history[-1].mid
    # A reply whose parent is older than the page shows at the top with its banner, looked up in the store.
    orphan = next(m for m in history[-HISTORY_PAGE:] if m.parent == history[history.index(m) - 1000].mid)
    qtbot.waitUntil(lambda: orphan.parent in session.tree.absent_parents)
    assert session.tree.node(orphan.mid).depth == 0
    assert window.conversation._view_index(orphan.mid).data(Qt.ItemDataRole.UserRole + 3).mid == orphan.parent

    # The wheel, notch by notch: near the top an older page comes, and what the reader saw stays put.
    loads = 0
    for _ in range(2000):
        held = len(session.tree)
        wheel_up(view, 1)
        seen = top_row(view)
        qtbot.wait(5)
        qtbot.waitUntil(lambda: not session.loading_older)
        if len(session.tree) > held:
            loads += 1
            assert top_row(view) == seen  # to the pixel
            assert bar.value() > 0  # the new rows are above: not a jump to them
            if loads == 2:
                break
    assert loads == 2 and len(session.tree) == 3 * HISTORY_PAGE
    # PageUp, after a click on a message, keeps going back.
    rect = view.visualRect(view.indexAt(QPoint(40, 40)))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    for _ in range(400):
        held = len(session.tree)
        qtbot.keyClick(view, Qt.Key.Key_PageUp)
        qtbot.wait(5)  # the load is asked for on the next turn of the event loop
        qtbot.waitUntil(lambda: not session.loading_older)
        if len(session.tree) > held:
            break
    assert len(session.tree) == 4 * HISTORY_PAGE
    orders = [node.message.order for node in session.tree.arrival]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert session.tree.arrival[-1].message.mid == history[-1].mid
    # Back at the end, the older pages are let go: memory holds a page again, whatever was read.
    monkeypatch.setattr(sessions, "HELD_LIMIT", 3 * HISTORY_PAGE)
    qtbot.keyClick(view, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: len(session.tree) == HISTORY_PAGE)
    assert bar.value() >= bar.maximum() - AT_END
    assert view.indexAt(QPoint(4, view.viewport().height() - 3)).data(MessageRole).mid == history[-1].mid
    held = len(session.tree)
    wheel_up(view, 1)  # and scrolling back still works from there
    qtbot.waitUntil(lambda: len(session.tree) >= held)


def test_the_reader_keeps_their_place_to_the_pixel_when_a_page_loads_above(qtbot, window, backend):
    session = open_big_group(qtbot, window, backend, big_history(1_000))
    view, bar = window.conversation.tree_view, window.conversation.tree_view.verticalScrollBar()
    bar.setValue(SCROLL_BACK_MARGIN + 5)  # near the top, not in the margin that loads by itself
    before = top_row(view)
    window.conversation.header.older_button.click()  # the header's "⤒ Older messages"
    qtbot.waitUntil(lambda: len(session.tree) == 2 * HISTORY_PAGE and not session.loading_older)
    qtbot.wait(20)
    assert top_row(view) == before


def test_a_search_result_older_than_the_pages_loaded_brings_its_page_and_opens_in_its_thread(qtbot, window, backend):
    history = big_history()
    history[120] = history[120]._replace(text="Message 120: the zanzibar plan")
    session = open_big_group(qtbot, window, backend, history)
    assert session.tree.node(history[120].mid) is None
    search = search_everywhere(qtbot, window, "zanzibar")
    qtbot.waitUntil(lambda: len(search.result_items()) == 1, timeout=3000)
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(search.results.hasFocus)
    started = time.monotonic()
    qtbot.keyClick(search.results, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None
                    and window.conversation.selected_message().mid == history[120].mid, timeout=5000)
    print(f"jump to a message 4,880 back: {1000 * (time.monotonic() - started):.0f} ms")
    assert session.thread is not None
    assert window.conversation.tree_view.viewport().rect().intersects(window.conversation.tree_view.visualRect(window.conversation._view_index(history[120].mid)))
    orders = [node.message.order for node in session.tree.arrival]
    assert orders == sorted(orders) and len(session.tree) < GROUP_SIZE
    # a link to a message older still
    window.conversation.close_thread()
    window.navigation.open_link(f"m2mc://message/{session.gid}/{format_mid(history[3].mid)}")
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == history[3].mid,
                    timeout=5000)
    save_screenshot(window, "scroll-back-jump.png")


def test_the_threads_pane_lists_from_the_store_and_an_old_thread_opens_from_it_live(qtbot, window, backend):
    history = big_history()
    session = open_big_group(qtbot, window, backend, history)
    threads = window.threads_pane.thread_list.model()
    qtbot.waitUntil(lambda: threads.rowCount() > 0)
    listed = lambda: [threads.index(row).data(ThreadRole) for row in range(threads.rowCount())]  # noqa: E731
    # Threads the tree does not hold are listed too, with the store's counts: the newest answer (to a chain of
    # answers 1,000 apart) put message 995's thread on top.
    old = listed()[0]
    assert session.tree.node(old.root.mid) is None and old.last.mid == history[-1].mid and old.replies == 8
    # Scrolling the list to its end asks for the next page.
    first = threads.rowCount()
    window.threads_pane.thread_list.scrollToBottom()
    qtbot.waitUntil(lambda: threads.rowCount() > first)
    # A click opens the old thread, read from the store, and it follows what arrives in it.
    rect = window.threads_pane.thread_list.visualRect(threads.index(0))
    window.threads_pane.thread_list.scrollTo(threads.index(0))
    rect = window.threads_pane.thread_list.visualRect(threads.index(0))
    qtbot.mouseClick(window.threads_pane.thread_list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: session.thread is not None and window.conversation.thread_bar.isVisible())
    assert session.thread.root.message.mid == old.root.mid and len(session.thread.tree) == 9
    model = window.conversation.tree_view.model()
    assert model.rowCount() == 1 and model.index(0, 0).data(MessageRole).mid == old.root.mid
    answer = message("", ANN, 5_000, "Still on the 0 plan?", old.root.mid)
    backend.manager.inject_messages(session.gid, [answer])
    qtbot.waitUntil(lambda: window.conversation._view_index(answer.mid).isValid())
    assert session.tree.node(answer.mid) is not None  # and at the group's end, shown at the top level
    save_screenshot(window, "scroll-back-old-thread.png")


def test_a_message_pinned_long_ago_is_in_the_pinned_list_of_a_group_opened_at_its_end(qtbot, window, backend):
    history = big_history(1_000)
    pin = lambda gid: backend.manager.operation_message(gid, ANN, 400, "pin", history[10].mid)  # noqa: E731
    session = open_big_group(qtbot, window, backend, history, then_write=[pin])
    assert session.tree.node(history[10].mid) is None
    assert list(session.pinned) == [history[10].mid] and window.conversation.header.pinned_button.isVisible()


def test_a_group_far_behind_counts_its_unread_beyond_what_is_loaded_and_mark_all_read_clears_them(
        qtbot, window, backend):
    history = big_history()
    me = Member(backend.pid, backend.name)
    view = backend.manager.inject_group("Big team", members=(ANN, BOB, CAT, me), joined=True, history=history,
                                        unread=True)
    window.start()
    qtbot.waitUntil(lambda: view.gid in window.session_controller.sessions
                    and window.session_controller.sessions[view.gid].opened, timeout=20_000)
    session = window.session_controller.sessions[view.gid]
    assert len(session.tree) == len(session.tree.unread) == OPEN_UNREAD_LIMIT  # opened as far back as it goes
    assert window.groups_pane.item(session.gid).data(UnreadCountRole) == GROUP_SIZE and "(5000)" in window.windowTitle()
    held = len(session.tree)
    window.conversation.show_older()  # a page of the unread beyond comes in: the count stays the whole
    qtbot.waitUntil(lambda: len(session.tree) > held)
    assert window.groups_pane.item(session.gid).data(UnreadCountRole) == GROUP_SIZE
    qtbot.keyClick(window, Qt.Key.Key_U, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: window.groups_pane.item(session.gid).data(UnreadCountRole) == 0)
    assert backend.manager.core.unread_before(view.gid, session.oldest_order) == 0  # in the store too
