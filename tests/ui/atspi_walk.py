"""Walks an application's accessible tree as a screen reader sees it, through AT-SPI (pyatspi, from the
system's python3: Debian's python3-pyatspi), and prints what it found as JSON: every control that takes
the keyboard focus, with its role and name, and the messages' rows.  Run by tests/ui/test_accessibility.py
on the test's private session and accessibility buses.

    python3 atspi_walk.py APP_NAME
"""

import json
import sys
import time

import pyatspi

ROWS_READ = 12  # rows of a list or tree read: enough to see how rows are named, without a round trip per row


def find_app(name, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        desktop = pyatspi.Registry.getDesktop(0)
        for index in range(desktop.childCount):
            app = desktop.getChildAtIndex(index)
            if app is not None and app.name == name:
                return app
        time.sleep(0.2)
    raise SystemExit(f"no application named {name!r} on the accessibility bus")


def walk(node, path, found, depth=0):
    try:
        states = node.getState()
        role = node.getRoleName()
        name = (node.name or "").strip()
    except Exception as exc:  # noqa: BLE001 - an object gone while we read it
        found["errors"].append(f"{path}: {exc}")
        return
    if not states.contains(pyatspi.STATE_SHOWING) and depth > 1:
        return  # hidden: not what a screen reader reads now
    here = f"{path}/{role}" + (f"[{name[:40]}]" if name else "")
    if states.contains(pyatspi.STATE_FOCUSABLE):
        found["focusable"].append({"path": here, "role": role, "name": name,
                                   "description": (node.description or "").strip()})
    if role in ("list item", "table cell", "tree item") and "tree" in path:
        found["rows"].append({"path": here, "name": name})
    count = node.childCount
    if role in ("list", "table", "tree", "tree table"):
        count = min(count, ROWS_READ)
    for index in range(count):
        child = node.getChildAtIndex(index)
        if child is not None:
            walk(child, here, found, depth + 1)


def main():
    app = find_app(sys.argv[1])
    found = {"focusable": [], "rows": [], "errors": []}
    for index in range(app.childCount):
        window = app.getChildAtIndex(index)
        if window is not None:
            walk(window, app.name, found)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
