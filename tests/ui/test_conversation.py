"""The conversation view as a person uses it: real windows (Xvfb), real keys and clicks.

One test per defect of issue 17, each failing on the code before it (957b8ce):
replies that followed the selection, dialogs that opened with focus on OK,
deep threads drawn off screen, groups that opened blank, unread state lost on
restart, long texts cut or unreadable, shortcuts dead in the discovery
window, and the small things (left members, lock, peers seen).
"""

from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from conftest import ANN, BOB, CAT, activate, lunch_conversation, message, save_screenshot
from m2mc.middleware.types import Member
from m2mc.ui.dialogs import ConfirmJoinDialog, CreateGroupDialog, JoinDialog, NameDialog
from m2mc.middleware.presence import BEACON_INTERVAL, OFFLINE_AFTER
from m2mc.ui.message_model import MessageRole
from m2mc.ui.resources import apply_theme

# Messages are written before their group exists: inject_* takes the group's real gid, not theirs.
GID = ""


def open_group(qtbot, window, backend, history, desc="Travel & lunch", **extra):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group(desc, members=(ANN, BOB, CAT, me), joined=True, history=history, **extra)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == len(history))
    return window.current


def click_message(qtbot, view, mid, window):
    index = window.conversation._view_index(mid)
    view.scrollTo(index)
    rect = view.visualRect(index)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(rect.center().x(), rect.top() + 30))


def selected(window):
    index = window.conversation.tree_view.currentIndex()
    return index.data(MessageRole) if index.isValid() else None


# -- defect 1: replies go into the wrong thread ----------------------------------------------------

def test_reply_steps_of_defect_1_post_under_the_chosen_message(qtbot, window, backend):
    assert QGuiApplication.platformName() == "xcb"  # real windows on Xvfb (pytest-xvfb)
    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk)
    cat = talk[3]  # "No, not yet. Is it worth the trip in summer?"
    click_message(qtbot, window.conversation.tree_view, cat.mid, window)
    assert selected(window).mid == cat.mid
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)  # Reply
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying to Cat:")
    # Read elsewhere: arrows, filter, Esc; none of it changes the answer's target.
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_Down)
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_Down)
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert window.conversation.filter_edit.hasFocus() or QApplication.focusWidget() is window.conversation.filter_edit
    qtbot.keyClicks(window.conversation.filter_edit, "december")
    assert selected(window) != cat
    qtbot.keyClick(window.conversation.filter_edit, Qt.Key.Key_Escape)
    assert window.conversation.compose_box.reply_banner.label.text().startswith("Replying to Cat:")
    qtbot.keyClicks(window.conversation.compose, "Go in winter")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.conversation.compose.toPlainText() == "")  # sent
    assert backend.manager.sent == [(window.current.gid, "Go in winter", cat.mid)]
    # Esc (with nothing to clear in the filter) forgets the target: a new thread.
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Escape)
    assert not window.conversation.compose_box.reply_banner.isVisible()
    qtbot.keyClicks(window.conversation.compose, "Anyone for tea?")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(backend.manager.sent) == 2)
    assert backend.manager.sent[-1] == (window.current.gid, "Anyone for tea?", None)


def test_hover_reply_button_and_context_menu_choose_the_target(qtbot, window, backend):
    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk)
    view = window.conversation.tree_view
    index = window.conversation._view_index(talk[6].mid)
    rect = view.visualRect(index)
    reply_rect = view.itemDelegate()._geometry(rect, index)["reply"]
    qtbot.mouseMove(view.viewport(), reply_rect.center())
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=reply_rect.center())
    assert window.compose_controller.reply_target == talk[6].mid
    menu = window.message_menu(window.current.tree_model.index_for(talk[1].mid).data(MessageRole))
    assert [a.text() for a in menu.actions() if a.text()] == ["Reply", "Quote", "Copy text", "Copy link",
                                                              "Open thread", "Message Ann…", "React", "Pin"]
    next(a for a in menu.actions() if a.text() == "Copy link").trigger()
    link = QGuiApplication.clipboard().text()
    assert link == f"m2mc://message/{window.current.gid}/{ANN.pid}:2"
    next(a for a in menu.actions() if a.text() == "Quote").trigger()
    assert window.compose_controller.reply_target == talk[1].mid
    assert window.conversation.compose.toPlainText().startswith("> Did you visit Chennai?")
    window.navigation.open_link(link)  # another member's app opens the same reference
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == talk[1].mid)  # read from the store


# -- defect 2: dialogs open with focus on OK ------------------------------------------------------

def test_a_name_typed_into_the_first_dialog_is_the_name_stored(qtbot, backend):
    from m2mc.app.chat import ask_display_name

    typed = []

    def type_name():
        dialog = QApplication.activeModalWidget()
        field = dialog.focusWidget()
        typed.append(type(field).__name__)
        QTest.keyClicks(field, "Ann Lee")  # the space must not press a button
        QTest.keyClick(field, Qt.Key.Key_Return)

    QTimer.singleShot(200, type_name)
    assert ask_display_name(backend, "root")
    assert typed == ["QLineEdit"]
    assert backend.manager.name == "Ann Lee" and backend.name == "Ann Lee"


