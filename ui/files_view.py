"""Files in the window: each offer row's strip (Download, progress with rate and time left, Cancel,
Open, Show in folder, a thumbnail for images), and attaching (button, menu, drag and drop, paste).

:class:`FilesView` keeps what this peer knows of every offer it has shown: the
state the middleware last told (:class:`middleware.events.FileProgress`, and
``file_list`` for what was there before the window looked), recent byte counts
for the rate, and the error of a download that failed.  The message delegate asks
it for a row's :class:`FileStrip` (what to draw, where a click lands) and paints
it with :meth:`FilesView.paint_strip`; a click on a strip's button comes back to
:meth:`FilesView.act`.  Opening a file or its folder goes through
:attr:`FilesView.open_url` (QDesktopServices), which tests replace.
"""

from __future__ import annotations

import collections
import tempfile
import time
from functools import partial
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import QEvent, QObject, QRect, QSize, Qt, QUrl
from PySide6.QtGui import QColor, QDesktopServices, QFontMetrics, QImage, QImageReader, QPainter, QPalette, QPixmap
from PySide6.QtWidgets import QAbstractItemView, QFileDialog, QMenu, QPushButton, QStyle, QStyleOptionProgressBar

from ..middleware.events import FileProgress
from ..middleware.files import FileOffer, OfferError, human_size, is_offer_text, parse_offer
from ..middleware.types import ChatMessage, Mid, parse_mid

from .bridge import Backend, describe_error
from .resources import icon

THUMBNAIL = QSize(240, 160)  # an image's inline preview fits in this (the row stays a row, not a gallery)
THUMBNAILS_KEPT = 200  # previews held at once (at most 150 KB each): scrolling back reads an image again
RATE_WINDOW = 5.0  # seconds of progress the rate is measured over
BUTTON_GAP = 6
ACTIVE = ("waiting", "fetching", "verifying")
FILES_IN_GROUPS_ONLY = "Files are shared in groups: a direct message carries text only."


@dataclass
class FileState:
    """One offer as this peer knows it."""

    state: str = "offered"  # as in the middleware's file objects, or "offer" for this peer's own
    bytes: int = 0
    path: str = ""
    error: str = ""
    samples: collections.deque = field(default_factory=lambda: collections.deque(maxlen=32))  # (time, bytes)

    def rate(self) -> float | None:
        """Bytes a second over the last :data:`RATE_WINDOW` seconds; None until two samples tell."""
        if len(self.samples) < 2:
            return None
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 and b1 > b0 else None


@dataclass
class FileStrip:
    """A row's strip, laid out at its place in the row: the status line, the bar, the buttons, the thumbnail."""

    offer: FileOffer
    status: str
    status_rect: QRect
    buttons: list[tuple[QRect, str, str]]  # (where, action, label)
    bar: QRect | None
    fraction: float
    error: bool
    thumbnail: QPixmap | None
    thumbnail_rect: QRect | None
    height: int


def _time_left(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, round(seconds))} s left"
    if seconds < 3600:
        return f"{round(seconds / 60)} min left"
    return f"{seconds / 3600:.1f} h left"


