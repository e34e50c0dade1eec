"""Run inside a network namespace: the real m2mc-chat window, started as a user starts it (no
``--iface``), shows in its status bar that it is connected, that it is reconnecting when the
host's address changes, and connected again on the new address; with its interface gone it says
it is offline, and a message written then shows "queued" until the network is back.

Started by tests/ui/test_gui_roaming.py with ``ip netns exec``; argv: data dir.  It prints one JSON
line per step and waits on stdin for the test's next change.  Screenshots go to build/screenshots/.
"""

import os
import sys
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402

from m2mc.middleware.events import NetworkChanged  # noqa: E402
from tests.ui.gui_check_support import say, start_window, wait  # noqa: E402

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


def main():
    SHOTS.mkdir(parents=True, exist_ok=True)
    app, backend, window = start_window(sys.argv[1], "", (1000, 620))
    label = window.status_pane.address_label
    shown: list[str] = []

    def on_event(event):
        if isinstance(event, NetworkChanged):  # the status controller, connected first, has shown it
            shown.append(label.text())
            if event.state == "reconnecting":
                window.grab().save(str(SHOTS / "network-reconnecting.png"))

    backend.peer_event.connect(on_event)
    connected = wait(app, lambda: label.text().startswith("Connected"), timeout=15)
    say(step="connected", text=label.text() if connected else "", visible=label.isVisible())
    sys.stdin.readline()  # the test changed the address
    moved = wait(app, lambda: len(shown) >= 2 and shown[-1].startswith("Connected"), timeout=15)
    wait(app, lambda: False, timeout=0.3)  # the status bar's layout follows the new text
    window.grab().save(str(SHOTS / "network-connected-again.png"))
    say(step="moved", shown=shown, text=label.text(), ok=bool(moved))

    created: list[str] = []
    backend.call(lambda peer: peer.create_group("Roaming"), created.append)
    gid = wait(app, lambda: created and created[0], timeout=10)
    window.select_group(gid)
    wait(app, lambda: window.current is not None and window.current.gid == gid)
    say(step="created", gid=gid)
    sys.stdin.readline()  # a peer joined; then the test took the interface away
    offline = wait(app, lambda: label.text().startswith("Offline"), timeout=10)
    window.conversation.compose.setFocus()
    QTest.keyClicks(window.conversation.compose, "written offline")
    QTest.keyClick(window.conversation.compose, Qt.Key.Key_Return)
    delegate = window.conversation.tree_view.itemDelegate()
    queued = wait(app, lambda: delegate.queued, timeout=10)
    wait(app, lambda: False, timeout=0.3)
    window.grab().save(str(SHOTS / "network-offline-queued.png"))
    say(step="offline", text=label.text() if offline else "", queued=len(queued or ()))
    sys.stdin.readline()  # the interface is back
    back = wait(app, lambda: label.text().startswith("Connected") and not delegate.queued, timeout=15)
    say(step="back", text=label.text(), queued=len(delegate.queued), ok=bool(back))
    # A message sent as the link came back may be lost on the wire; the peer repairs it only while it
    # runs, as a user's app does, so the window stays until the test has seen it arrive.
    sys.stdin.readline()  # the peer has it (the middleware runs on its own thread meanwhile)
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