def test_every_dialog_starts_in_its_first_field_and_enter_accepts_only_valid_input(qtbot, backend):
    poker = backend.manager.inject_group("Poker", members=(BOB,), passphrase="correct horse battery")
    name = NameDialog("root")
    create = CreateGroupDialog(backend)
    join = JoinDialog(backend)
    passphrase = ConfirmJoinDialog(backend, poker)
    for dialog, first in ((name, name.name_edit), (create, create.desc_edit), (join, join.gid_edit),
                          (passphrase, passphrase.passphrase_edit)):
        qtbot.addWidget(dialog)
        dialog.show()
        qtbot.waitExposed(dialog)
        assert dialog.focusWidget() is first, type(dialog).__name__
    name.name_edit.clear()
    QTest.keyClick(name.focusWidget(), Qt.Key.Key_Return)
    assert name.isVisible() and name.error_label.text() == "Please enter a display name."
    QTest.keyClicks(create.focusWidget(), "Board games")
    QTest.keyClick(create.focusWidget(), Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: create.created_gid is not None)
    QTest.keyClicks(passphrase.focusWidget(), "wrong guess")
    QTest.keyClick(passphrase.focusWidget(), Qt.Key.Key_Return)
    qtbot.waitUntil(passphrase.error_label.isVisible)
    assert passphrase.error_label.text() == "That passphrase does not open this group."
    assert passphrase.focusWidget() is passphrase.passphrase_edit


# -- defect 3: deep threads disappear; a group opens blank ----------------------------------------

def deep_chain(gid, depth):
    chain = [message(gid, ANN, 1, "Root of a long argument about tabs and spaces")]
    for level in range(1, depth):
        member = (BOB, CAT, ANN)[level % 3]
        chain.append(message(gid, member, 100 + level, f"Reply at depth {level}: I still think the other way.",
                             chain[-1].mid))
    return chain


def test_a_50_deep_thread_is_readable_at_800_px(qtbot, window, backend):
    chain = deep_chain(GID, 50)
    open_group(qtbot, window, backend, chain)
    window.resize(800, 600)
    window.conversation.tree_view.expandAll()
    qtbot.waitUntil(lambda: window.conversation.tree_view.viewport().width() < 600)
    view = window.conversation.tree_view
    delegate = view.itemDelegate()
    width = view.viewport().width()
    assert view.horizontalScrollBar().maximum() == 0
    for msg in chain:
        index = window.conversation._view_index(msg.mid)
        view.scrollTo(index)
        assert view.visualRect(index).left() + 300 <= width, msg.text  # room for the text at every depth
    for msg in chain:
        index = window.conversation._view_index(msg.mid)
        view.scrollTo(index)
        geometry = delegate._geometry(view.visualRect(index), index)
        assert geometry["left"] + geometry["width"] <= width, msg.text  # nothing beyond the right edge
        assert geometry["width"] >= 0.5 * width - 200  # a column, not one word per line
        layout = delegate.body_layout(index)
        assert all(layout.lineAt(i).naturalTextWidth() <= geometry["width"] + 1 for i in range(layout.lineCount()))
        depth = index.data(Qt.ItemDataRole.UserRole + 4)
        assert (geometry["quote"] is not None) == (depth > 8)  # deeper replies say what they answer
    deepest = window.conversation._view_index(chain[-1].mid)
    view.scrollTo(deepest)
    save_screenshot(window, "deep-thread-800.png")


