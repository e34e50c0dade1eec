"""What the GUI checks run inside a namespace share (gui_netns_check.py, gui_reach_check.py, gui_direct_check.py,
gui_files_check.py, gui_roaming_check.py), and what their tests read back: one JSON line per step, a wait that keeps the window's events
flowing, and the real window started over a GroupManager."""

import json
import sys
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


def start_window(data_dir: str, iface: str, size=(1100, 680)):
    """The real app over a GroupManager on ``iface`` (chosen as a user's app does when empty; no zeroconf), shown and started: what each
    GUI check begins with.  Returns (app, backend, window)."""
    from pathlib import Path

    from PySide6.QtWidgets import QApplication

    from m2mc.middleware.manager import Config
    from m2mc.ui.bridge import ManagerBackend
    from m2mc.ui.main_window import MainWindow
    from m2mc.ui.resources import apply_theme

    app = QApplication.instance() or QApplication([sys.argv[0]])
    apply_theme(app)
    backend = ManagerBackend(Config(data_dir=Path(data_dir), name="Gui", iface=iface or None, zeroconf=False))
    backend.start()
    window = MainWindow(backend)
    window.resize(*size)
    window.show()
    window.start()
    return app, backend, window
