"""Desktop notifications against a real notification daemon (issue 45): a private session bus
(dbus-daemon) with dunst on the Xvfb display.  While the window is not active, a message in a group
set to "All messages", a mention in a group set to "Mentions only" and a direct message each raise
exactly one notification, with the right title, as dunst prints it; a muted group and a plain message
in a mentions-only group raise none.  A real click on the notification (xdotool on dunst's window)
opens the conversation at the message.  The window title and the tray icon's tooltip show the unread
count."""

import os
import shutil
import subprocess
import time

import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QWidget

from conftest import ANN, BOB, CAT, SCREENSHOTS, activate, message
from m2mc.middleware.mentions import token
from m2mc.middleware.types import Member
from m2mc.ui.message_model import MessageRole
from real_input import XDOTOOL, xdo

pytestmark = pytest.mark.skipif(not (shutil.which("dbus-daemon") and shutil.which("dunst") and XDOTOOL),
                                reason="dbus-daemon, dunst or xdotool missing (packaging/system-deps.sh)")

DUNSTRC = "[global]\n    mouse_left_click = do_action, close_current\n"


class Dunst:
    """dunst on a private session bus: what it was asked to show (its -print output) and its window."""

    def __init__(self, tmp, address, process, out):
        self.tmp, self.address, self.process, self.out = tmp, address, process, out

    def summaries(self):
        text = self.out.read_text(errors="replace")
        return [line.split("summary: ", 1)[1].strip().strip("'") for line in text.splitlines()
                if line.strip().startswith("summary: ")]

    def ctl(self, *args):
        env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=self.address)
        return subprocess.run(["dunstctl", *args], env=env, capture_output=True, text=True, timeout=10).stdout


@pytest.fixture(scope="module")
def dunst(tmp_path_factory):
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    tmp = tmp_path_factory.mktemp("bus")
    daemon = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                              stdout=subprocess.PIPE, text=True)
    address = daemon.stdout.readline().strip()
    (tmp / "dunstrc").write_text(DUNSTRC)
    out = tmp / "dunst.out"
    env = dict(os.environ, DBUS_SESSION_BUS_ADDRESS=address)
    with open(out, "w") as sink:
        process = subprocess.Popen(["dunst", "-config", str(tmp / "dunstrc"), "-print"], env=env,
                                   stdout=sink, stderr=subprocess.STDOUT)
    probe = open_dbus_connection(address)
    deadline = time.monotonic() + 10
    while not probe.send_and_get_reply(message_bus.NameHasOwner("org.freedesktop.Notifications")).body[0]:
        assert time.monotonic() < deadline and process.poll() is None, out.read_text()
        time.sleep(0.05)
    probe.close()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DBUS_SESSION_BUS_ADDRESS", address)  # the app's one bus connection opens on it
        yield Dunst(tmp, address, process, out)
    from m2mc.ui.notifier import DesktopNotifications
    from m2mc.ui.session_bus import SessionBus
    bus = SessionBus._opened.pop(address, None)
    DesktopNotifications._shared.pop(id(bus), None)
    if bus is not None and bus.connection is not None:
        bus.connection.close()
    process.terminate()
    daemon.terminate()
    process.wait(10)
    daemon.wait(10)


def groups(backend, window):
    me = Member(backend.pid, backend.name)
    gids = {name: backend.manager.inject_group(name, members=(ANN, BOB, CAT, me), joined=True, history=[]).gid
            for name in ("Lunch", "Muted", "Quiet")}
    window.session_controller.set_notify_level(gids["Muted"], "nothing")
    window.session_controller.set_notify_level(gids["Quiet"], "mentions")
    return gids


def test_one_notification_each_for_a_group_message_a_mention_and_a_dm_none_when_muted_and_a_click_opens_it(
        qtbot, dunst, window, backend):
    gids = groups(backend, window)
    backend.manager.inject_direct(ANN, "hello")  # a conversation to come back to
    window.start()
    sessions = window.session_controller.sessions
    qtbot.waitUntil(lambda: len(sessions) == 3 and all(s.loaded for s in sessions.values()))
    assert window.notifier.desktop.available, "the app did not find dunst on the session bus"
    elsewhere = QWidget()
    qtbot.addWidget(elsewhere)
    elsewhere.show()
    activate(qtbot, elsewhere)  # the user is in another window
    assert not window.isActiveWindow()
    before = len(dunst.summaries())

    inject = backend.manager.inject_messages
    inject(gids["Lunch"], [message(gids["Lunch"], BOB, 1, "Lunch at noon?")])
    inject(gids["Muted"], [message(gids["Muted"], BOB, 1, "muted chatter")])
    inject(gids["Quiet"], [message(gids["Quiet"], CAT, 1, "a plain word in a mentions-only group")])
    qtbot.wait(300)
    inject(gids["Quiet"], [message(gids["Quiet"], CAT, 2, f"{token(backend.pid)} are you coming?")])
    qtbot.waitUntil(lambda: len(dunst.summaries()) >= before + 2, timeout=5000)
    qtbot.wait(500)  # nothing more comes
    assert sorted(dunst.summaries()[before:]) == ["Bob in Lunch", "Cat mentioned you in Quiet"]

    dunst.ctl("close-all")
    backend.manager.inject_direct(ANN, "are you there?")
    qtbot.waitUntil(lambda: len(dunst.summaries()) == before + 3, timeout=5000)
    assert dunst.summaries()[-1] == "Ann (direct message)"

    title_count = int(window.windowTitle().split(")")[0].lstrip("("))
    assert title_count >= 3 and window.notifier.tray.toolTip() == f"M2MC chat: {title_count} unread"

    # A real click on the notification, in dunst's window: the conversation opens at the message.
    found = subprocess.run([XDOTOOL, "search", "--onlyvisible", "--class", "Dunst"], capture_output=True,
                           text=True, timeout=10).stdout.split()
    assert found, "dunst shows no window"
    qtbot.wait(200)
    shot = QGuiApplication.primaryScreen().grabWindow(0)  # the whole display: dunst's window and ours
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot.copy(0, 0, 1920 if shot.width() >= 1920 else shot.width(), 400).save(str(SCREENSHOTS / "notification-dunst.png"))
    xdo(qtbot, "mousemove", "--window", found[-1], "20", "12", "click", "1")
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane, timeout=5000)
    conversation = window.direct_controller.current
    assert conversation is not None and conversation.peer == ANN.pid
    selected = window.direct_pane.view.currentIndex
    qtbot.waitUntil(lambda: selected().isValid() and selected().data(MessageRole).text == "are you there?",
                    timeout=5000)
    qtbot.waitUntil(window.isActiveWindow, timeout=5000)
    assert QApplication.activeWindow() is window
