"""Paints one chat message: sender, time, wrapped text, and a mark while it is unread.

Used by the reply tree, a single thread and the time-ordered list.  The tree
view itself indents nothing (``setIndentation(0)``): the delegate indents a
reply by its depth up to ``MAX_INDENT_DEPTH`` levels and no further, so a
50-deep thread stays as wide as an 8-deep one; deeper replies, and every reply
in the time-ordered view, carry a line naming what they answer.

The text is laid out with :class:`QTextLayout`: words too long for the line
(URLs, hashes) break anywhere, a right-to-left paragraph runs right to left,
links are underlined and can be clicked, and filter matches are highlighted.
A long message shows its first ``COLLAPSE_LINES`` lines and a "Show more"
link; every text can be read in full.  Row heights depend on the text and the
width; they are cached because a tree of thousands of rows asks often.
:meth:`MessageDelegate.hit` tells what a click at a point of a row means
(reply button, expand arrow, "Show more", a link), for the view.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPointF, QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPalette, QTextCharFormat, QTextLayout, QTextOption
from PySide6.QtWidgets import QAbstractItemView, QStyle, QStyledItemDelegate, QStyleOptionViewItem, QToolTip

from ..middleware.files import readable_text
from ..middleware.kinds import CHAT, kind_of
from ..middleware.mentions import render
from ..middleware.types import ChatMessage, Mid
from .clock import clock, local_datetime  # noqa: F401 - clock is read from here by the views

from .member_list import marked_name
from .notices import is_notice
from .message_model import (DepthRole, MessageRole, MessageTreeModel, OwnRole, ParentMessageRole,
                            UnreadRole)

from .resources import MUTED_ALPHA, is_dark, theme_colors

if TYPE_CHECKING:
    from .files_view import FilesView

PAD = 6
MARK_WIDTH = 4
INDENT = 18  # per level of the reply tree
BRANCH = 16  # room for the expand arrow in the tree
MAX_INDENT_DEPTH = 8  # deeper replies keep this indent and say what they answer
COLLAPSE_LINES = 12  # longer texts show this many lines and "Show more"
COLLAPSE_CHARS = 3000  # and past this many characters the collapsed text is not even laid out
DIVIDER_HEIGHT = 22
NOTICE_PAD = 5  # above and below a notice's line
NOTICE_MARGIN = 48  # a notice's text keeps this far from both sides
LINK = re.compile(r"(?:https?|m2mc)://[^\s<>\"]+")
REPLY_LABEL = "↩ Reply"
MENTION_MARK = "@ you"  # on a row that mentions the reader
NEW_MARK = "● new"  # after the time on an unread row
_NODE_MODELS = (MessageTreeModel,)  # their indexes carry the message's node (one thread's model is one too)


def sender_color(pid: str, dark: bool) -> QColor:
    """A stable, readable colour per sender."""
    hue = int(hashlib.blake2b(pid.encode(), digest_size=2).hexdigest(), 16) % 360
    return QColor.fromHsl(hue, 150, 170 if dark else 85)


def snippet(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


LinkTitle = Callable[[str], str | None]
"""What an m2mc://message link shows instead of its ids, or None (the link as written)."""


def root_text(message: ChatMessage, limit: int = 60, names: dict[str, str] | None = None,
              link_title: LinkTitle | None = None) -> str:
    """How a thread's first message is named in lists and headers: its text (mentions by ``names``,
    pid -> name, message links by ``link_title`` as the conversation shows them), or that it was deleted."""
    if message.deleted:
        return "removed by an admin" if message.removed_by else "message deleted"
    return snippet(with_link_titles(readable_text(message.text, names or {}), link_title), limit)


def with_link_titles(text: str, link_title: LinkTitle | None) -> str:
    """``text`` with each m2mc://message link that ``link_title`` names shown as that title."""
    if link_title is None or "m2mc://message/" not in text:
        return text
    pieces, at = [], 0
    for start, end, url in links_in(text):
        title = link_title(url) if url.startswith("m2mc://message/") else None
        if title:
            pieces += [text[at:start], title]
            at = end
    return "".join(pieces) + text[at:]


def full_date(epoch_ms: int) -> str:
    return local_datetime(epoch_ms).strftime("%A %d %B %Y, %H:%M:%S")


