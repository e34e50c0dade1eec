"""The status pane: the window's status bar, with the network state and address, the peers seen, a
group's sync and its replies waiting for a missing message.  A message cut off at the window's width
is one click away in full (issue 45): the bar's tooltip holds it, and a click on the bar shows it in a
box that can be read and copied."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QMouseEvent
from PySide6.QtWidgets import QLabel, QMessageBox, QProgressBar, QStatusBar, QWidget

# Short enough for the status bar at 800 px (issue 45); the groups window says the rest.
ALONE_STATUS = "Nobody found yet: multicast may be blocked. Try an invite, or File → Add peer."


class StatusPane(QStatusBar):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.address_label = QLabel()
        self.address_label.setObjectName("networkState")
        self.address_label.setToolTip("Whether you are on the network, and the interface address and control "
                                      "port in use: messages written while offline are kept and sent when the "
                                      "network is back")
        self.peers_label = QLabel()
        self.sync_bar = QProgressBar()
        self.sync_bar.setObjectName("syncProgress")
        self.sync_bar.setFormat("sync %v/%m")
        self.sync_bar.hide()
        self.pending_label = QLabel()
        self.pending_label.setObjectName("pendingLabel")
        self.pending_label.setToolTip("Replies that arrived before the message they answer; "
                                      "they appear as soon as it does")
        self.messageChanged.connect(self.setToolTip)
        self.status_box: QMessageBox | None = None
        for widget in (self.sync_bar, self.pending_label, self.peers_label, self.address_label):
            self.addPermanentWidget(widget)

    def show_network(self, text: str, state: str) -> None:
        """``state``: connected, reconnecting or offline (the style sheet colours the label by it)."""
        self.address_label.setText(text)
        self._restyle(self.address_label, "network", state)
        self.address_label.updateGeometry()  # bold or not, the text's width changed

    def show_peers(self, count: int) -> None:
        self.peers_label.setText(f"{count} peer{'s' if count != 1 else ''} seen")

    def show_waiting(self, waiting: int) -> None:
        """Replies waiting for the message they answer, shown only while some wait: "no replies waiting"
        took the room a notice needs at 800 px."""
        replies = f"repl{'ies' if waiting != 1 else 'y'}"
        self.pending_label.setText(f"{waiting} {replies} waiting for a missing message"
                                   if waiting else "no replies waiting")
        self._restyle(self.pending_label, "waiting", "true" if waiting else "false")
        self.pending_label.setVisible(bool(waiting))

    def show_sync(self, sync: tuple[int, int] | None) -> None:
        """(received, expected) of a group's sync under way, or None."""
        if sync is not None:
            self.sync_bar.setRange(0, max(1, sync[1]))
            self.sync_bar.setValue(sync[0])
            self.sync_bar.show()
        else:
            self.sync_bar.hide()

    def show_alone(self, alone: bool) -> None:
        """Nobody heard of after a while: say why that may be, where the user looks first."""
        # "0 peers seen" says what the notice says; without it the notice fits at 800 px beside the
        # network state ("Connected on eth0 · 192.168.1.20:47477"), which it did not.
        self.peers_label.setVisible(not alone)
        if alone:
            self.showMessage(ALONE_STATUS)
        elif self.currentMessage() == ALONE_STATUS:
            self.clearMessage()

    @staticmethod
    def _restyle(label: QLabel, name: str, value: str) -> None:
        label.setProperty(name, value)
        label.style().unpolish(label)
        label.style().polish(label)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:  # noqa: N802 - Qt's name
        if self.currentMessage():
            self.show_in_full()
            return
        super().mouseReleaseEvent(event)

    def show_in_full(self) -> None:
        """The message in a box of its own, whole, selectable."""
        box = QMessageBox(QMessageBox.Icon.NoIcon, "Status", self.currentMessage(),
                          QMessageBox.StandardButton.Close, self.window())
        box.setObjectName("statusMessageBox")
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.status_box = box
        box.open()

    def fits(self) -> bool:
        """Whether the message shows whole at the window's width now."""
        room = self.width() - sum(w.width() for w in (self.sync_bar, self.pending_label, self.peers_label,
                                                       self.address_label) if w.isVisible()) - 24
        return self.fontMetrics().horizontalAdvance(self.currentMessage()) <= room
