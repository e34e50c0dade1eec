"""Run inside a network namespace that drops multicast and broadcast: the real m2mc-chat window finds
nobody and says why, refuses a bad address typed into "Add peer by address…", joins from a pasted invite,
and marks the inviter as reached directly.

Started by tests/ui/test_gui_reach.py with ``ip netns exec``; argv: data dir, interface address, the
invite.  It prints one JSON line per step.  Dialogs are driven with keys, as a person would: text typed
into the focused field, Enter to accept.  Screenshots go to build/screenshots/.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt, QTimer  # noqa: E402
from PySide6.QtGui import QGuiApplication  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402
from PySide6.QtWidgets import QDialog  # noqa: E402

from m2mc.ui.dialogs import AddPeerDialog  # noqa: E402
from m2mc.ui.discovery_window import DiscoveryWindow  # noqa: E402
from tests.ui.gui_check_support import say, start_window, wait  # noqa: E402

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"




def type_into_dialog(app, kind, text, then=None):
    """Once a modal ``kind`` dialog is up: type ``text`` into its focused field and press Enter."""
    def act():
        dialog = next((w for w in app.topLevelWidgets() if isinstance(w, kind) and w.isVisible()), None)
        if dialog is None:
            QTimer.singleShot(50, act)
            return
        field = dialog.focusWidget() or dialog
        QTest.keyClicks(field, text)
        QTest.keyClick(field, Qt.Key.Key_Return)
        if then is not None:
            then(dialog)
    QTimer.singleShot(50, act)


def main():
    data_dir, iface, invite = sys.argv[1], sys.argv[2], sys.argv[3]
    DiscoveryWindow.ALONE_AFTER = 3_000  # the app waits 10 s; the check need not
    SHOTS.mkdir(parents=True, exist_ok=True)
    app, backend, window = start_window(data_dir, iface, (1100, 680))
    window.join_controller.show_discovery()
    alone = wait(app, lambda: window.discovery.alone_label.isVisible(), timeout=15) is not None
    window.discovery.grab().save(str(SHOTS / "discovery-window-alone.png"))
    say(step="alone", shown=alone, notice=window.discovery.alone_label.text(),
        status=window.statusBar().currentMessage())

    type_into_dialog(app, AddPeerDialog, "not an address")
    window.menus.add_peer_action.trigger()
    dialog = window.join_controller.add_peer_dialog
    refused = wait(app, lambda: "bad address" in dialog.error_label.text().lower(), timeout=10)
    say(step="bad address", status=dialog.error_label.text() if refused else "")  # said in the dialog, which stays open
    dialog.reject()

    QGuiApplication.clipboard().setText(f"Join “Lunch” on M2MC: {invite}")
    looked_up = {}

    def join(dialog):
        # Enter looked the group up (its inviter asked directly); once found, Enter again joins.
        def when_found():
            if dialog.found is None:
                if dialog.isVisible():
                    QTimer.singleShot(50, when_found)
                return
            looked_up["desc"] = dialog.summary.desc_label.text()
            dialog.grab().save(str(SHOTS / "join-from-invite-lan.png"))
            QTest.keyClick(dialog.focusWidget() or dialog, Qt.Key.Key_Return)
        QTimer.singleShot(50, when_found)

    type_into_dialog(app, QDialog, "", then=join)  # the invite is offered from the clipboard as it is
    window.menus.join_invite_action.trigger()
    joined = wait(app, lambda: window.current is not None, timeout=30) is not None
    say(step="joined", joined=joined, found=looked_up.get("desc", ""))
    if not joined:
        return 1
    window.status_controller._presence_timer.setInterval(200)
    members = lambda: [window.members_pane.member_list.item(i).text() for i in range(window.members_pane.member_list.count())]  # noqa: E731
    direct = wait(app, lambda: any("Ann" in m and "⇄" in m for m in members()), timeout=20) is not None
    gone = wait(app, lambda: not window.discovery.alone_label.isVisible(), timeout=15) is not None
    window.grab().save(str(SHOTS / "main-window-reached-directly.png"))
    say(step="members", members=members(), direct=direct, alone_gone=gone)
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
