"""@mentions and notification levels in the app (issue 32 item 6), with real keys and clicks on Xvfb.

The app's peer is Dana; Ann, Bob and Cat are the in-memory LAN's other peers, so what Dana
sends is what their peers receive, signed, and what they write reaches Dana as it would.
"""

from PySide6.QtCore import Qt
from PySide6.QtGui import QContextMenuEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from conftest import ANN, BOB, CAT, lunch_conversation, message, save_screenshot
from m2mc.middleware.mentions import token
from m2mc.middleware.types import Member

GID = ""


def open_group(qtbot, window, backend, history, desc="Travel & lunch"):
    me = Member(backend.pid, backend.name)
    group = backend.manager.inject_group(desc, members=(ANN, BOB, CAT, me), joined=True, history=history)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == len(history))
    qtbot.waitUntil(lambda: window.conversation.mention_completer.model.rowCount() == 3)
    return group.gid


def peer_history(backend, member, gid):
    return backend.manager.peer(member).history(gid)


def save_screen(window, name):
    from PySide6.QtGui import QGuiApplication

    from conftest import SCREENSHOTS

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    frame = window.frameGeometry()
    shot = QGuiApplication.primaryScreen().grabWindow(0, frame.x(), frame.y(), frame.width(), frame.height())
    assert shot.save(str(SCREENSHOTS / name))


def notifications(window):
    told = []
    window.notifier.notify = lambda title, body, **_how: told.append((title, body))
    return told


def test_at_completes_a_member_and_the_message_carries_the_pid(qtbot, window, backend):
    gid = open_group(qtbot, window, backend, lunch_conversation(GID)[:2])
    window.conversation.compose.setFocus()
    qtbot.keyClicks(window.conversation.compose, "Lunch, @")
    popup = window.conversation.mention_completer.completer.popup()
    qtbot.waitUntil(popup.isVisible)
    assert [window.conversation.mention_completer.completer.completionModel().index(i, 0).data()
            for i in range(3)] == ["Ann", "Bob", "Cat"]
    QTest.keyClicks(popup, "b")  # keys go to the open list, which passes letters on to the box
    assert window.conversation.compose.toPlainText() == "Lunch, @b"
    qtbot.wait(300)  # painted on the screen, not only in Qt's backing store
    save_screen(window, "mentions-complete.png")  # the list is a window of its own: the screen shows both
    QTest.keyClick(popup, Qt.Key.Key_Down)  # Bob is the only match: Down stays on him
    QTest.keyClick(popup, Qt.Key.Key_Return)
    assert not popup.isVisible() and window.conversation.compose.toPlainText() == "Lunch, @Bob "
    # Down walks the list; Tab completes too, and typing on after it is ordinary text.
    qtbot.keyClicks(window.conversation.compose, "and @")
    qtbot.waitUntil(popup.isVisible)
    QTest.keyClick(popup, Qt.Key.Key_Down)
    QTest.keyClick(popup, Qt.Key.Key_Down)
    QTest.keyClick(popup, Qt.Key.Key_Tab)
    assert window.conversation.compose.toPlainText() == "Lunch, @Bob and @Cat " and window.conversation.compose.hasFocus()
    qtbot.keyClicks(window.conversation.compose, "at 12?")
    assert not popup.isVisible()
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.conversation.compose.toPlainText() == "")
    backend.manager.lan.settle()
    (sent,) = [m for m in peer_history(backend, BOB, gid) if m.sender == backend.pid]
    assert sent.text == f"Lunch, {token(BOB.pid)} and {token(CAT.pid)} at 12?"
    assert sent.mentions == (BOB.pid, CAT.pid)
    # Esc closes the list and leaves the text as typed.
    qtbot.keyClicks(window.conversation.compose, "@A")
    qtbot.waitUntil(popup.isVisible)
    QTest.keyClick(popup, Qt.Key.Key_Escape)
    assert not popup.isVisible() and window.conversation.compose.toPlainText() == "@A"


def test_a_mention_of_me_is_highlighted_and_notifies_at_mentions_only_not_at_nothing(qtbot, window, backend):
    gid = open_group(qtbot, window, backend, lunch_conversation(GID)[:2])
    told = notifications(window)
    window.menus.notify_actions["mentions"].trigger()  # Conversation → Notifications → Mentions only
    assert window.session_controller.notify_level(gid) == "mentions"
    backend.manager.inject_messages(gid, [message(gid, BOB, 1, "Anyone for lunch?")])
    qtbot.waitUntil(lambda: len(window.current.tree) == 3)
    assert told == []  # not a mention
    mention = message(gid, BOB, 2, f"{token(backend.pid)} are you coming?")
    backend.manager.inject_messages(gid, [mention])
    qtbot.waitUntil(lambda: len(window.current.tree) == 4)
    assert told == [("Bob mentioned you in Travel & lunch", "@Dana are you coming?")]
    delegate = window.conversation.tree_view.itemDelegate()
    body = delegate._body(window.current.tree.message(mention.mid), delegate._text_width(0))
    assert body.layout.text().startswith("@Dana are you coming?")
    mine = [f for f in body.layout.formats() if f.format.background().color() == delegate.accent]
    assert [(f.start, f.length) for f in mine] == [(0, len("@Dana"))]
    assert delegate.mentions_me(window.current.tree.message(mention.mid))
    window.conversation.select_message(mention.mid)
    save_screenshot(window, "mentions-highlighted.png")
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)  # Reply: the banner names it
    assert window.conversation.compose_box.reply_banner.label.text() == "Replying to Bob: @Dana are you coming?"
    qtbot.keyClick(window.conversation.compose, Qt.Key.Key_Escape)

    window.menus.notify_actions["nothing"].trigger()
    stranger = "f" * 32  # no member: the token stays as it was written
    backend.manager.inject_messages(gid, [message(gid, CAT, 1, f"{token(backend.pid)} and {token(stranger)} too?")])
    qtbot.waitUntil(lambda: len(window.current.tree) == 5)
    assert len(told) == 1  # nothing: not even a mention
    body = delegate._body(window.current.tree.message((CAT.pid, 1)), delegate._text_width(0))
    assert body.layout.text() == f"@Dana and {token(stranger)} too?"
    window.menus.notify_actions["all"].trigger()
    backend.manager.inject_messages(gid, [message(gid, CAT, 2, "See you there")])
    qtbot.waitUntil(lambda: len(window.current.tree) == 6)
    assert told[-1][0] == "Cat in Travel & lunch"