def test_a_group_with_history_never_opens_blank(qtbot, window, backend):
    rng_texts = [("word " * (5 + i % 40)).strip() for i in range(120)]
    history = []
    for i, text in enumerate(rng_texts):
        parent = history[i - 3].mid if i % 4 == 3 else None
        history.append(message(GID, (ANN, BOB, CAT)[i % 3], i + 1, text, parent))
    history.append(message(GID, ANN, 500, "A long last word. " * 60))
    open_group(qtbot, window, backend, history)
    view = window.conversation.tree_view
    height = view.viewport().height()
    for y in (3, height // 2, height - 3):
        assert view.indexAt(QPoint(60, y)).isValid(), f"blank at y={y}"
    last = window.conversation._view_index(history[-1].mid)
    assert view.visualRect(last).intersects(view.viewport().rect())


# -- unread state survives a restart; the "New messages" divider ----------------------------------

def test_unread_state_survives_a_restart_and_the_group_opens_at_the_first_unread(qtbot, backend):
    from m2mc.ui.main_window import MainWindow

    talk = lunch_conversation(GID)
    first = MainWindow(backend)
    qtbot.addWidget(first)
    first.resize(1000, 650)
    first.show()
    open_group(qtbot, first, backend, talk[:4])
    backend.manager.inject_messages(first.current.gid, talk[4:])
    qtbot.waitUntil(lambda: len(first.current.tree.unread) == 4)
    first.conversation.select_message(talk[4].mid)  # read one of the four
    assert len(first.current.tree.unread) == 3
    first.close()  # closing saves the read marks

    again = MainWindow(backend)  # a restart: a new window over the stored state
    qtbot.addWidget(again)
    again.resize(1000, 650)
    again.show()
    again.start()
    qtbot.waitUntil(lambda: again.current is not None and again.current.loaded)
    assert again.current.tree.unread == {talk[5].mid, talk[6].mid, talk[7].mid}
    assert again.current.divider == talk[5].mid
    view = again.conversation.tree_view
    top = view.visualRect(again.conversation._view_index(talk[5].mid)).top()
    assert 0 <= top < view.viewport().height() // 2  # opens at the first unread
    save_screenshot(again, "unread-divider.png")


def test_a_group_joined_and_never_opened_is_all_unread_after_a_restart(qtbot, backend):
    """Issue 32 item 1, as a newcomer meets it: join a group of 300 messages, quit before opening it, come
    back: all 300 are unread (they were stored as read before)."""
    from m2mc.ui.main_window import MainWindow
    from m2mc.ui.widgets import UnreadCountRole

    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                 history=lunch_conversation(GID))
    backlog = [message(GID, (ANN, BOB, CAT)[n % 3], n // 3 + 1, f"old news {n}") for n in range(300)]
    joined = backend.manager.inject_group("Big team", members=(ANN, BOB, CAT, me), joined=True, history=backlog,
                                          unread=True).gid

    def start_window():
        window = MainWindow(backend)
        qtbot.addWidget(window)
        window.resize(1000, 650)
        window.show()
        window.start()
        qtbot.waitUntil(lambda: len(window.session_controller.sessions) == 2 and all(
            s.loaded for s in window.session_controller.sessions.values()))
        return window

    first = start_window()
    big = first.session_controller.sessions[joined]
    assert first.current is not big  # never opened
    qtbot.waitUntil(lambda: first.groups_pane.item(big.gid).data(UnreadCountRole) == 300)
    first.close()  # quit before reading it

    again = start_window()
    big = again.session_controller.sessions[joined]
    qtbot.waitUntil(lambda: again.groups_pane.item(big.gid).data(UnreadCountRole) == 300)
    assert again.windowTitle() == "(300) M2MC chat"
    assert backend.manager.read_marks(joined) in ([], None)


# -- defect 4: long texts -------------------------------------------------------------------------

def test_long_texts_can_be_read_in_full(qtbot, window, backend):
    tail = "THE-HIDDEN-TAIL"
    long_text = ("All work and no play makes Jack a dull boy. " * 120) + tail
    url = "https://example.org/" + "a1b2c3d4" * 40
    hebrew = "שלום לכולם, מה שלומכם היום? " * 6 + "\nתודה"
    history = [message(GID, ANN, 1, long_text), message(GID, BOB, 1, url), message(GID, CAT, 1, hebrew)]
    open_group(qtbot, window, backend, history)
    view = window.conversation.tree_view
    delegate = view.itemDelegate()
    index = window.conversation._view_index(history[0].mid)
    # Collapsed with "Show more"; a click shows every character.
    assert delegate.body_layout(index).text() != long_text
    view.scrollTo(index, view.ScrollHint.PositionAtTop)
    more = delegate._geometry(view.visualRect(index), index)["more"]
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=more.center())
    assert delegate.body_layout(index).text() == long_text.replace("\n", "\u2028")
    # Taller than the view, it scrolls by pixels: the reader gets to its end.
    window.resize(900, 420)
    qtbot.waitUntil(lambda: view.viewport().height() < 300)
    view.scrollTo(index, view.ScrollHint.PositionAtTop)
    rect = view.visualRect(index)
    assert rect.height() > view.viewport().height()
    top = rect.top()
    qtbot.keyClick(view.viewport(), Qt.Key.Key_PageDown)
    view.verticalScrollBar().setValue(view.verticalScrollBar().value() + 60)
    assert top - 80 < view.visualRect(index).top() < top  # moved by pixels, not a whole message
    # A word longer than the line wraps anywhere.
    index = window.conversation._view_index(history[1].mid)
    layout = delegate.body_layout(index)
    width = delegate._text_width(0)
    assert layout.lineCount() > 1
    assert all(layout.lineAt(i).naturalTextWidth() <= width + 1 for i in range(layout.lineCount()))
    assert delegate._geometry(view.visualRect(index), index)["body"].links[0][2] == url
    # Right to left runs right to left.
    index = window.conversation._view_index(history[2].mid)
    layout = delegate.body_layout(index)
    assert layout.textOption().textDirection() == Qt.LayoutDirection.RightToLeft
    last = layout.lineAt(layout.lineCount() - 1)  # a short last line sits at the right edge
    assert last.naturalTextWidth() < width / 2 and last.naturalTextRect().right() > width - 20


# -- defect 5: notifications and windows ----------------------------------------------------------

def test_notification_colours_are_readable_in_light_and_dark(qtbot):
    app = QApplication.instance()
    saved = app.palette()
    try:
        for window_color, text in (("#202124", "#f1f1f1"), ("#f6f6f6", "#111111")):
            palette = QPalette(saved)
            palette.setColor(QPalette.ColorRole.Window, QColor(window_color))
            palette.setColor(QPalette.ColorRole.WindowText, QColor(text))
            palette.setColor(QPalette.ColorRole.Text, QColor(text))
            palette.setColor(QPalette.ColorRole.ToolTipBase, QColor("#ffffdc"))  # Qt's pale yellow
            palette.setColor(QPalette.ColorRole.ToolTipText, QColor(text))
            app.setPalette(palette)
            apply_theme(app)
            result = app.palette()
            assert contrast(result.color(QPalette.ColorRole.ToolTipBase),
                            result.color(QPalette.ColorRole.ToolTipText)) >= 4.5, window_color
    finally:
        app.setPalette(saved)
        apply_theme(app)


def contrast(a: QColor, b: QColor) -> float:
    def luminance(color: QColor) -> float:
        def channel(value: float) -> float:
            return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4
        return 0.2126 * channel(color.redF()) + 0.7152 * channel(color.greenF()) + 0.0722 * channel(color.blueF())
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_shortcuts_work_from_the_discovery_window_which_does_not_cover_the_main_window(qtbot, window, backend):
    window.move(0, 0)
    window.start()
    assert not window.discovery.isVisible()  # not pushed over the main window on first start
    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk[:6])
    backend.manager.inject_messages(window.current.gid, talk[6:])
    qtbot.waitUntil(lambda: len(window.current.tree.unread) == 2)
    window.join_controller.show_discovery()
    qtbot.waitExposed(window.discovery)
    assert not window.discovery.frameGeometry().intersects(window.frameGeometry())
    activate(qtbot, window.discovery)
    window.discovery.table.setFocus()
    qtbot.keyClick(window.discovery.table, Qt.Key.Key_U, Qt.KeyboardModifier.ControlModifier)  # next unread
    assert window.conversation.selected_message().mid == talk[6].mid
    window.discovery.close()


