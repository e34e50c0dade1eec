"""File → Export chat log…: the group shown, written by the middleware as JSON Lines to a file the
reader chooses; the status bar says how many messages went, or why none did."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog, QWidget

from ..bridge import Backend, describe_error
from ..model.state import Selection
from .sessions import GroupSession


class ExportController(QObject):
    def __init__(self, backend: Backend, selection: Selection[GroupSession], show_status: Callable[[str, int], None],
                 show_error: Callable[[str], None], dialog_parent: QWidget) -> None:
        super().__init__(dialog_parent)
        self.backend, self.selection = backend, selection
        self.show_status, self.show_error, self.dialog_parent = show_status, show_error, dialog_parent

    def choose_file(self) -> None:
        session = self.selection.session
        if session is None:
            return
        safe = re.sub(r"[^\w.-]+", "-", session.title).strip("-") or "group"
        path, _filter = QFileDialog.getSaveFileName(self.dialog_parent, "Export chat log",
                                                    str(Path.home() / f"m2mc-{safe}.jsonl"),
                                                    "JSON Lines (*.jsonl);;All files (*)")
        if path:
            self.export_to(path)

    def export_to(self, path: str) -> None:
        session = self.selection.session
        gid = session.gid if session else None
        self.backend.call(
            lambda peer: peer.export_log(path, gid),
            on_result=lambda count: self.show_status(f"Exported {count} messages to {path}", 8000),
            on_error=lambda exc: self.show_error(f"Could not export to {path}: {describe_error(exc)}"),
        )
