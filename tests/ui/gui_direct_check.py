"""Run inside a network namespace: the real m2mc-chat window (a GroupManager underneath) joins a group,
gets a direct message from another peer, reads it with a click, answers it with keys, and sees its
answer's mark turn from delivered to read when the other peer reads it.

Started by tests/ui/test_gui_direct_lan.py with ``ip netns exec``; argv: data dir, interface address,
the group's id.  It prints one JSON line per step on stdout and reads "go" lines on stdin, so the test
can make the other peer act at the right moments.  Screenshots go to build/screenshots/.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtTest import QTest  # noqa: E402

from tests.ui.gui_check_support import say, start_window, wait  # noqa: E402

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


def main():
    data_dir, iface, gid = sys.argv[1], sys.argv[2], sys.argv[3]
    SHOTS.mkdir(parents=True, exist_ok=True)
    app, backend, window = start_window(data_dir, iface, (1000, 640))
    found = wait(app, lambda: any(g.gid == gid for g in window.discovery.model.groups), timeout=30)
    if found:
        backend.call_async(lambda peer: peer.join_group_async(gid), on_result=window.join_controller._joined)
    joined = wait(app, lambda: window.current is not None and window.current.gid == gid, timeout=30) is not None
    say(step="joined", joined=joined, found=bool(found), pid=backend.pid)
    if not joined:
        return 1

    controller = window.direct_controller
    controller._poll_timer.setInterval(300)  # the conversations' presence, as the real middleware hears it
    direct = window.groups_pane.direct_list
    row = wait(app, lambda: direct.item(0) if direct.count() and direct.item(0).data(Qt.ItemDataRole.UserRole + 11)
               else None, timeout=30)
    say(step="incoming", rows=[direct.item(i).text() for i in range(direct.count())],
        unread=row.data(Qt.ItemDataRole.UserRole + 11) if row else 0)
    if row is None:
        return 1
    QTest.mouseClick(direct.viewport(), Qt.MouseButton.LeftButton, pos=direct.visualItemRect(row).center())
    pane = window.direct_pane
    wait(app, lambda: window.centre_stack.currentWidget() is pane and pane.view.model() is not None
         and pane.view.model().rowCount() > 0, timeout=10)
    view = pane.view
    first = view.model().index(0, 0)
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.visualRect(first).center())  # read it
    read = wait(app, lambda: row.data(Qt.ItemDataRole.UserRole + 11) == 0, timeout=10) is not None
    QTest.keyClicks(pane.compose, "on it")
    QTest.keyClick(pane.compose, Qt.Key.Key_Return)
    mine = (backend.pid, 1)
    delivered = wait(app, lambda: controller.current is not None
                     and controller.current.marks.status.get(mine) == "delivered", timeout=30) is not None
    say(step="answered", read=read, delivered=delivered, heading=pane.title_label.text(),
        fingerprint=pane.fingerprint_label.text(), statuses=dict((f"{m[0]}:{m[1]}", s) for m, s in
                                                                 controller.current.marks.status.items()))
    sys.stdin.readline()  # the other peer has read the answer now
    read_back = wait(app, lambda: controller.current.marks.status.get(mine) == "read", timeout=30) is not None
    window.grab().save(str(SHOTS / "direct-messages-lan.png"))
    say(step="read", read=read_back)
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
