"""m2mc-chat: the desktop app.  Composition root: options, middleware thread, theme, main window.

Takes the same options as m2mc-peer.  On first start without a name (none
given and none stored) a dialog asks for the display name.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths, QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from ..middleware.manager import Config, default_parts
from ..middleware.transport import TransportError
from ..middleware.types import UsageError
from ..ui.bridge import ManagerBackend, describe_error
from ..ui.dialogs import NameDialog
from ..ui.main_window import MainWindow
from ..ui.resources import app_icon, apply_theme

from .cli import add_common_options, add_file_options, default_data_dir
from .qt_app import application

log = logging.getLogger("m2mc.chat")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="m2mc-chat", description="M2MC threaded chat for your local network.")
    add_common_options(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    add_file_options(parser, downloads="the desktop's Downloads folder")
    return parser.parse_args(argv)


def downloads_folder(chosen: Path | None, found: str | None = None) -> Path | None:
    """Where the app's downloads go: ``chosen``, else the desktop's Downloads folder (where people look for
    what they fetched; ``found`` in tests), made if it is missing, else None (the middleware's
    <data dir>/downloads).  Without ~/Downloads, files went to a hidden folder nobody looks in (issue 45)."""
    if chosen is not None:
        return chosen
    if found is None:
        found = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DownloadLocation)
    if not found:
        return None
    folder = Path(found)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a read-only home: the data dir's folder, which the file rows still open
    return folder


NO_DISPLAY = ("m2mc-chat: no display found (neither DISPLAY nor WAYLAND_DISPLAY is set); "
              "m2mc-peer is the headless peer (JSON-RPC on stdin/stdout).")


def display_missing(environ: Mapping[str, str] = os.environ, platform: str = sys.platform) -> bool:
    """True on a Linux/BSD session with no X11 or Wayland display and no QT_QPA_PLATFORM override:
    there Qt would abort in QApplication(), naming a missing xcb library instead of the display."""
    if not platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return False  # macOS and Windows always have their own platform plugin
    return not any(environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)  # --help and --version answer without a display
    if QApplication.instance() is None and display_missing():
        print(NO_DISPLAY, file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("zeroconf").setLevel(logging.WARNING)

    app = application()
    app.setApplicationName("M2MC chat")
    app.setDesktopFileName("m2mc-chat")
    app.setWindowIcon(app_icon())
    apply_theme(app)

    config = Config(data_dir=args.data_dir or default_data_dir(), name=args.name, iface=args.iface,
                    port=args.port, zeroconf=not args.no_zeroconf, download_dir=downloads_folder(args.download_dir),
                    auto_download=args.auto_download, max_file_size=args.max_file_size)
    backend = ManagerBackend(config, parts=default_parts)
    try:
        backend.start()
    except (TransportError, UsageError, OSError) as exc:
        message = f"m2mc-chat could not start the network: {describe_error(exc)}"
        print(message, file=sys.stderr)
        QMessageBox.critical(None, "M2MC chat", message)
        backend.close()
        return 2

    if not backend.name and not ask_display_name(backend, getpass.getuser() or ""):
        backend.close()
        return 1

    settings = QSettings(str(Path(config.data_dir) / "gui.ini"), QSettings.Format.IniFormat)
    window = MainWindow(backend, settings=settings)
    window.files_view.paste_dir = Path(config.data_dir) / "pasted"
    window.show()
    window.start()

    # Ctrl+C in the terminal and SIGTERM (logout, kill) quit cleanly; the timer lets Python see the signal.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: app.quit())
    heartbeat = QTimer(interval=300)
    heartbeat.timeout.connect(lambda: None)
    heartbeat.start()
    try:
        return app.exec()
    finally:
        backend.close()


def ask_display_name(backend, suggestion: str) -> bool:
    """First start: the name typed into the dialog is the name stored; False if cancelled."""
    dialog = NameDialog(suggestion)
    if not dialog.exec():
        return False
    backend.name = dialog.name
    name = dialog.name
    backend.call(lambda peer: peer.set_name(name))
    return True


if __name__ == "__main__":
    sys.exit(main())
