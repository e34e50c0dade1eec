"""The main window with a scripted conversation (app.screenshots' make_window), for the accessibility
walk (tests/ui/test_accessibility.py): run in a process of its own, so that Qt's accessibility bridge
starts on the test's private buses.  Prints "ready" once the window is shown, then "direct" once a
line "direct" on stdin has opened a direct conversation; exits at the end of stdin."""

import sys

from PySide6.QtCore import QCoreApplication, QSocketNotifier

from m2mc.app.qt_app import application
from m2mc.app.screenshots import ANN, make_window, settle
from m2mc.ui.resources import apply_theme


def main():
    QCoreApplication.setApplicationName("m2mc-a11y")
    app = application()
    apply_theme(app)
    window, backend = make_window(app)
    backend.manager.inject_direct(ANN, "are you coming?")
    window.direct_controller.refresh()
    settle(app)
    window.activateWindow()
    print("ready", flush=True)

    def command():
        line = sys.stdin.readline()
        if not line:
            app.quit()
        elif line.strip() == "direct":
            window.direct_controller.open_with(ANN.pid)
            settle(app)
            print("direct", flush=True)

    reader = QSocketNotifier(sys.stdin.fileno(), QSocketNotifier.Type.Read)
    reader.activated.connect(command)
    app.exec()


if __name__ == "__main__":
    main()