# -- defect 6: small things -----------------------------------------------------------------------

def test_left_members_lock_and_peers_seen(qtbot, window, backend):
    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk[:2], private=True)
    assert window.groups_pane.item(window.current.gid).icon().pixmap(16, 16).toImage() == \
        __import__("m2mc.ui.resources", fromlist=["icon"]).icon("lock").pixmap(16, 16).toImage()
    assert window.status_pane.peers_label.text() == "3 peers seen"
    backend.manager.inject_member(window.current.gid, CAT, joined=False)
    qtbot.waitUntil(lambda: any(window.members_pane.member_list.item(i).data(Qt.ItemDataRole.UserRole) == "left"
                                for i in range(window.members_pane.member_list.count())))
    left = next(window.members_pane.member_list.item(i) for i in range(window.members_pane.member_list.count())
                if window.members_pane.member_list.item(i).data(Qt.ItemDataRole.UserRole) == "left")
    assert left.text() == "Cat — left the group" and not left.icon().isNull()
    assert left.flags() & Qt.ItemFlag.ItemIsEnabled  # readable, not greyed out
    assert window.status_pane.peers_label.text() == "3 peers seen"  # Cat's machine is still there


# -- presence ---------------------------------------------------------------------------------------

def test_presence_shows_in_the_members_pane_and_follows_changes(qtbot, window, backend):
    window.status_controller._presence_timer.setInterval(50)
    gid = open_group(qtbot, window, backend, lunch_conversation(GID)[:2]).gid
    manager = backend.manager

    def statuses():
        # (a member's role, "  · owner" after the creator's name, is not what this test looks at)
        return {window.members_pane.member_list.item(i).text().split("  · ")[0] for i in range(window.members_pane.member_list.count())}

    manager.pass_time(BEACON_INTERVAL + 1)  # every member's idle beacon has come
    qtbot.waitUntil(lambda: {"● Ann", "● Bob", "● Cat"} <= statuses())
    manager.set_online(CAT, False)  # Cat's app closed
    manager.pass_time(OFFLINE_AFTER + 1)
    manager.set_online(BOB, False)  # Bob's too, a little later: first away, then offline
    while manager.presence_of(gid)[BOB.pid] == "online":
        manager.pass_time(1.0)
    qtbot.waitUntil(lambda: {"● Ann", "◐ Bob", "○ Cat"} <= statuses())
    manager.set_online(CAT, True)  # back: heard at once
    qtbot.waitUntil(lambda: {"● Ann", "◐ Bob", "● Cat"} <= statuses())


# -- threads view, search, settings ------------------------------------------------------------------