def sent_tooltip(message: ChatMessage) -> str:
    """When ``message`` was sent, in full; and whether its sender's clock was out of bounds."""
    text = full_date(message.shown_at)
    if message.sent_at > message.shown_at:
        text += "\nThe sender's clock stamped it more than a day after it arrived here, so it is shown as a day after."
    elif message.sent_at < message.shown_at:
        text += "\nThe sender's clock stamped it before 2020, when no such message existed, so it is shown as 2020."
    return text


def is_right_to_left(text: str) -> bool:
    """The paragraph direction by its first strong character (Unicode's P2 rule)."""
    for char in text[:400]:
        kind = unicodedata.bidirectional(char)
        if kind in ("R", "AL"):
            return True
        if kind == "L":
            return False
    return False


def links_in(text: str) -> list[tuple[int, int, str]]:
    """(start, end, url) of each link, without the punctuation that ends a sentence."""
    found = []
    for match in LINK.finditer(text):
        url = match.group().rstrip(".,;:!?)]}'")
        found.append((match.start(), match.start() + len(url), url))
    return found


class _Body:
    __slots__ = ("layout", "height", "links", "collapsible", "hidden_chars")

    def __init__(self, layout: QTextLayout, height: int, links: list, collapsible: bool, hidden_chars: int) -> None:
        self.layout = layout
        self.height = height
        self.links = links
        self.collapsible = collapsible
        self.hidden_chars = hidden_chars


