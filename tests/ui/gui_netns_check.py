"""Run inside a network namespace: the real m2mc-chat window discovers a group, joins it, shows its talk.

Started by tests/ui/test_gui_lan.py with ``ip netns exec``.  It prints one JSON
line per step on stdout and reads "go" lines on stdin, so the test can make
the other peer talk at the right moments.  Screenshots go to build/screenshots/.
Join opens the confirmation, whose verified description, creator and member
count are reported before its Join is pressed.  With a third argument (the
passphrase of a private group) the confirmation asks for it: a wrong passphrase
first, whose refusal is reported, then the right one.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


from tests.ui.gui_check_support import say, start_window, wait  # noqa: E402

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"




def tree_rows(window):
    session = window.current
    rows = []
    for node in session.tree.arrival if session else []:
        parent = node.parent.message.text if node.parent is not None and node.parent.message is not None else None
        rows.append([node.message.text, parent])
    return rows


def main():
    data_dir, desc = sys.argv[1], sys.argv[2]
    passphrase = sys.argv[3] if len(sys.argv) > 3 else None
    app, backend, window = start_window(data_dir, "127.0.0.1", (1100, 680))
    model = window.discovery.model
    found = wait(app, lambda: next((g.gid for g in model.groups if g.desc == desc), None))
    say(step="discovered", gid=found)
    if not found:
        return 1
    window.discovery.select_gid(found)
    window.discovery.resize(640, 300)
    window.discovery.grab().save(str(SHOTS / "discovery-window-lan.png"))
    window.discovery.join_selected()
    dialog = window.join_controller.join_dialog
    if dialog is None or not dialog.isVisible():
        say(step="confirm", error="no join dialog")
        return 1
    dialog.grab().save(str(SHOTS / "join-dialog-lan.png"))
    summary = dialog.summary
    say(step="confirm", desc=summary.desc_label.text(), creator=summary.creator_label.text(),
        members=summary.members_label.text(), kind=summary.kind_label.text(), joined=window.current is not None)
    if passphrase is not None:
        dialog.passphrase_edit.setText("not the passphrase")
        dialog.buttons.accepted.emit()
        wait(app, lambda: dialog.error_label.text(), timeout=10)
        dialog.grab().save(str(SHOTS / "passphrase-dialog-wrong-lan.png"))
        say(step="refused", error=dialog.error_label.text(), still_open=dialog.isVisible())
        dialog.passphrase_edit.setText(passphrase)
    dialog.buttons.accepted.emit()
    wait(app, lambda: window.current is not None and window.current.gid == found)
    history = wait(app, lambda: len(tree_rows(window)) >= 3, timeout=10) is not None
    say(step="joined", history=tree_rows(window), history_complete=history)
    sys.stdin.readline()  # the test's other peer now sends a reply to its first message
    wait(app, lambda: any(row[0] == "live reply" for row in tree_rows(window)))
    window.status_controller._presence_timer.setInterval(200)  # presence from what the real middleware heard
    members = lambda: [window.members_pane.member_list.item(i).text() for i in range(window.members_pane.member_list.count())]  # noqa: E731
    ann_online = wait(app, lambda: any(m.split("  · ")[0] == "● Ann" for m in members()), timeout=10) is not None
    window.grab().save(str(SHOTS / "main-window-lan.png"))
    say(step="live", rows=tree_rows(window), ann_online=ann_online)
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