def test_threads_view_lists_by_last_activity_and_opens_one_thread_live(qtbot, window, backend):
    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk[:7])
    threads = window.threads_pane.thread_list.model()
    qtbot.waitUntil(lambda: threads.rowCount() == 3)  # from the store
    first = [threads.index(r).data(MessageRole).text for r in range(threads.rowCount())]
    assert first == ["Lunch at the canteen at 12:30?", "Did you visit Chennai?", "Did you visit Delhi?"]
    summary = threads.index(1).data(Qt.ItemDataRole.UserRole + 8)
    assert (summary.replies, summary.participants) == (3, ("Ann", "Cat"))
    late = message(GID, BOB, 9, "Delhi again next year!", talk[2].mid)
    backend.manager.inject_messages(window.current.gid, [late])  # an old thread comes back to the top, live
    qtbot.waitUntil(lambda: threads.index(0).data(MessageRole).mid == talk[0].mid)
    summary = threads.index(0).data(Qt.ItemDataRole.UserRole + 8)
    assert (summary.replies, summary.unread, summary.last.mid) == (2, 1, late.mid)
    rect = window.threads_pane.thread_list.visualRect(threads.index(0))
    qtbot.mouseClick(window.threads_pane.thread_list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(window.conversation.thread_bar.isVisible)
    model = window.conversation.tree_view.model()
    assert model.rowCount() == 1 and model.index(0, 0).data(MessageRole).mid == talk[0].mid
    more = message(GID, CAT, 9, "Take me along", late.mid)
    backend.manager.inject_messages(window.current.gid, [more])
    qtbot.waitUntil(lambda: window.current.thread.index_for(more.mid).isValid())
    window.conversation.tree_view.expandAll()
    assert window.conversation._view_index(more.mid).isValid()
    save_screenshot(window, "thread-open.png")
    qtbot.mouseClick(window.conversation.thread_bar.back_button, Qt.MouseButton.LeftButton)
    assert not window.conversation.thread_bar.isVisible() and window.conversation.tree_view.model() is window.current.tree_model


def test_search_highlights_counts_and_f3_walks_the_matches(qtbot, window, backend):
    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk)
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    qtbot.keyClicks(window.conversation.filter_edit, "december")
    assert window.conversation.match_label.text() == "2 matches"
    assert window.conversation.tree_view.itemDelegate().highlight == "december"
    qtbot.keyClick(window.conversation.filter_edit, Qt.Key.Key_F3)
    assert window.conversation.selected_message().mid == talk[4].mid
    qtbot.keyClick(window.conversation.filter_edit, Qt.Key.Key_F3)
    assert window.conversation.selected_message().mid == talk[5].mid
    qtbot.keyClick(window.conversation.filter_edit, Qt.Key.Key_F3, Qt.KeyboardModifier.ShiftModifier)
    assert window.conversation.selected_message().mid == talk[4].mid and window.conversation.match_label.text() == "1 of 2"
    save_screenshot(window, "search.png")


def test_display_name_notifications_per_group_and_invites(qtbot, window, backend):
    talk = lunch_conversation(GID)
    gid = open_group(qtbot, window, backend, talk[:2]).gid

    def rename():
        dialog = QApplication.activeModalWidget()
        QTest.keyClicks(dialog.focusWidget(), "Dana Q")
        QTest.keyClick(dialog.focusWidget(), Qt.Key.Key_Return)

    QTimer.singleShot(200, rename)
    window.menus.name_action.trigger()
    qtbot.waitUntil(lambda: backend.name == "Dana Q")
    assert backend.manager.name == "Dana Q"

    notified = []
    window.notifier.notify = lambda title, body, **_how: notified.append(title)
    backend.manager.inject_messages(gid, talk[2:3])
    qtbot.waitUntil(lambda: len(window.current.tree) == 3)
    assert notified == ["Bob in Travel & lunch"]
    window.menus.notify_actions["mentions"].trigger()  # this group: mentions only
    assert window.menus.notify_actions["mentions"].isChecked()
    backend.manager.inject_messages(gid, talk[3:4])
    qtbot.waitUntil(lambda: len(window.current.tree) == 4)
    assert notified == ["Bob in Travel & lunch"]

    window.menus.invite_action.trigger()  # the invite (with this peer's address) comes from the middleware's thread
    qtbot.waitUntil(lambda: gid in QGuiApplication.clipboard().text())
    invite = QGuiApplication.clipboard().text()
    assert "Travel & lunch" in invite and "&peer=127.0.0.1:" in invite
    board = backend.manager.inject_group("Board games", members=(BOB,)).gid

    def paste_invite():
        dialog = QApplication.activeModalWidget()
        assert isinstance(dialog, JoinDialog) and board in dialog.gid_edit.text()
        ok = dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.click()  # looks the group up; a second click, on Join, joins

        def join_once_shown():
            if ok.text() == "Join" and ok.isEnabled():
                ok.click()
            else:
                QTimer.singleShot(20, join_once_shown)

        join_once_shown()

    QGuiApplication.clipboard().setText(f"Join “Board games” on M2MC: m2mc://join/{board}?desc=Board%20games")
    QTimer.singleShot(200, paste_invite)
    window.menus.join_invite_action.trigger()
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == board)


