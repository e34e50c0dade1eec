"""Run inside a network namespace: the real m2mc-chat window (the real middleware) gets a file offered by an
m2mc-peer, downloads it by itself and shows it done; then shares a file of its own.

Started by tests/ui/test_gui_files_lan.py with ``ip netns exec``.  Arguments: data dir, interface address,
the group's description, the file to share.  One JSON line per step on stdout; it reads one line on stdin
(the offer's mid) before waiting for that download.  Screenshots go to build/screenshots/.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


from m2mc.middleware.files import is_offer_text  # noqa: E402
from m2mc.middleware.types import format_mid, parse_mid  # noqa: E402
from tests.ui.gui_check_support import say, start_window, wait  # noqa: E402

SHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"


def strip_of(window, mid):
    session = window.current
    index = session.tree_model.index_for(mid)
    model = window.conversation.tree_view.model()
    index = model.mapFromSource(index) if hasattr(model, "mapFromSource") else index
    window.conversation.tree_view.scrollTo(index)
    return window.conversation.tree_view.itemDelegate()._geometry(window.conversation.tree_view.visualRect(index), index)["file"]


def main():
    data_dir, iface, desc, to_share = sys.argv[1:5]
    app, backend, window = start_window(data_dir, iface, (1100, 680))
    model = window.discovery.model
    found = wait(app, lambda: next((g.gid for g in model.groups if g.desc == desc), None), timeout=30)
    if not found:
        say(step="joined", error="the group was not discovered")
        return 1
    window.discovery.select_gid(found)
    window.discovery.join_selected()
    window.join_controller.join_dialog.buttons.accepted.emit()
    joined = wait(app, lambda: window.current is not None and window.current.gid == found, timeout=30)
    say(step="joined", gid=found, ok=bool(joined))
    mid = parse_mid(sys.stdin.readline().strip())
    shown = wait(app, lambda: window.current.tree.message(mid) is not None, timeout=30)
    done = wait(app, lambda: window.files_view.states.get((found, mid)) is not None
                and window.files_view.states[(found, mid)].state == "done"
                and window.files_view.states[(found, mid)].path, timeout=60)
    strip = strip_of(window, mid) if shown else None
    window.grab().save(str(SHOTS / "files-lan.png"))
    say(step="downloaded", shown=bool(shown), path=done or "", status=strip.status if strip else "",
        buttons=[label for _r, _a, label in strip.buttons] if strip else [])

    window.files_view.attach([to_share])
    own = wait(app, lambda: [n.message.mid for n in window.current.tree.arrival
                             if n.message.sender == backend.pid and is_offer_text(n.message.text)], timeout=30)
    say(step="shared", mid=format_mid(own[0]) if own else "")
    sys.stdin.readline()  # the other peer has it
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
