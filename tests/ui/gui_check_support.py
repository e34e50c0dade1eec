"""What the GUI checks run inside a namespace share (gui_netns_check.py, gui_reach_check.py), and what
their tests read back: one JSON line per step, and a wait that keeps the window's events flowing."""

import json
import time


def say(**event):
    print(json.dumps(event), flush=True)


def wait(app, predicate, timeout=20.0):
    """Process the app's events until ``predicate()`` holds (its value), or None after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.processEvents()
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    return None


def read_event(proc):
    """The next step a GUI check said, from the test's side."""
    line = proc.stdout.readline()
    assert line, f"the GUI check ended early: {proc.stderr.read()[-3000:]}"
    return json.loads(line)