class FilesView(QObject):
    """The window's files: states told by the middleware, the strips the delegate draws, the actions."""

    def __init__(self, window: Any, backend: Backend) -> None:
        # ``window`` is the MainWindow (its current session, compose box, notify): not imported, that would be a cycle
        super().__init__(window)
        self.window = window
        self.backend = backend
        self.states: dict[tuple[str, Mid], FileState] = {}
        self.views: list[QAbstractItemView] = []
        self.clock: Callable[[], float] = time.monotonic
        self.open_url: Callable[[QUrl], object] = QDesktopServices.openUrl
        self._listing: set[str] = set()  # groups whose file list is asked for and not answered yet
        # Where pasted pictures are written before they are offered (an offer is served from its file,
        # so it must outlive the paste): the app sets <data dir>/pasted; a test window gets a temp folder.
        self.paste_dir: Path | None = None
        self._thumbnails: collections.OrderedDict[str, QPixmap | None] = collections.OrderedDict()
        backend.peer_event.connect(self._on_event)

    # -- what the middleware tells --------------------------------------------------------

    def _on_event(self, event: object) -> None:
        if not isinstance(event, FileProgress):
            return
        mid = parse_mid(event.mid)
        state = self.states.setdefault((event.gid, mid), FileState())
        before = state.state
        if event.state in ACTIVE and before not in ACTIVE:
            state.samples.clear()
        state.state, state.bytes = event.state, event.bytes
        if event.state in ACTIVE:
            now = self.clock()
            state.samples.append((now, event.bytes))
            while len(state.samples) > 2 and now - state.samples[0][0] > RATE_WINDOW:
                state.samples.popleft()
        if event.state != before and event.state in ("done", "failed"):
            self._list(event.gid, lambda: self._finished(event.gid, mid, before))
        self._changed(mid, relayout=event.state != before)

    def _finished(self, gid: str, mid: Mid, before: str) -> None:
        state = self.states.get((gid, mid))
        if state is None or before == state.state:
            return
        message = self._message(gid, mid)
        offer = _offer(message) if message is not None else None
        name = offer.name if offer is not None else "a file"
        if state.state == "done" and state.path:
            self.window.notify("Download finished", f"{name} is saved in {Path(state.path).parent}")
        elif state.state == "failed":
            self.window.notify("Download failed", f"{name}: {state.error or 'no member could send it'}")

    def _list(self, gid: str, then: Callable[[], None] | None = None, force: bool = False) -> None:
        """Ask the middleware for the group's files (paths, errors, what was there before the window looked)."""
        if not force and then is None and gid in self._listing:
            return  # the answer on its way covers what is stored by now
        self._listing.add(gid)

        def take(rows: list[dict]) -> None:
            self._listing.discard(gid)
            for row in rows:
                mid = parse_mid(row["mid"])
                state = self.states.setdefault((gid, mid), FileState())
                if row["role"] == "offer":
                    state.state = "offer"
                elif not (state.state in ACTIVE and row["state"] in ACTIVE):
                    state.state = row["state"]
                state.bytes, state.path, state.error = row["bytes"], row["path"], row["error"]
                self._changed(mid, relayout=True)
            if then is not None:
                then()

        self.backend.call(lambda peer: peer.file_list(gid), on_result=take,
                          on_error=lambda _e: self._listing.discard(gid))

    def _message(self, gid: str, mid: Mid) -> ChatMessage | None:
        session = self.window.session_controller.sessions.get(gid)
        return session.tree.message(mid) if session is not None else None

    def _changed(self, mid: Mid, relayout: bool) -> None:
        for view in self.views:
            delegate = view.itemDelegate()
            if relayout and hasattr(delegate, "forget"):
                delegate.forget(mid)
                view.scheduleDelayedItemsLayout()
            view.viewport().update()

    def state_of(self, message: ChatMessage) -> FileState:
        key = (message.gid, message.mid)
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = FileState("offer" if message.sender == self.backend.pid else "offered")
            self._list(message.gid)  # its path and state here, if it was fetched or offered before
        return state

    # -- actions ----------------------------------------------------------------------------

    def actions_for(self, message: ChatMessage) -> list[tuple[str, str]]:
        """``(action, label)`` of what can be done with ``message``'s file now."""
        state = self.state_of(message)
        if state.state in ACTIVE:
            return [("cancel", "Cancel")]
        if state.state in ("done", "offer"):
            return [("open", "Open"), ("folder", "Show in folder")] if state.path else []
        return [("download", "Retry" if state.state == "failed" else "Download")]

    def act_by_key(self, message: ChatMessage) -> None:
        """Enter on a selected offer: Download (or Retry); once the file is here, Show in folder.  Never
        Cancel (a second Enter while a download comes must not throw it away), and never Open: a key
        press must not run what a peer on the LAN sent (a program, a script, a shortcut)."""
        if not is_offer_text(message.text) or message.deleted or _offer(message) is None:
            return
        actions = dict(self.actions_for(message))
        for action in ("download", "folder"):
            if action in actions:
                self.act(action, message)
                return

    def act(self, action: str, message: ChatMessage) -> None:
        gid, mid = message.gid, message.mid
        state = self.state_of(message)
        if action == "download":
            state.error = ""

            def refused(error: Exception) -> None:
                state.state, state.error = "failed", describe_error(error)
                self._changed(mid, relayout=True)

            self.backend.call(lambda peer: peer.fetch_file(gid, mid), on_result=lambda row: self._fetching(gid, row),
                              on_error=refused)
        elif action == "cancel":
            self.backend.call(lambda peer: peer.cancel_file(gid, mid), on_error=lambda _e: None)
        elif action == "open" and state.path:
            self.open_url(QUrl.fromLocalFile(state.path))
        elif action == "folder" and state.path:
            self.open_url(QUrl.fromLocalFile(str(Path(state.path).parent)))

    def _fetching(self, gid: str, row: dict) -> None:
        state = self.states.setdefault((gid, parse_mid(row["mid"])), FileState())
        state.path = row["path"]

    def add_menu_actions(self, menu: QMenu, message: ChatMessage) -> None:
        """The file's actions in the row's context menu."""
        if not is_offer_text(message.text) or message.deleted or _offer(message) is None:
            return
        for action, label in self.actions_for(message):
            menu.addAction(label if action != "download" else "Download file", partial(self.act, action, message))
        menu.addSeparator()

    # -- attaching --------------------------------------------------------------------------

    def attach_button(self) -> QPushButton:
        button = QPushButton(icon("attach"), "")
        button.setObjectName("attachButton")
        button.setToolTip("Attach a file (or drop one on the window, or paste a copied one)")
        button.setAccessibleName("Attach file")
        button.clicked.connect(self.choose_files)
        return button

    def choose_files(self) -> None:
        """Conversation → Attach file…: pick files, each posted in the thread the compose box targets."""
        if self.window.current is None:
            return
        paths, _filter = QFileDialog.getOpenFileNames(self.window, "Attach files")
        self.attach(paths)

    def attach(self, paths: list[str]) -> None:
        session = self.window.current
        if session is None and paths:
            self._not_in_a_group()
        if session is None or not paths:
            return
        gid, parent = session.gid, self.window.compose_controller.target.parent
        shared = False
        for path in paths:
            if Path(path).is_dir():
                self._attach_failed(f"{Path(path).name} is a folder: only files can be shared")
                continue
            self._send_file(gid, path, parent)
            shared = True
        if shared:
            # Shared as a reply, the file used the target up, as a sent text does (issue 45): the next
            # message must not answer it too (in an open thread the root stays the default).
            self.window.compose_controller.file_shared()

    def attach_image(self, image: QImage) -> None:
        """A pasted picture: saved as a PNG (by the name's suffix) named for when it was pasted, then attached."""
        if self.window.current is None:
            self._not_in_a_group()
            return
        if self.paste_dir is None:
            self.paste_dir = Path(tempfile.mkdtemp(prefix="m2mc-pasted-"))
        self.paste_dir.mkdir(parents=True, exist_ok=True)
        stem = time.strftime("Pasted image %Y-%m-%d %H.%M.%S")
        path, number = self.paste_dir / f"{stem}.png", 1
        while path.exists():  # two pastes in one second
            number += 1
            path = self.paste_dir / f"{stem} ({number}).png"
        if not image.save(str(path)):
            self._attach_failed(f"the picture could not be saved in {self.paste_dir}")
            return
        self.attach([str(path)])

    def _send_file(self, gid: str, path: str, parent: Mid | None) -> None:
        self.backend.call_async(lambda peer: peer.send_file(gid, path, parent),
                                on_result=lambda _done: self._attached(gid),
                                on_error=lambda error: self._attach_failed(describe_error(error)))

    def _attached(self, gid: str) -> None:
        self.window.conversation.compose_box.compose_error.hide()
        self._list(gid, force=True)  # where our offer is served from: its row opens it

    def _not_in_a_group(self) -> None:
        """A file given while a direct conversation is on show: said there, not dropped in silence."""
        pane = self.window.direct_pane
        if self.window.centre_stack.currentWidget() is pane:
            pane.compose_error.setText(FILES_IN_GROUPS_ONLY)
            pane.compose_error.show()

    def _attach_failed(self, text: str) -> None:
        self.window.conversation.compose_box.compose_error.setText(f"Could not attach: {text}")
        self.window.conversation.compose_box.compose_error.show()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        """Files dragged onto the window are attached where the compose box points."""
        if event.type() in (QEvent.Type.DragEnter, QEvent.Type.DragMove):
            if local_files(event.mimeData()):  # type: ignore[attr-defined]
                event.acceptProposedAction()  # type: ignore[attr-defined]
                return True
        elif event.type() == QEvent.Type.Drop:
            paths = local_files(event.mimeData())  # type: ignore[attr-defined]
            if paths:
                event.acceptProposedAction()  # type: ignore[attr-defined]
                self.attach(paths)
                return True
        return False

    # -- the strip in a row -----------------------------------------------------------------

    def strip(self, message: ChatMessage, left: int, top: int, width: int, metrics: QFontMetrics) -> FileStrip | None:
        """``message``'s strip laid out from ``(left, top)``; None for a message that is no offer."""
        if message.deleted or not is_offer_text(message.text):
            return None
        offer = _offer(message)
        if offer is None:
            return None
        state = self.state_of(message)
        line = metrics.height() + 8
        y = top + 2
        buttons = []
        x = left
        bar = None
        fraction = state.bytes / offer.size if offer.size else 1.0
        if state.state in ACTIVE:
            bar = QRect(x, y + 3, min(160, width // 3), line - 6)
            x = bar.right() + BUTTON_GAP * 2
        for action, label in self.actions_for(message):
            button = QRect(x, y, metrics.horizontalAdvance(label) + 16, line)
            buttons.append((button, action, label))
            x = button.right() + BUTTON_GAP
        status = self._status(offer, state)
        status_rect = QRect(x + BUTTON_GAP, y, max(0, left + width - x - BUTTON_GAP), line)
        height = line + 4
        thumbnail = self._thumbnail(offer, state)
        thumbnail_rect = None
        if thumbnail is not None:
            thumbnail_rect = QRect(left, top + height, thumbnail.width(), thumbnail.height())
            height += thumbnail.height() + 4
        return FileStrip(offer, status, status_rect, buttons, bar, fraction, state.state == "failed", thumbnail,
                         thumbnail_rect, height)

    def _status(self, offer: FileOffer, state: FileState) -> str:
        if state.state in ACTIVE:
            text = f"{fraction_text(state.bytes, offer.size)} of {human_size(offer.size)}"
            rate = state.rate()
            if state.state == "verifying":
                return text + " · checking"
            if rate:
                text += f" · {human_size(int(rate))}/s · {_time_left((offer.size - state.bytes) / rate)}"
            elif state.state == "waiting":
                text += " · waiting for a member who has it"
            return text
        if state.state == "failed":
            return f"Download failed: {state.error}" if state.error else "Download failed"
        if state.state == "cancelled":
            return "Cancelled"
        if state.state == "done":
            return "Downloaded"
        if state.state == "offer":
            return "Shared by you"
        return ""

    def _thumbnail(self, offer: FileOffer, state: FileState) -> QPixmap | None:
        """An image's preview once it is here, scaled to fit :data:`THUMBNAIL` as it is read (never the
        whole image in memory at full size)."""
        if not offer.mime.startswith("image/") or state.state not in ("done", "offer") or not state.path:
            return None
        if state.path not in self._thumbnails:
            reader = QImageReader(state.path)
            size = reader.size()
            pixmap = None
            if size.isValid() and not size.isEmpty():
                reader.setScaledSize(size.scaled(THUMBNAIL.boundedTo(size), Qt.AspectRatioMode.KeepAspectRatio))
                image = reader.read()
                pixmap = QPixmap.fromImage(image) if not image.isNull() else None
            self._thumbnails[state.path] = pixmap
            if len(self._thumbnails) > THUMBNAILS_KEPT:
                self._thumbnails.popitem(last=False)
        self._thumbnails.move_to_end(state.path)
        return self._thumbnails[state.path]

    def paint_strip(self, painter: QPainter, strip: FileStrip, palette: QPalette, accent: QColor,
                    muted: QColor) -> None:
        if strip.bar is not None:
            bar = QStyleOptionProgressBar()
            bar.rect = strip.bar
            bar.minimum, bar.maximum = 0, 1000
            bar.progress = int(strip.fraction * 1000)
            bar.state = QStyle.StateFlag.State_Enabled | QStyle.StateFlag.State_Horizontal
            bar.palette = palette
            self.window.style().drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        for rect, _action, label in strip.buttons:
            painter.setPen(accent)
            painter.setBrush(palette.color(QPalette.ColorRole.Button))
            painter.drawRoundedRect(rect.adjusted(0, 0, -1, -1), 6, 6)
            painter.setPen(palette.color(QPalette.ColorRole.ButtonText))
            painter.drawText(rect, Qt.AlignmentFlag.AlignCenter, label)
        painter.setPen(QColor("#dc2626") if strip.error else muted)
        metrics = painter.fontMetrics()
        painter.drawText(strip.status_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         metrics.elidedText(strip.status, Qt.TextElideMode.ElideRight, strip.status_rect.width()))
        if strip.thumbnail is not None and strip.thumbnail_rect is not None:
            painter.drawPixmap(strip.thumbnail_rect, strip.thumbnail)


def fraction_text(held: int, size: int) -> str:
    return f"{100 * held // size if size else 100}%"


def local_files(mime: object) -> list[str]:
    """The local files a drag or a paste carries (none for text or remote links)."""
    if mime is None or not mime.hasUrls():  # type: ignore[attr-defined]
        return []
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile()]  # type: ignore[attr-defined]


def _offer(message: ChatMessage) -> FileOffer | None:
    try:
        return parse_offer(message.text)
    except OfferError:
        return None



