"""Direct messages (issue 29): the conversations, what the middleware tells of them, sending, reading,
and the ways in ("Message NAME…" from the members pane and from a message's author).

Each conversation keeps a Qt-free :class:`~ui.message_tree.MessageTree` and a
:class:`~ui.direct_pane.DirectTreeModel` for as long as the window, as group sessions do, so
unread marks survive switching.  A conversation appears in the Direct messages list when it is
opened, when the middleware lists it at start, or when a message arrives in it.  Incoming
messages count as read once on screen in the active window for a moment (or selected), and each
is then told to the middleware (``mark_direct_read``), which sends a read receipt if the user lets
it (the View menu's "Send read receipts", kept in the settings).  Only the shared contract's calls
and events are used (:mod:`ui.direct_api`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Protocol

from PySide6.QtCore import QItemSelectionModel, QModelIndex, QObject, QPoint, Qt, QTimer
from PySide6.QtGui import QAction, QGuiApplication, QTextCursor
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QListWidgetItem, QMenu, QStackedWidget, QWidget

from ...middleware.direct import conversation_id
from ...middleware.events import Event
from ...middleware.names import shown
from ...middleware.presence import ONLINE
from ...middleware.types import ChatMessage, Mid, key_fingerprint
from ..backend import Peer
from ..bridge import Backend, describe_error
from ..delegate import snippet
from ..focus import Navigation
from ..direct_api import (CONVERSATION_PREFIX, ConversationView, DirectDelivered, DirectMessage,
                          DirectStatusChanged, Marks, as_chat_message)
from ..direct_pane import OFFLINE_MARK, ONLINE_MARK, DirectList, DirectPane, DirectTreeModel, PeerRole
from ..member_list import MemberNameRole, MemberPidRole
from ..message_model import MessageRole
from ..message_tree import MessageTree
from ..resources import icon
from ..model.state import Draft, Drafts
from ..widgets import UnreadCountRole

JUMP_CANCELLED_MS = 10_000  # how long the status bar says a jump was cancelled
SEEN_DELAY_MS = 1500  # as long on screen as a group's message before it counts as read
POLL_MS = 5000  # names and presence of the conversations' peers
READ_RECEIPTS_KEY = "direct/read_receipts"
NOTIFY_KEY = "notify/direct"


@dataclass
class Conversation:
    peer: str
    name: str
    tree: MessageTree
    model: DirectTreeModel
    marks: Marks
    item: QListWidgetItem
    fingerprint: str = ""
    online: bool = False
    loaded: bool = False  # its history was asked for
    loading: bool = False  # and has not come yet: what is told meanwhile is in it
    reply: Mid | None = None
    read_told: Mid | None = None  # what the middleware was last told is read

    @property
    def key(self) -> str:
        return CONVERSATION_PREFIX + self.peer


class DirectView(Protocol):
    """What the direct controller asks of the window."""

    direct_list: DirectList
    direct_pane: DirectPane
    centre_stack: QStackedWidget
    group_list: QListWidget
    member_list: QListWidget

    def isActiveWindow(self) -> bool: ...
    def show_status(self, text: str, timeout: int) -> None: ...
    def show_side_panes(self, on: bool) -> None: ...
    def apply_focus(self, navigation: Navigation, from_list: QWidget | None = None) -> None: ...
    def update_title(self) -> None: ...
    def notify(self, title: str, text: str, mention: bool = False, target: tuple[str, Mid] | None = None) -> None: ...


class DirectController(QObject):
    """The conversations with single peers, and the one shown in the direct pane."""

    def __init__(self, backend: Backend, view: DirectView, settings: Any, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.backend = backend
        self.view = view
        self.settings = settings
        # More of the members pane's menu, (menu, pid, name) -> None: the group's role actions (team.py)
        self.member_actions: list[Callable[[QMenu, str, str], None]] = []
        self.conversations: dict[str, Conversation] = {}
        self.current: Conversation | None = None
        # A message to show once its conversation's history has come (a search result), and what to
        # do if it is not there.  Another conversation shown meanwhile cancels it (_cancel_jump).
        self._jump: tuple[Conversation, Mid, Callable[[], object]] | None = None
        pane = view.direct_pane
        pane.delegate.own_pid = backend.pid
        pane.compose.submitted.connect(self.send_message)
        pane.send_button.clicked.connect(self.send_message)
        pane.view.reply_requested.connect(self.reply_to)
        pane.reply_banner.cancelled.connect(self.clear_reply)
        # One draft per conversation, kept in the settings as groups' are (ui.model.state.Drafts).
        self.drafts = Drafts(settings)
        self._restoring = False
        pane.compose.textChanged.connect(self.keep_draft)
        pane.view.verticalScrollBar().valueChanged.connect(self.schedule_seen)
        pane.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        pane.view.customContextMenuRequested.connect(self._message_menu)
        view.direct_list.currentItemChanged.connect(self._on_item_selected)
        view.group_list.currentItemChanged.connect(self._on_group_selected)
        self.attach_member_list(view.member_list)
        self.read_receipts_action = QAction("Send &read receipts", self, checkable=True)
        self.read_receipts_action.setToolTip("Tell the people who write to you when you have read their direct messages")
        self.read_receipts_action.setChecked(self._setting(READ_RECEIPTS_KEY, "true") == "true")
        self.read_receipts_action.toggled.connect(self.set_read_receipts)
        self.notify_action = QAction("&Notify me of direct messages", self, checkable=True)
        self.notify_action.setChecked(self.notifies())
        self.notify_action.toggled.connect(lambda on: self._store(NOTIFY_KEY, "true" if on else "false"))
        self._seen_timer = QTimer(self, singleShot=True, interval=SEEN_DELAY_MS)
        self._seen_timer.timeout.connect(self.mark_visible_read)
        self._poll_timer = QTimer(self, interval=POLL_MS)
        self._poll_timer.timeout.connect(self.refresh)
        # After news of a conversation its peer's presence may have changed: asked once per burst.
        self._refresh_soon = QTimer(self, singleShot=True, interval=200)
        self._refresh_soon.timeout.connect(self.refresh)
        backend.peer_event.connect(self._on_event)
        app = QGuiApplication.instance()
        if isinstance(app, QGuiApplication):  # back to the window: what is on screen is read now
            app.focusWindowChanged.connect(self.schedule_seen)

    # -- settings ----------------------------------------------------------------------------------

    def _setting(self, key: str, default: str) -> str:
        if hasattr(self.settings, "value"):
            return str(self.settings.value(key, default))
        return str(self.settings.get(key, default))

    def _store(self, key: str, value: str) -> None:
        if hasattr(self.settings, "setValue"):
            self.settings.setValue(key, value)
        else:
            self.settings[key] = value

    def set_read_receipts(self, on: bool) -> None:
        self._store(READ_RECEIPTS_KEY, "true" if on else "false")
        self.backend.call(lambda peer: peer.set_read_receipts(on))

    def notifies(self) -> bool:
        return self._setting(NOTIFY_KEY, "true") == "true"

    # -- start and refresh ---------------------------------------------------------------------------

    def load(self) -> None:
        """Tell the middleware the stored read-receipt choice, and list the conversations it keeps."""
        on = self.read_receipts_action.isChecked()
        self.backend.call(lambda peer: peer.set_read_receipts(on), on_error=lambda _e: None)
        self.refresh()
        self._poll_timer.start()

    def refresh(self) -> None:
        opened = list(self.conversations)
        self.backend.call(partial(_conversations_and_presence, opened), on_result=self._on_conversations_found,
                          on_error=lambda _e: None)

    def _on_conversations_found(self, found: tuple[list[ConversationView], dict[str, bool]]) -> None:
        views, online = found
        self._on_conversations(views)
        for peer, is_online in online.items():  # opened, no message yet: the middleware lists none of them
            conversation = self.conversations.get(peer)
            if conversation is None or conversation.online == is_online:
                continue
            conversation.online = is_online
            self._show_item(conversation)
            if conversation is self.current:
                self._show_heading(conversation)

    def _on_conversations(self, views: list[ConversationView]) -> None:
        for found in views:
            conversation = self.conversation(found.peer, found.name)
            conversation.fingerprint = found.fingerprint or conversation.fingerprint
            if found.name:
                conversation.name = found.name
            conversation.online = found.online
            self._show_item(conversation)
            if not conversation.loaded:
                self._load_history(conversation)
            if conversation is self.current:
                self._show_heading(conversation)

    # -- conversations -------------------------------------------------------------------------------

    def conversation(self, peer: str, name: str = "") -> Conversation:
        """``peer``'s conversation, made (and listed) on first use."""
        conversation = self.conversations.get(peer)
        if conversation is not None:
            return conversation
        tree = MessageTree(self.backend.pid)
        marks = Marks()
        item = QListWidgetItem(icon("member"), "")
        item.setData(PeerRole, peer)
        item.setData(UnreadCountRole, 0)
        holder: list[Conversation] = []
        model = DirectTreeModel(tree, marks, lambda: holder[0].name if holder else name, self)
        conversation = Conversation(peer, name or key_fingerprint(peer), tree, model, marks, item,
                                    key_fingerprint(peer))
        holder.append(conversation)
        self.conversations[peer] = conversation
        model.unread_count_changed.connect(lambda count, c=conversation: self._on_unread(c, count))
        model.read_state_changed.connect(lambda mids, c=conversation: self._on_read(c, mids))
        self._show_item(conversation)
        self.view.direct_list.addItem(item)
        return conversation

    def _show_item(self, conversation: Conversation) -> None:
        item = conversation.item
        name = shown(conversation.name)
        unread = len(conversation.tree.unread)
        item.setText(f"{ONLINE_MARK if conversation.online else OFFLINE_MARK} {name}")
        presence = "online" if conversation.online else "offline"
        item.setToolTip(f"{name} is {presence}\nkey fingerprint {conversation.fingerprint}")
        item.setData(Qt.ItemDataRole.AccessibleTextRole,
                     f"{name}, {presence}" + (f", {unread} unread" if unread else ""))

    def _load_history(self, conversation: Conversation) -> None:
        conversation.loaded = conversation.loading = True
        peer = conversation.peer
        self.backend.call(lambda backend_peer: backend_peer.direct_history(peer),
                          on_result=lambda messages: self._on_history(conversation, messages))

    def _on_history(self, conversation: Conversation, messages: list[DirectMessage]) -> None:
        conversation.loading = False
        for message in messages:
            conversation.marks.take(message)
        conversation.tree.add_messages([as_chat_message(m) for m in messages], unread=False)
        conversation.tree.set_unread(m.mid for m in messages if not m.outgoing and m.status == "received")
        jump = self._jump if self._jump is not None and self._jump[0] is conversation else None
        if jump is not None:
            self._jump = None
        if jump is not None and conversation is self.current:  # always, as leaving it cancels the jump
            self._after_arrival(conversation, at_bottom=False)  # at the message, not at the end
            self._show_jump(*jump)
        elif conversation is self.current:
            self._after_arrival(conversation, at_bottom=True)

    def open_with(self, pid: str, name: str = "") -> None:
        """Open (or start) the conversation with ``pid`` ("Message NAME…")."""
        if pid == self.backend.pid:
            return
        new = pid not in self.conversations
        conversation = self.conversation(pid, name)
        if new:
            self.refresh()
        if not conversation.loaded:
            self._load_history(conversation)
        self.view.direct_list.setCurrentItem(conversation.item)

    def show_message(self, peer: str, mid: Mid, missing: Callable[[], object]) -> None:
        """Open the conversation with ``peer`` at ``mid``, in view and selected (a search result), once
        its history has come; ``missing`` is called if the message is not in it."""
        if peer == self.backend.pid:
            missing()
            return
        self.open_with(peer)
        conversation = self.conversations[peer]
        if conversation.loading:
            self._jump = (conversation, mid, missing)
        else:
            self._show_jump(conversation, mid, missing)

    def _cancel_jump(self, on_show: Conversation | None) -> None:
        """``on_show`` (None: a group) is now on show: a jump into another conversation still loading is
        cancelled, and the user told.  The user's newer choice wins, whenever the history comes: a jump
        kept for later would either pull them away from what they chose, or land them, on a later visit,
        at a message they may long have stopped looking for."""
        if self._jump is None or self._jump[0] is on_show:
            return
        conversation = self._jump[0]
        self._jump = None
        self.view.show_status(f"The message in the conversation with {shown(conversation.name)} was not shown: "
                              "another conversation was opened while it loaded.", JUMP_CANCELLED_MS)

    def _show_jump(self, conversation: Conversation, mid: Mid, missing: Callable[[], object]) -> None:
        if not self.select_message(conversation, mid):
            missing()
            return
        # The message found is selected (Ctrl+R answers it) and the keys are in the compose box:
        # on the reading view, typed letters only searched its rows.
        self.view.apply_focus(Navigation.SEARCH_JUMP)

    def _on_item_selected(self, item: QListWidgetItem | None, _previous=None) -> None:
        conversation = self.conversations.get(item.data(PeerRole)) if item is not None else None
        if conversation is None:
            return
        self.show_conversation(conversation)

    def _on_group_selected(self, item: QListWidgetItem | None, _previous=None) -> None:
        if item is None:
            return
        # A group shown: the conversation goes out of view (and the group's compose box is the one on show).
        self._cancel_jump(None)
        self.current = None
        self.view.direct_list.setCurrentRow(-1)
        self.view.centre_stack.setCurrentIndex(0)
        self.view.show_side_panes(True)

    def show_conversation(self, conversation: Conversation) -> None:
        pane = self.view.direct_pane
        switched = self.current is not conversation
        self._cancel_jump(conversation)
        self.current = conversation
        if switched:
            self._restore_draft(conversation)
        self.view.group_list.setCurrentRow(-1)  # no group is shown: no group action may act on it
        self.view.centre_stack.setCurrentWidget(pane)
        # The keys go to the compose box unless the arrows in the list chose it (ui.focus).  Given
        # before the side panes go, so that the focus does not fall to the groups list, which would
        # then open its first group.
        self.view.apply_focus(Navigation.DIRECT_SHOWN, from_list=self.view.direct_list)
        self.view.show_side_panes(False)  # the threads and members of no group
        pane.delegate.marks = conversation.marks
        pane.delegate.peer_name = conversation.name
        pane.delegate.invalidate()
        if pane.view.model() is not conversation.model:
            pane.view.setModel(conversation.model)
            pane.view.selectionModel().currentChanged.connect(self._on_current_message)
        pane.view.expandAll()
        pane.view.scrollToBottom()
        pane.compose_error.hide()
        self._show_heading(conversation)
        self.show_target()
        self.schedule_seen()

    def _show_heading(self, conversation: Conversation) -> None:
        self.view.direct_pane.show_heading(shown(conversation.name), conversation.fingerprint, conversation.online)
        self.view.direct_pane.compose.setAccessibleName(f"Direct message to {shown(conversation.name)}")
        self.view.direct_pane.delegate.peer_name = conversation.name

    # -- what the middleware tells ---------------------------------------------------------------------

    def _on_event(self, event: Event) -> None:
        if isinstance(event, (DirectDelivered, DirectStatusChanged)) and not self._refresh_soon.isActive():
            self._refresh_soon.start()
        match event:
            case DirectDelivered(peer, messages):
                self._on_delivered(peer, messages)
            case DirectStatusChanged(peer, mid, status):
                self._on_status(peer, mid, status)

    def _on_delivered(self, peer: str, messages: list[DirectMessage]) -> None:
        incoming = [m for m in messages if not m.outgoing]
        new = peer not in self.conversations
        conversation = self.conversation(peer, incoming[0].sender_name if incoming else "")
        if new:
            self.refresh()  # its name, fingerprint and presence as the middleware knows them
        if not conversation.loaded:
            self._load_history(conversation)
        # Events and call results come back in the order the middleware made them: while the history
        # is on its way, what is told is in it already (stored before told), and comes in its order.
        if not conversation.loading:
            for message in messages:
                conversation.marks.take(message)
            view = self.view.direct_pane.view
            bar = view.verticalScrollBar()
            at_bottom = bar.value() >= bar.maximum() - 4
            shown_now = conversation.tree.add_messages([as_chat_message(m) for m in messages], unread=True)
            if conversation is self.current and shown_now:
                self._after_arrival(conversation, at_bottom)
        self._to_top(conversation)
        if incoming and self.notifies() and not (conversation is self.current and self.view.isActiveWindow()):
            last = incoming[-1]
            extra = f" (+{len(incoming) - 1} more)" if len(incoming) > 1 else ""
            self.view.notify(f"{shown(conversation.name)} (direct message)", snippet(last.text, 120) + extra,
                             target=(conversation_id(self.backend.pid, peer), last.mid))

    def _to_top(self, conversation: Conversation) -> None:
        """The conversation with the newest message heads the list, as in every messenger."""
        rows = self.view.direct_list
        row = rows.row(conversation.item)
        if row <= 0:
            return
        current = rows.currentItem() is conversation.item
        rows.blockSignals(True)  # a move is not a choice of conversation
        rows.takeItem(row)
        rows.insertItem(0, conversation.item)
        if current:
            rows.setCurrentItem(conversation.item)
        rows.blockSignals(False)

    def _after_arrival(self, conversation: Conversation, at_bottom: bool) -> None:
        view = self.view.direct_pane.view
        view.expandAll()
        if at_bottom:
            QTimer.singleShot(0, view.scrollToBottom)
        self.show_target()
        self.schedule_seen()

    def _on_status(self, peer: str, mid: Mid, status: str) -> None:
        conversation = self.conversations.get(peer)
        if conversation is None or conversation.loading or not conversation.marks.set_status(mid, status):
            return
        conversation.model.status_changed(mid)
        if conversation is self.current:
            self.view.direct_pane.view.viewport().update()

    # -- reading ------------------------------------------------------------------------------------------

    def _on_unread(self, conversation: Conversation, count: int) -> None:
        conversation.item.setData(UnreadCountRole, count)
        self._show_item(conversation)
        self.view.update_title()

    def unread_total(self) -> int:
        return sum(len(conversation.tree.unread) for conversation in self.conversations.values())

    def _on_read(self, conversation: Conversation, _mids: list[Mid]) -> None:
        # The middleware takes "read up to mid" (its receipt says as much): only the end of what is
        # read without a gap, in delivery order, is told, so an older message skipped stays unread.
        peer, tree = conversation.peer, conversation.tree
        newest = None
        for node in tree.arrival:
            mid = node.message.mid
            if mid[0] != peer:
                continue
            if mid in tree.unread:
                break
            newest = mid
        if newest is not None and newest != conversation.read_told:
            conversation.read_told = newest
            self._tell_read(peer, newest)

    def _tell_read(self, peer: str, mid: Mid) -> None:
        self.backend.call(lambda backend_peer: backend_peer.mark_direct_read(peer, mid), on_error=lambda _e: None)

    def schedule_seen(self, *_args: object) -> None:
        if self.current is not None and self.current.tree.unread:
            self._seen_timer.start()

    def mark_visible_read(self) -> None:
        """Messages on screen in the active window count as read."""
        conversation = self.current
        if conversation is None or not conversation.tree.unread or not self.view.isActiveWindow():
            return
        conversation.tree.mark_read(self.view.direct_pane.view.visible_mids())

    def next_unread(self) -> bool:
        """Ctrl+U in a conversation: its oldest unread message, else the first conversation (in the list's
        order) with news, opened there.  Whether one was selected."""
        listed = [self.view.direct_list.item(row) for row in range(self.view.direct_list.count())]
        order = [self.current] if self.current is not None else []
        order += [c for item in listed if (c := self.conversations.get(item.data(PeerRole))) is not None
                  and c is not self.current]
        for conversation in order:
            unread = conversation.tree.unread_in_arrival_order()
            if not unread:
                continue
            if conversation is not self.current:
                self.view.direct_list.setCurrentItem(conversation.item)
            self.select_message(conversation, unread[0])
            return True
        return False

    def select_message(self, conversation: Conversation, mid: Mid) -> bool:
        """Show and select ``mid`` of the conversation on show (False: it holds no such message)."""
        if conversation is not self.current or conversation.tree.node(mid) is None:
            return False
        view = self.view.direct_pane.view
        conversation.tree.reveal(mid)
        index = conversation.model.index_for(mid)
        view.selectionModel().setCurrentIndex(index, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        view.scrollTo(index, QAbstractItemView.ScrollHint.PositionAtCenter)
        return True

    def _on_current_message(self, current: QModelIndex, _previous: QModelIndex) -> None:
        message: ChatMessage | None = current.data(MessageRole) if current.isValid() else None
        if message is not None and self.current is not None:
            self.current.tree.mark_read([message.mid])

    # -- writing ------------------------------------------------------------------------------------------

    def keep_draft(self) -> None:
        """What is typed to the shown conversation, and the message it answers, kept as its draft."""
        if self._restoring or self.current is None:
            return
        self.drafts.put(draft_key(self.current.peer),
                        Draft(self.view.direct_pane.compose.toPlainText(), self.current.reply))

    def _restore_draft(self, conversation: Conversation) -> None:
        draft = self.drafts.get(draft_key(conversation.peer))
        compose = self.view.direct_pane.compose
        self._restoring = True
        try:
            compose.setPlainText(draft.text)
            compose.moveCursor(QTextCursor.MoveOperation.End)
        finally:
            self._restoring = False
        conversation.reply = draft.reply

    def show_target(self) -> None:
        conversation = self.current
        banner = self.view.direct_pane.reply_banner
        parent = conversation.tree.message(conversation.reply) if conversation and conversation.reply else None
        banner.show_target(parent)

    def reply_to(self, mid: Mid) -> None:
        if self.current is None or self.current.tree.message(mid) is None:
            return
        self.current.reply = mid
        self.keep_draft()
        self.show_target()
        self.view.direct_pane.compose.setFocus()

    def reply_to_selected(self) -> bool:
        """Ctrl+R while a conversation is shown: answer its selected message (True: Ctrl+R was for us)."""
        pane = self.view.direct_pane
        if self.view.centre_stack.currentWidget() is not pane:
            return False
        index = pane.view.currentIndex()
        message: ChatMessage | None = index.data(MessageRole) if index.isValid() else None
        if message is not None:
            self.reply_to(message.mid)
        else:
            pane.compose.setFocus()
        return True

    def escape(self) -> bool:
        """Esc while a conversation is shown: forget the reply target (True: Esc was for us)."""
        if self.view.centre_stack.currentWidget() is not self.view.direct_pane:
            return False
        self.clear_reply()
        self.view.direct_pane.compose.setFocus()
        return True

    def clear_reply(self) -> None:
        if self.current is not None:
            self.current.reply = None
            self.keep_draft()
        self.show_target()

    def send_message(self) -> None:
        conversation = self.current
        pane = self.view.direct_pane
        text = pane.compose.toPlainText()
        if conversation is None or not text.strip():
            return
        peer, parent = conversation.peer, conversation.reply
        pane.compose_error.hide()
        self.backend.call(lambda backend_peer: backend_peer.send_direct(peer, text, parent),
                          on_result=lambda _mid: self._sent(conversation, text),
                          on_error=self._send_failed)

    def _sent(self, conversation: Conversation, text: str) -> None:
        pane = self.view.direct_pane
        if conversation is self.current and pane.compose.toPlainText() == text:
            conversation.reply = None
            pane.compose.clear()  # the draft goes with it (keep_draft)
            self.show_target()

    def _send_failed(self, error: Exception) -> None:
        pane = self.view.direct_pane
        pane.compose_error.setText(f"Not sent: {describe_error(error)}")
        pane.compose_error.show()

    # -- the ways in ----------------------------------------------------------------------------------------

    def message_action(self, menu: QMenu, pid: str, name: str) -> QAction | None:
        """Add "Message NAME…" to ``menu`` (none for oneself)."""
        if not pid or pid == self.backend.pid:
            return None
        return menu.addAction(icon("send"), f"Message {shown(name)}…", lambda: self.open_with(pid, name))

    def attach_member_list(self, members: QListWidget) -> None:
        """The members pane's context menu offers "Message NAME…" for each member; Enter on a member
        (or a double click) opens the conversation at once, so the keyboard alone gets there."""
        members.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        members.customContextMenuRequested.connect(lambda pos: self._member_menu(members, pos))
        members.itemActivated.connect(self._member_activated)

    def _member_activated(self, item: QListWidgetItem) -> None:
        pid = item.data(MemberPidRole)
        if pid and pid != self.backend.pid:
            self.open_with(pid, item.data(MemberNameRole) or "")

    def member_menu(self, item: QListWidgetItem, parent: QWidget) -> QMenu | None:
        pid = item.data(MemberPidRole)
        if not pid or pid == self.backend.pid:
            return None
        menu = QMenu(parent)
        self.message_action(menu, pid, item.data(MemberNameRole) or "")
        for add in self.member_actions:  # the group's own: roles and removal (controllers/team.py)
            add(menu, pid, item.data(MemberNameRole) or "")
        return menu

    def _member_menu(self, members: QListWidget, pos: QPoint) -> None:
        item = members.itemAt(pos)
        menu = self.member_menu(item, members) if item is not None else None
        if menu is not None:
            menu.popup(members.viewport().mapToGlobal(pos))

    def _message_menu(self, pos: QPoint) -> None:
        view = self.view.direct_pane.view
        index = view.indexAt(pos)
        message: ChatMessage | None = index.data(MessageRole) if index.isValid() else None
        if message is None:
            return
        menu = QMenu(view)
        menu.addAction(icon("reply"), "Reply", lambda: self.reply_to(message.mid))
        menu.popup(view.viewport().mapToGlobal(pos))


def _conversations_and_presence(opened: list[str], peer: Peer) -> tuple[list[ConversationView], dict[str, bool]]:
    """The middleware's conversations, and for each one ``opened`` here that it does not list yet (no
    message in it), whether that person is online in any joined group, as the members pane says."""
    views = peer.conversations()
    listed = {view.peer for view in views}
    unlisted = [pid for pid in opened if pid not in listed]
    online = dict.fromkeys(unlisted, False)
    if unlisted:
        for group in peer.groups():
            if group.joined:
                statuses = peer.presence_of(group.gid)
                online.update({pid: True for pid in unlisted if statuses.get(pid) == ONLINE})
    return views, online


def draft_key(peer: str) -> str:
    """A direct conversation's key among the drafts (a group's is its gid: no gid has a colon)."""
    return f"dm:{peer}"