def test_a_stream_of_new_threads_is_trimmed_while_a_thread_is_open_and_the_reader_keeps_their_place(
        qtbot, window, backend, monkeypatch):
    import m2mc.ui.controllers.sessions as sessions

    monkeypatch.setattr(sessions, "TRIM_SLACK", 0)
    history = [message(GID, (ANN, BOB, CAT)[i % 3], i + 1, f"Thread {i}: " + "words " * (i % 9)) for i in range(40)]
    session = open_group(qtbot, window, backend, history)
    session.tree.window = 25
    assert window.conversation.open_thread(history[-3].mid)
    qtbot.waitUntil(lambda: session.thread is not None)
    fresh = [message(GID, BOB, 100 + i, f"New thread {i}") for i in range(30)]
    backend.manager.inject_messages(session.gid, fresh)
    qtbot.waitUntil(lambda: len(session.tree) == 70)
    assert session.tree.shown_thread_count() < 60 and session.thread.index_for(history[-3].mid).isValid()
    window.conversation.close_thread()
    qtbot.waitUntil(lambda: not window.conversation._follow_timer.isActive())  # done following the end
    view = window.conversation.tree_view
    target = window.conversation._view_index(fresh[5].mid)
    view.scrollTo(target, view.ScrollHint.PositionAtTop)
    view.verticalScrollBar().setValue(view.verticalScrollBar().value() + 7)
    assert view.verticalScrollBar().value() < view.verticalScrollBar().maximum() - 100  # reading, not at the end
    before = view.indexAt(QPoint(4, 2)).data(MessageRole).mid, view.visualRect(view.indexAt(QPoint(4, 2))).top()
    more = [message(GID, CAT, 200 + i, f"Later thread {i}") for i in range(25)]
    backend.manager.inject_messages(session.gid, more)
    qtbot.waitUntil(lambda: len(session.tree) == 95)
    top = view.indexAt(QPoint(4, 2))
    assert (top.data(MessageRole).mid, view.visualRect(top).top()) == before
    assert session.tree.hidden_threads > 0


class FakeBus:
    """The session bus as ui.notifier uses it: every call written down; a notification service or none."""

    def __init__(self, service=True):
        self.service, self.calls, self.listened = service, [], []

    def has_name(self, name):
        return self.service

    def listen(self, rule, handler):
        self.listened.append((rule, handler))

    def call_method(self, service, path, interface, method, signature=None, body=()):
        assert self.service, "no service: nothing may be called"
        self.calls.append((service, path, method, signature, body))
        return (len(self.calls),)


def test_notifications_go_to_the_desktop_service_and_a_click_opens_what_they_are_about(qtbot):
    from PySide6.QtWidgets import QWidget

    from m2mc.ui.notifier import DesktopNotifications, Notifier

    widget = QWidget()
    qtbot.addWidget(widget)
    bus, opened = FakeBus(), []
    notifier = Notifier(widget, DesktopNotifications(bus), open_target=opened.append)
    assert notifier.notify("Bob in Lunch", "It's at 12:30\nsee you", target=("g1", ("bob", 3)))
    assert notifier.last_via == "desktop"
    service, path, method, signature, body = bus.calls[0]
    assert (service, path, method, signature) == ("org.freedesktop.Notifications", "/org/freedesktop/Notifications",
                                                  "Notify", "susssasa{sv}i")
    assert body[:6] == ("M2MC chat", 0, "m2mc-chat", "Bob in Lunch", "It's at 12:30\nsee you", ["default", "Open"])
    assert not notifier.notify("again", "too soon", target=("g1", ("bob", 4)))  # at most one per few seconds
    assert notifier.notify("Ann (direct message)", "hi", target=("dm:a:b", ("ann", 1)))  # another conversation
    invoked = next(handler for rule, handler in bus.listened if rule.header_fields["member"] == "ActionInvoked")
    invoked(type("Signal", (), {"body": (1, "default")}))
    assert opened == [("g1", ("bob", 3))]
    absent = DesktopNotifications(FakeBus(service=False))
    assert not absent.available and not absent.notify("t", "b")


def test_hovering_over_the_time_shows_the_date_and_time(qtbot, window, backend):
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QToolTip

    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk[:2])
    view = window.conversation.tree_view
    index = window.conversation._view_index(talk[1].mid)
    time_rect = view.itemDelegate()._geometry(view.visualRect(index), index)["time"]
    event = QHelpEvent(QEvent.Type.ToolTip, time_rect.center(), view.viewport().mapToGlobal(time_rect.center()))
    QApplication.sendEvent(view.viewport(), event)
    qtbot.waitUntil(QToolTip.isVisible)
    assert "2023" in QToolTip.text() and ":" in QToolTip.text()  # 14 November 2023, 22:13:22 and the weekday


