"""How the panes sit in the window: groups | conversation | threads over members, in splitters whose
widths are kept in the settings; the side panes fold away as the window narrows (ui.model.state.PaneFolds)
and the View menu shows or hides each."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QMenu, QSplitter, QWidget

from ..model.settings import read_setting, write_setting
from ..model.state import PaneFolds

# Window widths below which a pane folds away on its own (issue 32): the conversation keeps the room.
PANE_FOLD_WIDTHS = {"threads": 1000, "members": 1000, "groups": 760}
MINIMUM_WIDTH = 640
# Each pane's width in the main splitter when there is none to restore (groups, centre, side panes).
DEFAULT_PANE_SIZES = (200, 640, 260)
PANE_INDEX = {"groups": 0, "threads": 2, "members": 2}  # the main splitter's place of each foldable pane


class PaneLayout(QObject):
    def __init__(self, window: QWidget, settings: Any, groups: QWidget, centre: QWidget, threads: QWidget,
                 members: QWidget) -> None:
        super().__init__(window)
        self.window, self.settings = window, settings
        self.panes = {"groups": groups, "threads": threads, "members": members}
        self.side_panes_hidden = False  # while a direct conversation is shown
        side = QSplitter(Qt.Orientation.Vertical)
        side.addWidget(threads)
        side.addWidget(members)
        side.setSizes([420, 200])
        splitter = QSplitter()
        splitter.addWidget(groups)
        splitter.addWidget(centre)
        splitter.addWidget(side)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes(list(DEFAULT_PANE_SIZES))
        splitter.setCollapsible(1, False)  # side panes fold away on a small screen; the talk does not
        self.splitter, self.side_splitter = splitter, side
        splitter.splitterMoved.connect(self.save_sizes)
        side.splitterMoved.connect(self.save_sizes)
        self.folds = PaneFolds(PANE_FOLD_WIDTHS)
        self.toggles: dict[str, QAction] = {}

    def add_toggles(self, menu: QMenu) -> None:
        """The View menu's switch of each pane."""
        for name, title in (("groups", "&Groups pane"), ("threads", "&Threads pane"), ("members", "&Members pane")):
            toggle = QAction(title, self.window, checkable=True, checked=True)
            toggle.toggled.connect(self.panes[name].setVisible)
            toggle.toggled.connect(self._fit_side)
            toggle.toggled.connect(lambda on, name=name: self._give_room(name) if on else None)
            # triggered is the reader's choice only; a fold on resize sets the check without it.
            toggle.triggered.connect(lambda on, name=name: self._chosen(name, on))
            menu.addAction(toggle)
            self.toggles[name] = toggle

    def resized(self, width: int) -> None:
        if not self.toggles:
            return  # a resize before the View menu is built
        shown = {name: toggle.isChecked() for name, toggle in self.toggles.items()}
        changes = self.folds.resized(width, shown)
        if changes:
            self.save_sizes()  # while the panes about to fold still have their width
        for name, show in changes.items():
            self.toggles[name].setChecked(show)

    def show_side_panes(self, on: bool) -> None:
        """Threads and Members are a group's: a direct conversation (ui/controllers/direct.py) hides them."""
        self.side_panes_hidden = not on
        self._fit_side()

    def _fit_side(self) -> None:
        # An empty side splitter would keep its width; it goes with its last pane.
        self.side_splitter.setVisible(not self.side_panes_hidden
                                      and (self.toggles["threads"].isChecked() or self.toggles["members"].isChecked()))

    def _chosen(self, name: str, shown: bool) -> None:
        self.folds.chosen(name, shown, self.window.width())
        write_setting(self.settings, "window/closed",
                      ",".join(n for n, t in self.toggles.items() if not t.isChecked()))

    def _give_room(self, name: str) -> None:
        """A pane shown again gets a sensible width if its splitter had squeezed it to nothing (a saved
        width of 0, a handle dragged to the edge): ticked in the View menu, it must be seen."""
        index = PANE_INDEX[name]
        sizes = self.splitter.sizes()
        if sizes[index] > 0 or not sum(sizes):
            return
        room = min(DEFAULT_PANE_SIZES[index], max(sizes[1] - MINIMUM_WIDTH // 2, 0))
        sizes[index] += room
        sizes[1] -= room
        self.splitter.setSizes(sizes)

    def save_sizes(self, *_args) -> None:
        """Each splitter's sizes, a folded pane keeping the size it had when shown."""
        for key, splitter in (("window/panes", self.splitter), ("window/side", self.side_splitter)):
            sizes = splitter.sizes()
            if splitter.isHidden() or not sum(sizes):
                continue  # folded, or not laid out yet: the sizes kept stand
            kept = self._sizes(key, len(sizes))
            # A pane hidden now (folded, closed, or the side panes while a direct conversation is shown)
            # keeps the width it had: a 0 saved for it made it come back as a 4-px sliver (issue 45).
            defaults = DEFAULT_PANE_SIZES if splitter is self.splitter else (0,) * len(sizes)
            widths = [size or (kept[i] if kept and kept[i] else defaults[i]) for i, size in enumerate(sizes)]
            write_setting(self.settings, key, ",".join(map(str, widths)))

    def _sizes(self, key: str, count: int) -> list[int] | None:
        try:
            sizes = [int(part) for part in (read_setting(self.settings, key) or "").split(",")]
        except ValueError:
            return None  # a hand-edited settings file
        return sizes if len(sizes) == count and all(size >= 0 for size in sizes) else None

    def restore_sizes(self) -> None:
        closed = set((read_setting(self.settings, "window/closed") or "").split(","))
        for key, splitter in (("window/panes", self.splitter), ("window/side", self.side_splitter)):
            sizes = self._sizes(key, splitter.count())
            if sizes and splitter is self.splitter:
                # A width of 0 (written before issue 45 while a direct conversation was shown) counts as
                # folded: the View menu says so, and ticking the pane gives it a width again.
                closed |= {name for name, index in PANE_INDEX.items() if not sizes[index]}
                sizes = [size or DEFAULT_PANE_SIZES[i] for i, size in enumerate(sizes)]
            if sizes:
                splitter.setSizes(sizes)
        for name, toggle in self.toggles.items():
            if name in closed:
                toggle.setChecked(False)
                self.folds.chosen(name, False, self.window.width())
