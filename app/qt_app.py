"""The process's one QApplication, for the commands that show windows (the chat, screenshots, the GUI benchmark)."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication


def application() -> QApplication:
    """The QApplication already made in this process (a test's), else a new one."""
    existing = QApplication.instance()
    return existing if isinstance(existing, QApplication) else QApplication([sys.argv[0]])