def test_hovering_over_a_message_shows_no_developer_ids(qtbot, window, backend):
    from PySide6.QtCore import QEvent
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QToolTip

    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk[:2])
    view = window.conversation.tree_view
    index = window.conversation._view_index(talk[1].mid)
    QToolTip.hideText()
    qtbot.waitUntil(lambda: not QToolTip.isVisible())
    from PySide6.QtCore import QPoint

    geometry = view.itemDelegate()._geometry(view.visualRect(index), index)
    on_text = QPoint(geometry["left"] + 8, geometry["body_top"] + 6)
    event = QHelpEvent(QEvent.Type.ToolTip, on_text, view.viewport().mapToGlobal(on_text))
    QApplication.sendEvent(view.viewport(), event)
    qtbot.wait(300)
    shown = QToolTip.text() if QToolTip.isVisible() else ""
    assert talk[1].sender not in shown and talk[1].sender[:8] not in shown and "message " not in shown


def test_a_click_that_selects_a_message_does_not_open_its_link(qtbot, window, backend):
    url = "https://example.org/menu"
    history = [message(GID, ANN, 1, f"{url} is the menu"), message(GID, BOB, 1, f"{url}/2 is the other")]
    open_group(qtbot, window, backend, history)
    view = window.conversation.tree_view
    opened: list[str] = []
    view.link_activated.disconnect()
    view.link_activated.connect(opened.append)

    def link_point(mid):
        index = window.conversation._view_index(mid)
        geometry = view.itemDelegate()._geometry(view.visualRect(index), index)
        return QPoint(geometry["left"] + 12, geometry["body_top"] + 6)

    first = history[0].mid
    view.setCurrentIndex(window.conversation._view_index(history[1].mid))
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=link_point(first))
    assert selected(window).mid == first and opened == []  # the click selected the message
    qtbot.wait(QApplication.doubleClickInterval() + 50)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=link_point(first))
    assert opened == [url]  # clicked again, now that it is selected
    qtbot.wait(QApplication.doubleClickInterval() + 50)
    second = history[1].mid
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier,
                     pos=link_point(second))
    assert opened == [url, f"{url}/2"]  # Ctrl+click opens at once


def test_a_new_empty_group_says_how_to_start_and_the_hint_goes_with_the_first_message(qtbot, window, backend):
    from m2mc.ui.panes.conversation import EMPTY_GROUP_HINT

    open_group(qtbot, window, backend, [], desc="Brand new")
    view = window.conversation.tree_view
    qtbot.waitUntil(lambda: view.empty_hint == EMPTY_GROUP_HINT)
    empty = view.viewport().grab().toImage()
    save_screenshot(window, "empty-group.png")
    background = empty.pixelColor(2, 2)
    inked = sum(1 for x in range(0, empty.width(), 3) for y in range(0, empty.height(), 3)
                if empty.pixelColor(x, y) != background)
    assert inked > 50, "the hint is drawn"
    qtbot.keyClicks(window.conversation.compose, "Hello, first!")
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: view.model().rowCount() == 1)
    # With a row, the hint is not drawn: only the one message's pixels remain near the centre.
    centre = view.viewport().grab().toImage()
    middle_y = centre.height() // 2
    assert all(centre.pixelColor(x, middle_y) == centre.pixelColor(2, middle_y) for x in range(0, centre.width(), 2))


def test_presence_marks_have_colours_a_badge_and_a_legend(qtbot, window, backend):
    from m2mc.ui.member_list import PRESENCE_COLOURS

    window.status_controller._presence_timer.setInterval(50)
    open_group(qtbot, window, backend, lunch_conversation(GID)[:2])
    manager = backend.manager
    manager.pass_time(BEACON_INTERVAL + 1)
    manager.set_online(CAT, False)
    manager.pass_time(OFFLINE_AFTER + 1)

    def row(name):
        items = [window.members_pane.member_list.item(i) for i in range(window.members_pane.member_list.count())]
        return next((item for item in items if item.text().split("  · ")[0].endswith(f" {name}")), None)

    qtbot.waitUntil(lambda: row("Cat") is not None and row("Cat").data(Qt.ItemDataRole.UserRole) == "offline")
    legend = window.members_pane.presence_legend
    assert legend.isVisible() and all(word in legend.text() for word in ("online", "away", "offline"))
    # The badge's colour is in the icon's bottom-right corner: green for Ann, grey ring for Cat.
    def badge_colours(name):
        image = row(name).icon().pixmap(20, 20).toImage()
        return {image.pixelColor(x, y).name() for x in range(10, 20) for y in range(10, 20)}

    assert PRESENCE_COLOURS["online"] in badge_colours("Ann")
    assert PRESENCE_COLOURS["offline"] in badge_colours("Cat") and PRESENCE_COLOURS["online"] not in badge_colours("Cat")
    assert row("Cat").data(Qt.ItemDataRole.AccessibleTextRole) == "Cat, offline"
    save_screenshot(window.members_pane, "members-presence.png")