class MessageDelegate(QStyledItemDelegate):
    def __init__(self, view: QAbstractItemView, show_parent: bool = False, tree: bool = False) -> None:
        super().__init__(view)
        self.view = view
        self.show_parent = show_parent
        self.tree = tree  # the view is a tree that leaves indenting to this delegate
        self.expanded: set[Mid] = set()  # long texts shown in full
        self.divider: Mid | None = None  # "New messages" above this one
        self.highlight = ""  # lower-case filter text: matches highlighted, other rows dimmed
        self._heights: dict[tuple, int] = {}
        self._bodies: OrderedDict[tuple, _Body] = OrderedDict()
        self.own_pid = ""
        # What an m2mc://message link shows instead of its ids (None: the link as written); the window sets it.
        self.link_title: Callable[[str], str | None] | None = None
        self._names: dict[str, str] = {}  # pid -> the member record's name: authors, who reacted, mentions
        self.lookalikes: set[str] = set()  # members whose names look like another's: shown with ⚠ and fingerprint
        self.files: FilesView | None = None  # a file offer's strip (buttons, progress, thumbnail) comes from it
        # Own messages written while this peer was off the network: "queued" until it is back.
        self.queued: set[Mid] = set()
        self.refresh_style()

    def refresh_style(self) -> None:
        """Re-read fonts and colours (after a palette change)."""
        font = self.view.font()
        self.body_font = QFont(font)
        self.header_font = QFont(font)
        self.header_font.setBold(True)
        self.meta_font = QFont(font)
        self.meta_font.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
        self.body_metrics = QFontMetrics(self.body_font)
        self.header_metrics = QFontMetrics(self.header_font)
        self.meta_metrics = QFontMetrics(self.meta_font)
        bold_meta = QFont(self.meta_font)
        bold_meta.setBold(True)
        self.new_mark_width = QFontMetrics(bold_meta).horizontalAdvance(NEW_MARK) + 8
        self.dark = is_dark(self.view.palette())
        colors = theme_colors(self.view.palette())
        self.unread_color = QColor(colors["unread"])
        self.accent = QColor(colors["accent"])
        self.on_accent = QColor("#ffffff" if self.accent.lightnessF() < 0.6 else "#000000")
        self.match_color = QColor(colors["match"])
        self.muted = self.view.palette().color(QPalette.ColorRole.Text)
        self.muted.setAlpha(MUTED_ALPHA)
        self.guide = QColor(self.muted)
        self.guide.setAlpha(50)
        self.invalidate()

    def invalidate(self) -> None:
        self._heights.clear()
        self._bodies.clear()

    @property
    def names(self) -> dict[str, str]:
        return self._names

    @names.setter
    def names(self, names: dict[str, str]) -> None:
        # A renamed member's mentions read "@NewName": bodies laid out with the old one go.
        if names != self._names:
            self._names = names
            self.invalidate()
            self.view.scheduleDelayedItemsLayout()

    def mentions_me(self, message: ChatMessage) -> bool:
        return bool(self.own_pid) and not message.deleted and self.own_pid in message.mentions

    def set_highlight(self, text: str) -> None:
        self.highlight = text.strip().lower()
        self._bodies.clear()

    def toggle_expanded(self, index: QModelIndex) -> None:
        message: ChatMessage = index.data(MessageRole)
        self.expanded.symmetric_difference_update({message.mid})
        self._forget_height(message.mid)
        self.sizeHintChanged.emit(index)

    def set_divider(self, mid: Mid | None) -> None:
        for old in (self.divider, mid):
            if old is not None:
                self._forget_height(old)
        self.divider = mid

    def _forget_height(self, mid: Mid) -> None:
        for key in [key for key in self._heights if key[0] == mid]:
            del self._heights[key]

    def forget(self, mid: Mid) -> None:
        """``mid``'s message changed (edited, deleted, reactions): lay it out again."""
        self._forget_height(mid)
        for key in [key for key in self._bodies if key[0] == mid]:
            del self._bodies[key]

    def _reaction_chips(self, message: ChatMessage, left: int, top: int, width: int) -> list[tuple[QRect, str, list]]:
        chips: list[tuple[QRect, str, list]] = []
        x = left
        height = self.meta_metrics.height() + 4
        for emoji, pids in (message.reactions or {}).items():
            label = f"{emoji} {len(pids)}"
            chip_width = self.meta_metrics.horizontalAdvance(label) + 12
            if x + chip_width > left + width and chips:
                break  # one row: more emoji than fit are left out
            chips.append((QRect(x, top, chip_width, height), emoji, pids))
            x += chip_width + 4
        return chips

    def reaction_tooltip(self, emoji: str, pids: list) -> str:
        names = [("you" if pid == self.own_pid else self.names.get(pid) or pid[:8]) for pid in pids]
        return f"{emoji} {', '.join(names)}"
    # -- geometry ---------------------------------------------------------------------

    def _indent(self, depth: int) -> int:
        return (min(depth, MAX_INDENT_DEPTH) * INDENT + BRANCH) if self.tree else 0

    def _quoted(self, message: ChatMessage, depth: int) -> bool:
        # depth 0: a reply shown at the top, its parent not held (an older page not loaded)
        return message.parent is not None and (self.show_parent or depth > MAX_INDENT_DEPTH or depth == 0)

    def _text_width(self, depth: int) -> int:
        return max(80, self.view.viewport().width() - self._indent(depth) - 2 * PAD - MARK_WIDTH - 4)

    def _titled_links(self, text: str, deleted: bool):
        """``text`` with each m2mc://message link this peer can name (``link_title``) shown as its
        title; every link with its range in the new text; and the map of an old offset to the new."""
        found = [] if deleted else links_in(text)
        titles = [self.link_title(url) if url.startswith("m2mc://message/") and self.link_title else None
                  for _start, _end, url in found]
        if not any(titles):
            return text, found, lambda offset: offset
        pieces, links, shifts, at, grown = [], [], [], 0, 0
        for (start, end, url), title in zip(found, titles):
            shown = title or url
            pieces.append(text[at:start])
            links.append((start + grown, start + grown + len(shown), url))
            pieces.append(shown)
            grown += len(shown) - (end - start)
            shifts.append((end, grown))
            at = end
        pieces.append(text[at:])

        def moved(offset: int) -> int:
            return offset + next((g for end, g in reversed(shifts) if offset >= end), 0)

        return "".join(pieces), links, moved

    def _body(self, message: ChatMessage, width: int) -> _Body:
        expanded = message.mid in self.expanded
        key = (message.mid, width, expanded, self.highlight)
        body = self._bodies.get(key)
        if body is not None:
            self._bodies.move_to_end(key)
            return body
        text = (f"removed by an admin ({self.names.get(message.removed_by, 'unknown')})" if message.removed_by
                else "message deleted") if message.deleted else message.text if kind_of(message.text) == CHAT \
            else readable_text(message.text, {})  # a file offer's caption, or what its kind shows
        mentions: list[tuple[int, int, bool]] = []  # (start, length, of me) of each "@Name" shown
        if "<@" in text and not message.deleted:
            text, at = "", 0
            for run in render(message.text, self._names):
                if run.pid is not None:
                    mentions.append((at, len(run.text), run.pid == self.own_pid))
                text += run.text
                at += len(run.text)
        text, titled, moved = self._titled_links(text, message.deleted)
        mentions = [(moved(start), length, of_me) for start, length, of_me in mentions]
        cut = not expanded and len(text) > COLLAPSE_CHARS
        shown = text[:COLLAPSE_CHARS] if cut else text
        # QTextLayout breaks lines at U+2028 only; the same length keeps link offsets valid.
        layout = QTextLayout(shown.replace("\n", "\u2028"), self.body_font)
        option = QTextOption()
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        if is_right_to_left(shown):
            option.setTextDirection(Qt.LayoutDirection.RightToLeft)
            option.setAlignment(Qt.AlignmentFlag.AlignRight)
        else:
            option.setTextDirection(Qt.LayoutDirection.LeftToRight)
        layout.setTextOption(option)
        links = [(start, end, url) for start, end, url in titled if end <= len(shown)]
        formats = []
        for start, end, _url in links:
            link_format = QTextCharFormat()
            link_format.setForeground(self.accent)
            link_format.setFontUnderline(True)
            formats.append(_format_range(start, end - start, link_format))
        for start, length, of_me in mentions:
            if start < len(shown):
                mention_format = QTextCharFormat()
                mention_format.setFontWeight(QFont.Weight.Bold)
                if of_me:  # the reader's own name: on the accent, as chat apps mark "you"
                    mention_format.setBackground(self.accent)
                    mention_format.setForeground(self.on_accent)
                else:
                    mention_format.setForeground(self.accent)
                formats.append(_format_range(start, min(length, len(shown) - start), mention_format))
        if message.deleted:
            deleted_format = QTextCharFormat()
            deleted_format.setFontItalic(True)
            deleted_format.setForeground(self.muted)
            formats.append(_format_range(0, len(shown), deleted_format))
        elif self.highlight:
            lowered, at = shown.lower(), 0
            match_format = QTextCharFormat()
            match_format.setBackground(self.match_color)
            while (at := lowered.find(self.highlight, at)) >= 0:
                formats.append(_format_range(at, len(self.highlight), match_format))
                at += len(self.highlight)
        if formats:
            layout.setFormats(formats)
        layout.beginLayout()
        height, lines, end = 0.0, 0, 0
        while expanded or lines < COLLAPSE_LINES:
            line = layout.createLine()
            if not line.isValid():
                break
            line.setLineWidth(width)
            line.setPosition(QPointF(0, height))
            height += line.height()
            lines += 1
            end = line.textStart() + line.textLength()
        layout.endLayout()
        hidden = len(text) - end if not expanded else 0
        collapsible = expanded and (lines > COLLAPSE_LINES or len(text) > COLLAPSE_CHARS) or hidden > 0
        body = _Body(layout, int(height + 0.999), links, collapsible, max(0, hidden))
        self._bodies[key] = body
        if len(self._bodies) > 3000:
            self._bodies.popitem(last=False)
        return body

    def _geometry(self, rect: QRect, index: QModelIndex | QPersistentModelIndex) -> dict:
        message: ChatMessage = index.data(MessageRole)
        depth = index.data(DepthRole) or 0
        indent = self._indent(depth)
        top = rect.top() + (DIVIDER_HEIGHT if message.mid == self.divider else 0)
        left = rect.left() + indent + MARK_WIDTH + PAD
        width = self._text_width(depth)
        header = QRect(left, top + PAD, width, self.header_metrics.height())
        y = header.bottom() + 1 + 2
        quote = None
        if self._quoted(message, depth):
            quote = QRect(left, y, width, self.meta_metrics.height())
            y += quote.height() + 2
        body = self._body(message, width)
        body_top = y
        y += body.height
        more = None
        if body.collapsible:
            more = QRect(left, y + 2, width, self.meta_metrics.height())
            y = more.bottom() + 1
        strip = self.files.strip(message, left, y, width, self.meta_metrics) if self.files is not None else None
        if strip is not None:
            y += strip.height
        chips = []
        if message.reactions:
            chips = self._reaction_chips(message, left, y + 3, width)
            y += self.meta_metrics.height() + 4 + 3
        full_name = self.author(message, bool(index.data(OwnRole)))
        meta = clock(message.shown_at) + (" · edited" if message.edited and not message.deleted else "") + \
            (" · pinned" if message.pinned else "") + (" · queued" if message.mid in self.queued else "")
        meta_width = self.meta_metrics.horizontalAdvance(meta)
        # A long name (64 characters are allowed) is cut, not the time and the unread mark after it.
        room = width - 8 - meta_width - (self.new_mark_width if index.data(UnreadRole) else 0)
        name = full_name
        if self.header_metrics.horizontalAdvance(name) > room:
            name = self.header_metrics.elidedText(name, Qt.TextElideMode.ElideRight,
                                                  max(room, self.header_metrics.horizontalAdvance("W…")))
        name_width = self.header_metrics.horizontalAdvance(name)
        time_rect = QRect(left + name_width + 8, header.top(), meta_width, header.height())
        reply_width = self.meta_metrics.horizontalAdvance(REPLY_LABEL) + 12
        reply = QRect(rect.right() - PAD - reply_width, header.top() - 2, reply_width, header.height() + 4)
        toggle = QRect(rect.left() + indent - BRANCH, header.top(), BRANCH, header.height()) if self.tree else None
        return {"message": message, "depth": depth, "left": left, "width": width, "header": header,
                "name": name, "full_name": full_name, "name_width": name_width, "meta": meta, "time": time_rect, "quote": quote,
                "body": body, "body_top": body_top, "more": more, "reply": reply, "toggle": toggle, "chips": chips,
                "file": strip,
                "bottom": y + PAD}

    def author(self, message: ChatMessage, own: bool = False) -> str:
        """The header's name: the author's member record's (the middleware's ``sender_name`` when this
        view has no record), with ⚠ and the key's fingerprint when it looks like another member's."""
        name = (self.names.get(message.sender) or message.sender_name or message.sender[:8]) + (" (you)" if own else "")
        return marked_name(name, message.sender, self.lookalikes)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        # Scrolled by pixels, the view asks for every shown row's height after each insert:
        # the cached answer is one dict lookup, with the node read straight off the index
        # for the tree models (no data() round trip).
        model = index.model()
        if isinstance(model, _NODE_MODELS):
            node = index.internalPointer()
            message, depth = node.message, node.depth
        else:
            message = index.data(MessageRole)
            if message is None:
                return super().sizeHint(option, index)
            depth = index.data(DepthRole) or 0
        viewport_width = self.view.viewport().width()
        key = (message.mid, viewport_width, depth if depth <= MAX_INDENT_DEPTH else -1)
        height = self._heights.get(key)
        if height is None:
            height = self._height(message, depth)
            if len(self._heights) > 200_000:
                self._heights.clear()
            self._heights[key] = height
        return QSize(viewport_width, height)

    def _height(self, message: ChatMessage, depth: int) -> int:
        """What :meth:`_geometry` adds up, without the header's widths."""
        if is_notice(message):
            return NOTICE_PAD + self._notice_body(message).height + NOTICE_PAD
        height = (DIVIDER_HEIGHT if message.mid == self.divider else 0) + PAD + self.header_metrics.height() + 2
        if self._quoted(message, depth):
            height += self.meta_metrics.height() + 2
        body = self._body(message, self._text_width(depth))
        height += body.height
        if body.collapsible:
            height += 2 + self.meta_metrics.height()
        if self.files is not None:
            strip = self.files.strip(message, 0, 0, self._text_width(depth), self.meta_metrics)
            height += strip.height if strip is not None else 0
        if message.reactions:
            height += self.meta_metrics.height() + 4 + 3
        return height + PAD

    # -- clicks and tooltips ------------------------------------------------------------

    def hit(self, index: QModelIndex, rect: QRect, pos) -> tuple[str, Any] | None:
        """What a click at ``pos`` (viewport coordinates) in the row at ``rect`` means: a kind and what it
        is about (an index for "toggle" and "more", a mid for "reply", (mid, emoji) for "react", a URL)."""
        message = index.data(MessageRole)
        if message is None:
            return None
        if is_notice(message):
            body, origin = self._notice_place(rect, message)
            return _link_at(body, pos.x() - origin.x(), pos.y() - origin.y())
        geometry = self._geometry(rect, index)
        if geometry["toggle"] is not None and geometry["toggle"].contains(pos) and \
                index.model().hasChildren(index):
            return "toggle", index
        if geometry["reply"].contains(pos):
            return "reply", geometry["message"].mid
        if geometry["more"] is not None and geometry["more"].contains(pos):
            return "more", index
        for chip, emoji, _pids in geometry["chips"]:
            if chip.contains(pos):
                return "react", (geometry["message"].mid, emoji)
        if geometry["file"] is not None:
            for button, action, _label in geometry["file"].buttons:
                if button.contains(pos):
                    return "file", (action, geometry["message"])
        return _link_at(geometry["body"], pos.x() - geometry["left"], pos.y() - geometry["body_top"])

    def helpEvent(self, event, view, option, index) -> bool:
        if event is not None and index.isValid() and is_notice(index.data(MessageRole)):
            QToolTip.showText(event.globalPos(), sent_tooltip(index.data(MessageRole)), view)
            return True
        if event is not None and index.isValid() and index.data(MessageRole) is not None:
            geometry = self._geometry(option.rect, index)
            if geometry["time"].contains(event.pos()):
                QToolTip.showText(event.globalPos(), sent_tooltip(geometry["message"]), view)
                return True
            header = geometry["header"]
            name_rect = QRect(header.left(), header.top(), geometry["name_width"], header.height())
            if geometry["name"] != geometry["full_name"] and name_rect.contains(event.pos()):
                QToolTip.showText(event.globalPos(), geometry["full_name"], view)
                return True
            for chip, emoji, pids in geometry["chips"]:
                if chip.contains(event.pos()):
                    QToolTip.showText(event.globalPos(), self.reaction_tooltip(emoji, pids), view)
                    return True
            strip = geometry["file"]
            if strip is not None and strip.status and strip.status_rect.contains(event.pos()):
                QToolTip.showText(event.globalPos(), strip.status, view)  # an error elided in a narrow row
                return True
        return super().helpEvent(event, view, option, index)

    def body_layout(self, index: QModelIndex) -> QTextLayout:
        """The laid-out text of a row (for tests and hit checks)."""
        message: ChatMessage = index.data(MessageRole)
        if is_notice(message):
            return self._notice_body(message).layout
        return self._body(message, self._text_width(index.data(DepthRole) or 0)).layout

    # -- painting -------------------------------------------------------------------------

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        message: ChatMessage = index.data(MessageRole)
        if message is None:
            return super().paint(painter, option, index)
        if is_notice(message):
            return self._paint_notice(painter, option.rect, message)
        painter.save()
        painter.setClipRect(option.rect)
        style = option.widget.style() if option.widget else None
        # Selection and hover backgrounds come from the style; we draw the content.
        background = QStyleOptionViewItem(option)
        self.initStyleOption(background, index)
        background.text = ""
        rect = option.rect
        geometry = self._geometry(rect, index)
        if message.mid == self.divider:
            self._paint_divider(painter, QRect(rect.left(), rect.top(), rect.width(), DIVIDER_HEIGHT))
            background.rect = rect.adjusted(0, DIVIDER_HEIGHT, 0, 0)
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, background, painter, option.widget)
        if self.highlight and self.highlight not in f"{message.sender_name}\n{message.text}".lower():
            painter.setOpacity(0.45)  # an ancestor shown for context, not a match
        depth = geometry["depth"]
        left, header = geometry["left"], geometry["header"]
        if self.tree and depth:
            painter.setPen(self.guide)
            for level in range(min(depth, MAX_INDENT_DEPTH)):
                x = rect.left() + BRANCH // 2 + level * INDENT
                painter.drawLine(x, rect.top(), x, rect.bottom())
        toggle = geometry["toggle"]
        if toggle is not None and index.model().hasChildren(index):
            painter.setPen(self.muted)
            painter.setFont(self.meta_font)
            expanded = getattr(self.view, "isExpanded", lambda _i: True)(index)
            painter.drawText(toggle, Qt.AlignmentFlag.AlignCenter, "▾" if expanded else "▸")
        unread = bool(index.data(UnreadRole))
        if unread:
            mark_x = left - PAD - MARK_WIDTH
            painter.fillRect(QRect(mark_x, header.top() - PAD + 2, MARK_WIDTH, geometry["bottom"] - header.top() - 2),
                             self.unread_color)

        text_color = option.palette.color(QPalette.ColorRole.Text)
        # header: sender · time · "new" · (on hover) Reply
        painter.setFont(self.header_font)
        painter.setPen(sender_color(message.sender, self.dark))
        painter.drawText(header, Qt.AlignmentFlag.AlignLeft, geometry["name"])
        painter.setFont(self.meta_font)
        painter.setPen(self.muted)
        time_rect = geometry["time"]
        painter.drawText(time_rect, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, geometry["meta"])
        x = time_rect.right() + 8
        if self.tree and index.model().hasChildren(index) and not getattr(self.view, "isExpanded", lambda _i: True)(index):
            folded = f"{index.model().rowCount(index)} hidden repl{'ies' if index.model().rowCount(index) != 1 else 'y'}"
            painter.drawText(QRect(x, header.top(), max(0, header.right() - x), header.height()),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, folded)
            x += self.meta_metrics.horizontalAdvance(folded) + 8
        if unread:
            painter.setPen(self.unread_color)
            bold_meta = QFont(self.meta_font)
            bold_meta.setBold(True)
            painter.setFont(bold_meta)
            painter.drawText(QRect(x, header.top(), max(0, header.right() - x), header.height()),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, NEW_MARK)
            x += self.new_mark_width
        if self.mentions_me(message):
            # The row's marker: an accent chip in the header, and the edge strip unread rows use.
            painter.fillRect(QRect(left - PAD - MARK_WIDTH, header.top() - PAD + 2, MARK_WIDTH,
                                   geometry["bottom"] - header.top() - 2), self.accent)
            bold_meta = QFont(self.meta_font)
            bold_meta.setBold(True)
            chip = QRect(x, header.top() + 1, QFontMetrics(bold_meta).horizontalAdvance(MENTION_MARK) + 10,
                         header.height() - 2)
            if chip.right() <= header.right():
                painter.setRenderHint(QPainter.RenderHint.Antialiasing)
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(self.accent)
                painter.drawRoundedRect(chip, 6, 6)
                painter.setPen(self.on_accent)
                painter.setFont(bold_meta)
                painter.drawText(chip, Qt.AlignmentFlag.AlignCenter, MENTION_MARK)
        if option.state & QStyle.StateFlag.State_MouseOver:
            reply = geometry["reply"]
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            painter.setPen(self.accent)
            painter.setBrush(option.palette.color(QPalette.ColorRole.Base))
            painter.drawRoundedRect(reply.adjusted(0, 0, -1, -1), 6, 6)
            painter.setFont(self.meta_font)
            painter.drawText(reply, Qt.AlignmentFlag.AlignCenter, REPLY_LABEL)

        quote = geometry["quote"]
        if quote is not None:
            parent: ChatMessage | None = index.data(ParentMessageRole)
            quoted = (f"↳ replying to {parent.sender_name}: {snippet(readable_text(parent.text, self._names))}"
                      if parent is not None
                      else "↳ replying to a message not shown")
            painter.setFont(self.meta_font)
            painter.setPen(self.accent)
            painter.drawText(quote, Qt.AlignmentFlag.AlignLeft,
                             self.meta_metrics.elidedText(quoted, Qt.TextElideMode.ElideRight, quote.width()))

        body: _Body = geometry["body"]
        painter.setPen(text_color)
        body.layout.draw(painter, QPointF(left, geometry["body_top"]))
        more = geometry["more"]
        if more is not None:
            painter.setFont(self.meta_font)
            painter.setPen(self.accent)
            label = ("Show less" if message.mid in self.expanded
                     else f"Show more ({body.hidden_chars:,} more characters)")
            painter.drawText(more, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, label)
        if geometry["file"] is not None and self.files is not None:
            painter.setFont(self.meta_font)
            self.files.paint_strip(painter, geometry["file"], option.palette, self.accent, self.muted)
        if geometry["chips"]:
            painter.setFont(self.meta_font)
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            for chip, emoji, pids in geometry["chips"]:
                mine = self.own_pid in pids
                painter.setPen(self.accent if mine else self.guide)
                painter.setBrush(option.palette.color(QPalette.ColorRole.Base))
                painter.drawRoundedRect(chip.adjusted(0, 0, -1, -1), 8, 8)
                painter.setPen(text_color)
                painter.drawText(chip, Qt.AlignmentFlag.AlignCenter, f"{emoji} {len(pids)}")
        painter.restore()

    # -- notices (ui.notices): one centred, muted line (or a few) between the messages --------------

    def _notice_body(self, message: ChatMessage) -> _Body:
        """The notice's words after its author's name, with the pinned message's link titled, and when."""
        width = max(80, self.view.viewport().width() - 2 * NOTICE_MARGIN)
        key = (message.mid, width, "notice", self.highlight)
        body = self._bodies.get(key)
        if body is not None:
            return body
        author = "You" if message.sender == self.own_pid else self.author(message)
        text, links, _moved = self._titled_links(f"{author} {readable_text(message.text, self._names)}", False)
        when = f" · {clock(message.shown_at)}"
        layout = QTextLayout((text + when).replace("\n", " "), self.meta_font)
        option = QTextOption(Qt.AlignmentFlag.AlignHCenter)
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        layout.setTextOption(option)
        name_format = QTextCharFormat()
        name_format.setFontWeight(QFont.Weight.Bold)
        formats = [_format_range(0, len(author), name_format)]
        for start, end, _url in links:
            link_format = QTextCharFormat()
            link_format.setForeground(self.accent)
            link_format.setFontUnderline(True)
            formats.append(_format_range(start, end - start, link_format))
        layout.setFormats(formats)
        layout.beginLayout()
        height = 0.0
        while (line := layout.createLine()).isValid():
            line.setLineWidth(width)
            line.setPosition(QPointF(0, height))
            height += line.height()
        layout.endLayout()
        body = _Body(layout, int(height + 0.999), links, False, 0)
        self._bodies[key] = body
        if len(self._bodies) > 3000:
            self._bodies.popitem(last=False)
        return body

    def _notice_place(self, rect: QRect, message: ChatMessage) -> tuple[_Body, QPointF]:
        return self._notice_body(message), QPointF(rect.left() + NOTICE_MARGIN, rect.top() + NOTICE_PAD)

    def _paint_notice(self, painter: QPainter, rect: QRect, message: ChatMessage) -> None:
        body, origin = self._notice_place(rect, message)
        painter.save()
        painter.setClipRect(rect)
        if self.highlight and self.highlight not in f"{message.sender_name}\n{message.text}".lower():
            painter.setOpacity(0.45)
        painter.setPen(self.muted)
        body.layout.draw(painter, origin)
        painter.restore()

    def _paint_divider(self, painter: QPainter, rect: QRect) -> None:
        painter.setPen(self.unread_color)
        middle = rect.center().y()
        font = QFont(self.meta_font)
        font.setBold(True)
        painter.setFont(font)
        label = "New messages"
        label_width = QFontMetrics(font).horizontalAdvance(label) + 16
        painter.drawLine(rect.left() + 4, middle, rect.right() - label_width, middle)
        painter.drawText(QRect(rect.right() - label_width + 8, rect.top(), label_width - 8, rect.height()),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, label)


def _link_at(body: _Body, x: float, y: float) -> tuple[str, str] | None:
    """("link", url) if (x, y), from the body's top left, is on one of its links."""
    if body.links and 0 <= y < body.height:
        layout = body.layout
        for number in range(layout.lineCount()):
            line = layout.lineAt(number)
            if line.y() <= y < line.y() + line.height():
                cursor = line.xToCursor(x)
                if line.naturalTextRect().left() <= x <= line.naturalTextRect().right():
                    for start, end, url in body.links:
                        if start <= cursor < end:
                            return "link", url
                break
    return None


def _format_range(start: int, length: int, char_format: QTextCharFormat) -> QTextLayout.FormatRange:
    format_range = QTextLayout.FormatRange()
    format_range.start = start
    format_range.length = length
    format_range.format = char_format
    return format_range
