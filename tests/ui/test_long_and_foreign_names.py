"""Long names and non-Latin text on real windows at 800 × 600 and 1920 × 1080: a member's name as
long as the rules allow (64 characters), a long group name, Arabic, CJK and emoji, each where a
person reads it (the message header, the members pane, the Threads pane)."""

from PySide6.QtCore import QEvent, QPoint, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QToolTip

from conftest import ANN, message, save_screenshot
from m2mc.middleware.rules import MAX_NAME
from m2mc.middleware.types import Member
from m2mc.ui.memory_backend import sim_member

LONG_NAME = "Maximilian Alexander Konstantin von Hohenzollern-Sigmaringen III"
LONG_GROUP = "Quarterly planning for the infrastructure migration and the data centre move 2027"
MAX = sim_member(LONG_NAME)
LAYLA = sim_member("ليلى عبد الرحمن")
TARO = sim_member("山田太郎")


def open_talk(qtbot, window, backend, width, height):
    me = Member(backend.pid, backend.name)
    group = backend.manager.inject_group(LONG_GROUP, members=(ANN, MAX, LAYLA, TARO, me), joined=True)
    gid = group.gid
    talk = [message(gid, ANN, 1, "Who is coming to the kick-off?"),
            message(gid, MAX, 1, "I am, and I will bring the slides about the migration plan.", (ANN.pid, 1)),
            message(gid, LAYLA, 1, "سأحضر أيضا، شكرا على الدعوة", (ANN.pid, 1)),
            message(gid, TARO, 1, "私も参加します。よろしくお願いします！", (ANN.pid, 1))]
    backend.manager.inject_messages(gid, talk)
    window.resize(width, height)
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == len(talk))
    qtbot.waitUntil(lambda: window.width() == width)
    qtbot.wait(50)  # the splitters lay out after the window's resize
    return window.current, talk


def header_of(window, session, mid):
    view = window.conversation.tree_view
    index = session.tree_model.index_for(mid)
    view.scrollTo(index)
    return view.itemDelegate()._geometry(view.visualRect(index), index)


def test_a_long_name_in_a_message_header_leaves_the_time_on_screen_and_is_whole_on_hover(qtbot, window, backend):
    assert len(LONG_NAME) == MAX_NAME
    session, talk = open_talk(qtbot, window, backend, 800, 600)
    save_screenshot(window, "long-name-800.png")
    geometry = header_of(window, session, talk[1].mid)
    header, time = geometry["header"], geometry["time"]
    assert time.width() > 0 and time.right() <= header.right(), "the time runs past the row's edge"
    shown = geometry["name"]
    assert shown.startswith("Maximilian Alexander") and shown.endswith("…")
    # The whole name is a hover away.
    viewport = window.conversation.tree_view.viewport()
    at = QPoint(header.left() + 20, header.center().y())
    QApplication.sendEvent(viewport, QHelpEvent(QEvent.Type.ToolTip, at, viewport.mapToGlobal(at)))
    qtbot.waitUntil(lambda: QToolTip.text() == LONG_NAME)
    QToolTip.hideText()

    # A name that fits is never cut, and a wide window shows the long one whole.
    assert header_of(window, session, talk[3].mid)["name"] == "山田太郎"
    window.resize(1920, 1080)
    qtbot.waitUntil(lambda: window.width() == 1920)
    qtbot.wait(50)
    assert header_of(window, session, talk[1].mid)["name"] == LONG_NAME
    save_screenshot(window, "long-name-1920.png")
    assert window.conversation.tree_view.viewport().rect().contains(header_of(window, session, talk[1].mid)["time"])


def test_replying_to_a_long_name_at_800_px_squeezes_no_pane(qtbot, window, backend):
    session, talk = open_talk(qtbot, window, backend, 800, 600)
    groups_width = window.groups_pane.width()
    assert groups_width >= 150
    window.conversation.tree_view.setFocus()
    window.conversation.tree_view.setCurrentIndex(session.tree_model.index_for(talk[1].mid))
    QTest.keyClick(window.conversation.tree_view, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)  # Reply to selected
    banner = window.conversation.compose_box.reply_banner
    qtbot.waitUntil(banner.isVisible)
    qtbot.wait(50)  # the splitter lays out again
    save_screenshot(window, "reply-to-long-name-800.png")
    assert banner.label.text().startswith(f"Replying to {LONG_NAME}: I am, and I will bring")
    assert window.groups_pane.width() == groups_width, "the banner's text pushed the groups pane aside"
    assert banner.mapTo(window, QPoint(banner.width(), 0)).x() <= window.width()
    assert banner.label.toolTip() == banner.label.text()  # cut on screen, whole on hover
