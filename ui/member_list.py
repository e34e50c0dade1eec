"""The members pane: who is in the current group, whether they are online, and the fingerprint of their key.

Anyone can pick any display name, so a name alone says little: each member's
tooltip shows the short fingerprint of their key (the start of their pid), and
two or more members whose names look alike (identical, or equal once case,
invisible characters and confusable letters are set aside: ``middleware.names``)
are marked with ⚠ and their fingerprints shown in the row itself, so they can be
told apart.  The conversation marks their messages the same way (``delegate.py``).
"""

from __future__ import annotations

from functools import lru_cache

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import QListWidget, QListWidgetItem

from ..middleware.names import lookalikes, shown
from ..middleware.types import GroupView, Member, short_fingerprint

from .resources import icon

DUPLICATE_MARK = "⚠"
# Shape and colour both say it (a colour alone fails one reader in twelve): the mark in the text,
# and a coloured badge on the member's icon.
PRESENCE_MARKS = {"online": "●", "away": "◐", "offline": "○"}
PRESENCE_COLOURS = {"online": "#2e9d4a", "away": "#d08a00", "offline": "#8a8a8a"}
# The owner (the group's creator) and admins, said in the row: only they can remove members.
ROLE_LABELS = {"owner": "owner", "admin": "admin"}


def presence_legend() -> str:
    """The members pane's key to the marks, in rich text with the marks' own colours."""
    return "&nbsp;&nbsp;".join(f'<span style="color:{PRESENCE_COLOURS[status]}">{mark}</span>&nbsp;{status}'
                               for status, mark in PRESENCE_MARKS.items())


@lru_cache(maxsize=8)
def presence_icon(status: str, size: int = 20) -> QIcon:
    """The member icon with a badge in the status's colour: filled when online, half when away,
    a ring when offline."""
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    icon("member").paint(painter, 0, 0, size, size)
    colour = QColor(PRESENCE_COLOURS[status])
    badge = QRectF(size * 0.52, size * 0.52, size * 0.46, size * 0.46)
    painter.setPen(QPen(QColor("#ffffff"), 1.2))
    painter.setBrush(QColor("#ffffff"))
    painter.drawEllipse(badge.adjusted(-1, -1, 1, 1))
    painter.setPen(QPen(colour, 1.6))
    painter.setBrush(colour if status == "online" else Qt.GlobalColor.transparent)
    painter.drawEllipse(badge)
    if status == "away":
        painter.setBrush(colour)
        painter.drawPie(badge, 90 * 16, 180 * 16)
    painter.end()
    return QIcon(pixmap)


def marked_name(name: str, pid: str, look_alike: set[str]) -> str:
    """``name`` as shown (the middleware already removed what may not be shown, but a name that
    reverses the text after it must never reach a label), with ⚠ and the key's fingerprint when
    ``pid`` is among the members whose names look alike."""
    name = shown(name)
    return f"{DUPLICATE_MARK} {name} · {short_fingerprint(pid)[:9]}" if pid in look_alike else name


def member_text(member: Member, me: str, look_alike: set[str]) -> str:
    return marked_name(member.name + (" (you)" if member.pid == me else ""), member.pid, look_alike)


def member_tooltip(member: Member, look_alike: set[str], left: bool = False) -> str:
    lines = [f"key fingerprint {short_fingerprint(member.pid)}", f"peer id {member.pid}"]
    if member.pid in look_alike:
        lines.insert(0, f"More than one member is called “{member.name}”, or by a name that looks the same: "
                        "tell them apart by the fingerprint.")
    if left:
        lines.append("left the group")
    return "\n".join(lines)


DIRECT_MARK = "⇄"
MemberPidRole = Qt.ItemDataRole.UserRole + 1  # a member's row: their pid ("Message NAME…")
MemberNameRole = Qt.ItemDataRole.UserRole + 2  # and the name their record gives


def fill_member_list(widget: QListWidget, view: GroupView | None, me: str, header, status_of,
                     direct: set[str] | frozenset[str] = frozenset()) -> None:
    """Show ``view``'s members (and those who left) in ``widget``.

    ``header(text)`` makes a section title; ``status_of(pid)`` says "online", "away" or "offline"
    as heard by this peer; ``direct`` holds the members reached directly (by unicast, where
    multicast does not join them to this peer), marked with ⇄.  Each row keeps its status
    under ``Qt.UserRole`` ("left" for those who left).
    """
    widget.clear()
    if view is None:
        return
    duplicates = lookalikes(view.members)
    widget.addItem(header(f"In the group ({len(view.members)})"))
    for member in sorted(view.members, key=lambda m: (m.name.lower(), m.pid)):
        status = "online" if member.pid == me else status_of(member.pid)
        role = ROLE_LABELS.get(view.roles.get(member.pid, ""), "")
        text = f"{PRESENCE_MARKS[status]} {member_text(member, me, duplicates)}" + (f"  · {role}" if role else "")
        tooltip = f"{member.name} is {status} (as heard by this peer)\n{member_tooltip(member, duplicates)}"
        if role:
            tooltip += f"\nThe group's {role}" + (" (its creator)" if role == "owner" else "")
        if member.pid in direct:
            text += f"  {DIRECT_MARK}"
            tooltip += ("\nReached directly: multicast does not get through between you, so what you send "
                        "goes to this member by unicast as well")
        item = QListWidgetItem(presence_icon(status), text)
        item.setToolTip(tooltip)
        item.setData(Qt.ItemDataRole.AccessibleTextRole,
                     f"{member_text(member, me, duplicates)}, {status}" + (f", {role}" if role else ""))
        item.setData(Qt.ItemDataRole.UserRole, status)
        item.setData(MemberPidRole, member.pid)
        item.setData(MemberNameRole, member.name)
        widget.addItem(item)
    if view.left:
        widget.addItem(header(f"Left ({len(view.left)})"))
        for member in sorted(view.left, key=lambda m: (m.name.lower(), m.pid)):
            item = QListWidgetItem(icon("close"), f"{shown(member.name)} — left the group")
            item.setFlags(Qt.ItemFlag.ItemIsEnabled)  # readable, not greyed out, not selectable
            item.setToolTip(member_tooltip(member, set(), left=True))
            item.setData(Qt.ItemDataRole.UserRole, "left")
            widget.addItem(item)
    if view.removed:
        widget.addItem(header(f"Removed ({len(view.removed)})"))
        for member in sorted(view.removed, key=lambda m: (m.name.lower(), m.pid)):
            item = QListWidgetItem(icon("close"), f"{shown(member.name)} — removed")
            item.setFlags(Qt.ItemFlag.ItemIsEnabled)
            item.setToolTip(member_tooltip(member, set()) + "\nremoved by an owner or admin: every member refuses "
                            "what they send")
            item.setData(Qt.ItemDataRole.UserRole, "removed")
            widget.addItem(item)
