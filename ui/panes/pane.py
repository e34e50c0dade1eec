"""A side pane's frame: a title above its body, and an optional footer under it."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class TitledPane(QWidget):
    def __init__(self, title: str, body: QWidget, footer: QWidget | None = None) -> None:
        super().__init__()
        self.body_layout = QVBoxLayout(self)
        self.body_layout.setContentsMargins(0, 0, 0, 4)
        self.body_layout.setSpacing(0)
        label = QLabel(title)
        label.setProperty("class", "paneTitle")
        self.body_layout.addWidget(label)
        self.body_layout.addWidget(body, 1)
        if footer is not None:
            self.body_layout.addWidget(footer)