def test_replies_syncing_in_above_the_reader_do_not_move_what_they_read(qtbot, window, backend):
    # A big join syncs history in while the newcomer reads: replies land in threads above the
    # rows on show, and every one of them pushed the reader's text down the screen.
    history = [message(GID, (ANN, BOB, CAT)[i % 3], i + 1, f"Thread {i}: " + "words " * (i % 9)) for i in range(60)]
    session = open_group(qtbot, window, backend, history)
    qtbot.waitUntil(lambda: not window.conversation._follow_timer.isActive())
    view = window.conversation.tree_view
    view.scrollTo(window.conversation._view_index(history[40].mid), view.ScrollHint.PositionAtTop)
    view.verticalScrollBar().setValue(view.verticalScrollBar().value() + 5)
    assert view.verticalScrollBar().value() < view.verticalScrollBar().maximum() - 100
    top = view.indexAt(QPoint(4, 2))
    before = top.data(MessageRole).mid, view.visualRect(top).top()
    replies = [message(GID, (BOB, CAT)[i % 2], 300 + i, f"A late reply {i}", history[i].mid) for i in range(20)]
    backend.manager.inject_messages(session.gid, replies)
    qtbot.waitUntil(lambda: len(session.tree) == 80)
    qtbot.wait(50)
    top = view.indexAt(QPoint(4, 2))
    assert (top.data(MessageRole).mid, view.visualRect(top).top()) == before


def test_a_big_join_offers_to_mark_the_history_it_synced_read_and_keeps_live_talk_unread(qtbot, window, backend):
    import time

    from m2mc.ui.panes.conversation import CATCH_UP_MIN

    old = [message(GID, (ANN, BOB, CAT)[i % 3], i + 2, f"From last year {i}") for i in range(CATCH_UP_MIN + 50)]
    session = open_group(qtbot, window, backend, [message(GID, ANN, 1, "Welcome")])
    backend.manager.inject_messages(session.gid, old)  # the history a join syncs in
    bar = window.conversation.catch_up_bar
    qtbot.waitUntil(bar.isVisible)
    assert bar.label.text().startswith(f"{len(old):,} unread messages")
    save_screenshot(window, "catch-up-bar.png")
    now_ms = int(time.time() * 1000)
    live = [message(GID, ANN, 1000 + i, f"Said just now {i}", at=now_ms - 1000 * (1000 + i)) for i in range(3)]
    backend.manager.inject_messages(session.gid, live)
    qtbot.waitUntil(lambda: len(session.tree) == len(old) + 4)
    qtbot.mouseClick(bar.read_button, Qt.MouseButton.LeftButton)
    assert not bar.isVisible()
    assert session.tree.unread == {m.mid for m in live}
    # The marks reach the store: a restart does not bring the history back as unread.
    window.session_controller.save_read_marks()
    qtbot.waitUntil(lambda: len(backend.manager.read_marks(session.gid) or []) > 0)
    read = sum(hi - lo + 1 for lo, hi in backend.manager.read_marks(session.gid))
    assert read >= len(old)


def test_the_catch_up_offer_can_be_declined_and_does_not_come_back(qtbot, window, backend):
    from m2mc.ui.panes.conversation import CATCH_UP_MIN

    old = [message(GID, (ANN, BOB, CAT)[i % 3], i + 2, f"Old {i}") for i in range(CATCH_UP_MIN)]
    session = open_group(qtbot, window, backend, [message(GID, ANN, 1, "Welcome")])
    backend.manager.inject_messages(session.gid, old)
    bar = window.conversation.catch_up_bar
    qtbot.waitUntil(bar.isVisible)
    qtbot.mouseClick(bar.close_button, Qt.MouseButton.LeftButton)
    assert not bar.isVisible() and len(session.tree.unread) == CATCH_UP_MIN
    backend.manager.inject_messages(session.gid, [message(GID, BOB, 900, "one more old one")])
    qtbot.waitUntil(lambda: len(session.tree) == CATCH_UP_MIN + 2)
    qtbot.wait(400)
    assert not bar.isVisible()


def test_a_busy_group_s_threads_pane_keeps_up_while_messages_keep_coming(qtbot, window, backend):
    """Each arrival restarted the pane's refresh timer, so while a message came more often than the
    refresh interval (300 ms), a new thread never showed until the group fell quiet."""
    from PySide6.QtCore import QTimer

    talk = lunch_conversation(GID)
    open_group(qtbot, window, backend, talk[:7])
    threads = window.threads_pane.thread_list.model()
    qtbot.waitUntil(lambda: threads.rowCount() == 3)
    gid = window.current.gid
    backend.manager.inject_messages(gid, [message(GID, CAT, 20, "Who is in for the quiz tonight?")])
    chatter = iter(message(GID, BOB, 30 + n, f"still talking {n}", talk[0].mid) for n in range(40))
    stream = QTimer(interval=100)  # a reply every 100 ms in another thread, for 4 s
    stream.timeout.connect(lambda: backend.manager.inject_messages(gid, [next(chatter)]))
    stream.start()
    try:
        qtbot.waitUntil(lambda: any(threads.index(r).data(MessageRole).text == "Who is in for the quiz tonight?"
                                    for r in range(threads.rowCount())), timeout=2500)
    finally:
        stream.stop()