def test_the_old_on_off_switch_is_migrated_and_the_group_menu_sets_the_level(qtbot, window, backend):
    settings = window.settings
    gid = open_group(qtbot, window, backend, [])
    key = f"notify/{gid}"
    for old, level in (("true", "all"), ("false", "mentions")):
        settings.setValue(key, old) if hasattr(settings, "setValue") else settings.__setitem__(key, old)
        assert window.session_controller.notify_level(gid) == level
        stored = settings.value(key) if hasattr(settings, "value") else settings[key]
        assert stored == level
    item = window.groups_pane.item(window.current.gid)
    rect = window.groups_pane.group_list.visualItemRect(item)
    # A right click, as the platform delivers it (QTest's clicks skip the context-menu event).
    viewport = window.groups_pane.group_list.viewport()
    QApplication.sendEvent(viewport, QContextMenuEvent(QContextMenuEvent.Reason.Mouse, rect.center(),
                                                       viewport.mapToGlobal(rect.center())))
    qtbot.waitUntil(lambda: window.groups_pane.group_menu is not None and window.groups_pane.group_menu.isVisible())
    menu = window.groups_pane.group_menu
    (notify_menu,) = [a.menu() for a in menu.actions() if a.menu() is not None]
    # Down to Notifications, Right into it: it opens with this group's level checked.
    QTest.keyClick(menu, Qt.Key.Key_Down)
    QTest.keyClick(menu, Qt.Key.Key_Right)
    qtbot.waitUntil(notify_menu.isVisible)
    assert [(a.text().replace("&", ""), a.isChecked()) for a in notify_menu.actions()] == [
        ("All messages", False), ("Mentions only", True), ("Nothing", False)]
    qtbot.wait(300)
    save_screen(window, "mentions-group-menu.png")  # menus are windows of their own
    notify_menu.setActiveAction(notify_menu.actions()[0])
    QTest.keyClick(notify_menu, Qt.Key.Key_Down)
    QTest.keyClick(notify_menu, Qt.Key.Key_Down)
    QTest.keyClick(notify_menu, Qt.Key.Key_Return)  # Nothing
    menu.close()
    assert window.session_controller.notify_level(gid) == "nothing" and window.menus.notify_actions["nothing"].isChecked()


def test_a_renamed_member_is_shown_by_the_new_name_and_the_mentions_list_jumps(qtbot, window, backend):
    talk = lunch_conversation(GID)
    gid = open_group(qtbot, window, backend, talk)
    about_bob = message(gid, ANN, 4, f"Ask {token(BOB.pid)} about the fort")
    for_me = message(gid, CAT, 4, f"{token(backend.pid)} what do you think?", talk[0].mid)
    backend.manager.inject_messages(gid, [about_bob, for_me])
    qtbot.waitUntil(lambda: len(window.current.tree) == len(talk) + 2)
    delegate = window.conversation.tree_view.itemDelegate()
    width = delegate._text_width(0)
    assert delegate._body(window.current.tree.message(about_bob.mid), width).layout.text() == "Ask @Bob about the fort"
    bob = backend.manager.peer(BOB)
    backend.manager.lan.run(bob, lambda core: core.set_name("Robert"))
    backend.manager.lan.settle()
    # no refresh asked: the app hears of the new member record itself
    qtbot.waitUntil(lambda: delegate.names.get(BOB.pid) == "Robert")
    assert delegate._body(window.current.tree.message(about_bob.mid), width).layout.text() == \
        "Ask @Robert about the fort"

    # Conversation → Mentions… (Ctrl+Shift+M): the one message that mentions me; a click opens it.
    window.conversation.select_message(talk[-1].mid)
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    qtbot.waitUntil(lambda: window.mentions.window is not None and window.mentions.window.list.count() == 1)
    mentions = window.mentions.window
    item = mentions.list.item(0)
    assert item.text().startswith("Cat in Travel & lunch") and "@Dana what do you think?" in item.text()
    save_screenshot(mentions, "mentions-list.png")
    rect = mentions.list.visualItemRect(item)
    qtbot.mouseClick(mentions.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: window.conversation.selected_message().mid == for_me.mid)  # its thread is read from the store


def test_a_busy_group_never_holds_back_a_mention_and_mentions_have_their_own_limit(qtbot):
    from PySide6.QtWidgets import QWidget

    from m2mc.ui.notifier import DesktopNotifications, Notifier

    widget = QWidget()
    qtbot.addWidget(widget)
    from test_conversation import FakeBus
    bus = FakeBus()
    notifier = Notifier(widget, DesktopNotifications(bus))
    assert notifier.notify("Bob in Lunch", "noon?")
    assert not notifier.notify("Cat in Lunch", "yes")  # at most one per few seconds
    assert notifier.notify("Cat mentioned you in Lunch", "@Dana?", mention=True)
    assert not notifier.notify("Cat mentioned you in Lunch", "@Dana??", mention=True)  # a flood of them too
    assert [body[3] for *_call, body in bus.calls] == ["Bob in Lunch", "Cat mentioned you in Lunch"]
