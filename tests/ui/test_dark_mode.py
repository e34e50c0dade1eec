"""The app follows the desktop's dark mode (issue 45): on a private session bus, a stand-in for
xdg-desktop-portal answers Settings.Read for org.freedesktop.appearance color-scheme and signals its
switch (SettingChanged), as GNOME's and KDE's portals do.  The app opens dark when the desktop
prefers dark, turns light and dark again with the desktop's switch, and its colours keep 4.5:1 in
the dark palette; without a portal, Qt's own reading of the desktop (styleHints) is followed."""

import shutil
import subprocess
import threading

import pytest
from PySide6.QtCore import Qt

from conftest import save_screenshot
from m2mc.ui.resources import APPEARANCE, PORTAL, apply_theme, is_dark, theme_colors
from test_contrast import AA, qss_color, ratio

pytestmark = pytest.mark.skipif(not shutil.which("dbus-daemon"), reason="dbus-daemon missing (packaging/system-deps.sh)")


class Portal(threading.Thread):
    """org.freedesktop.portal.Settings with one setting, served from a thread on its own connection."""

    def __init__(self, address, scheme):
        super().__init__(daemon=True)
        from jeepney.bus_messages import message_bus
        from jeepney.io.blocking import open_dbus_connection

        self.scheme = scheme
        self.connection = open_dbus_connection(address)
        self.connection.send_and_get_reply(message_bus.RequestName(PORTAL[0]))
        self.reads = 0
        self.stopping = False

    def run(self):
        from jeepney import MessageType, new_method_return

        while not self.stopping:
            try:
                message = self.connection.receive(timeout=0.1)
            except TimeoutError:
                continue
            except OSError:
                return
            fields = message.header.fields
            if message.header.message_type is MessageType.method_call and tuple(message.body) == APPEARANCE:
                self.reads += 1
                # As the portal answers Read: the value in a variant, in a variant.
                self.connection.send(new_method_return(message, "v", (("v", ("u", self.scheme)),)))
            elif message.header.message_type is MessageType.method_call:
                from jeepney import new_error
                self.connection.send(new_error(message, "org.freedesktop.portal.Error.NotFound"))
            del fields

    def switch(self, scheme):
        from jeepney import new_signal
        from jeepney.wrappers import DBusAddress

        self.scheme = scheme
        signal = new_signal(DBusAddress(PORTAL[1], interface=PORTAL[2]), "SettingChanged", "ssv",
                            (*APPEARANCE, ("u", scheme)))
        self.connection.send(signal)


@pytest.fixture
def portal_bus(monkeypatch, qapp):
    daemon = subprocess.Popen(["dbus-daemon", "--session", "--nofork", "--print-address=1"],
                              stdout=subprocess.PIPE, text=True)
    address = daemon.stdout.readline().strip()
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", address)
    palette = qapp.palette()
    qapp.setProperty("m2mcThemed", False)  # listen again: on this bus
    yield address
    from m2mc.ui.session_bus import SessionBus
    bus = SessionBus._opened.pop(address, None)
    if bus is not None and bus.connection is not None:
        bus.connection.close()
    qapp.setProperty("m2mcDarkByUs", False)
    qapp.setPalette(palette)
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS")
    apply_theme(qapp)
    daemon.terminate()
    daemon.wait(10)


def aa_in(app):
    colors = {name: qss_color(value) for name, value in theme_colors(app.palette()).items()}
    pairs = [("text", "base"), ("text", "panel"), ("selection_text", "selection"), ("muted", "panel"),
             ("muted", "selection"), ("accent_text", "accent"), ("unread_text", "unread")]
    return {f"{a} on {b}": round(ratio(colors[a], colors[b]), 2) for a, b in pairs}


def test_the_app_follows_the_desktops_dark_mode_through_the_portal_and_keeps_its_contrast(qtbot, qapp, portal_bus):
    qapp.setPalette(qapp.style().standardPalette())
    portal = Portal(portal_bus, scheme=1)  # prefer dark
    portal.start()
    try:
        apply_theme(qapp)  # as the app starts
        assert portal.reads >= 1 and is_dark(qapp.palette())
        assert min(aa_in(qapp).values()) >= AA, aa_in(qapp)
        from m2mc.ui.main_window import MainWindow
        from m2mc.ui.memory_backend import MemoryBackend
        window = MainWindow(MemoryBackend(name="Dana"))
        qtbot.addWidget(window)
        window.resize(900, 560)
        window.show()
        qtbot.waitExposed(window)
        save_screenshot(window, "dark-mode-followed.png")
        portal.switch(2)  # the desktop turns light
        qtbot.waitUntil(lambda: not is_dark(qapp.palette()), timeout=5000)
        assert min(aa_in(qapp).values()) >= AA, aa_in(qapp)
        portal.switch(1)  # and dark again
        qtbot.waitUntil(lambda: is_dark(qapp.palette()), timeout=5000)
        assert "#17181a" in qapp.styleSheet()  # the stylesheet was drawn anew from the dark palette
    finally:
        portal.stopping = True
        portal.join(5)
        portal.connection.close()


def test_without_a_portal_qts_reading_of_the_desktop_is_followed(monkeypatch):
    # Qt's reading is the platform theme's (GNOME's, KDE's); under bare Xvfb it is Unknown and
    # setColorScheme does nothing, so the app is given Qt's answer here.
    from m2mc.ui.resources import desktop_prefers_dark

    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)  # no bus, no portal

    class App:
        def __init__(self, scheme):
            self.scheme = scheme

        def styleHints(self):  # noqa: N802 - Qt's name
            return self

        def colorScheme(self):  # noqa: N802
            return self.scheme

    assert [desktop_prefers_dark(App(scheme)) for scheme in Qt.ColorScheme] == [None, False, True]
