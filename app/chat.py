"""m2mc-chat: the desktop app.  Composition root: options, middleware thread, theme, main window.

Takes the same options as m2mc-peer.  On first start without a name (none
given and none stored) a dialog asks for the display name.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import signal
import sys

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from middleware.manager import Config
from middleware.transport import TransportError
from middleware.types import UsageError
from ui.bridge import ManagerBackend, describe_error
from ui.dialogs import NameDialog
from ui.main_window import MainWindow
from ui.resources import app_icon, apply_theme

from .peer import add_common_options, default_data_dir

log = logging.getLogger("m2mc.chat")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="m2mc-chat", description="M2MC threaded chat for your local network.")
    add_common_options(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("zeroconf").setLevel(logging.WARNING)

    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setApplicationName("M2MC chat")
    app.setDesktopFileName("m2mc-chat")
    app.setWindowIcon(app_icon())
    apply_theme(app)

    config = Config(data_dir=args.data_dir or default_data_dir(), name=args.name, iface=args.iface,
                    port=args.port, zeroconf=not args.no_zeroconf)
    backend = ManagerBackend(config)
    try:
        backend.start()
    except (TransportError, UsageError, OSError) as exc:
        message = f"m2mc-chat could not start the network: {describe_error(exc)}"
        print(message, file=sys.stderr)
        QMessageBox.critical(None, "M2MC chat", message)
        backend.close()
        return 2

    if not backend.name:
        dialog = NameDialog(getpass.getuser() or "")
        if not dialog.exec():
            backend.close()
            return 1
        backend.name = dialog.name
        backend.request("set_name", dialog.name)

    window = MainWindow(backend)
    window.show()
    window.start()

    # Ctrl+C in the terminal and SIGTERM (logout, kill) quit cleanly; the timer lets Python see the signal.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: app.quit())
    heartbeat = QTimer(interval=300, timeout=lambda: None)
    heartbeat.start()
    try:
        return app.exec()
    finally:
        backend.close()


if __name__ == "__main__":
    sys.exit(main())
