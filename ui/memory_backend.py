"""An in-memory stand-in for the middleware (no sockets), for tests, screenshots and benchmarks.

:class:`MemoryManager` answers the same calls as ``GroupManager`` for one
peer that is alone with its fake LAN: tests add groups "seen on the network",
messages "from other peers" and member changes through its ``inject_*``
methods, which reach the GUI by the same queued path as real events.
Private groups keep their passphrase in plain memory (there is nothing to
seal here).  Every input is checked by the middleware's own rules
(:mod:`middleware.rules`), so a refusal has the words the real app shows.
It tells its listener the middleware's own event values (:mod:`middleware.events`);
``inject_warning`` stands for its ``WarningRaised`` (e.g. two different
messages under one mid).  Edits, deletes, reactions, pins and the
topic go through the middleware's own rules (:class:`middleware.chatops.GroupOperations`):
``inject_messages`` takes operations other members made (``operation_message``)
as the middleware would deliver them.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from ..middleware import rules
from ..middleware.chatops import GroupOperations, is_operation
from ..middleware.names import shown
from ..middleware.rangeset import RangeSet
from ..middleware.events import (GroupCreated, GroupsDiscovered, Listener, MemberJoined, MemberLeft, MessagesDelivered,
                                 MessagesUpdated, TopicChanged, WarningRaised)
from ..middleware.types import ChatMessage, GroupView, Member, Mid, iso_millis

from .backend import Peer
from .bridge import Backend


class MemoryManager(rules.OperationCalls):
    def __init__(self, listener: Listener, pid: str = "me0000000000", name: str = "Me") -> None:
        self.listener = listener
        self.pid = pid
        self.name = name
        self.interface = "127.0.0.1"
        self._groups: dict[str, GroupView] = {}
        self._history: dict[str, list[ChatMessage]] = {}
        self._seqno = 0
        self._counter = 0
        self._order = 0
        self.sent: list[tuple[str, str, Mid | None]] = []
        self.pending_count: dict[str, int] = {}
        self.advertised = 0
        self._passphrases: dict[str, str] = {}
        self.marks: dict[str, list[tuple[int, int]]] = {}  # the store's read marks
        self.presence: dict[str, str] = {}  # pid -> status; members not listed are offline
        self._ops: dict[str, GroupOperations] = {}

    # -- GroupManager's API ------------------------------------------------------------

    def create_group(self, desc: str, passphrase: str | None = None) -> str:
        desc = rules.check_desc(desc)
        private = passphrase is not None
        if passphrase is not None:
            rules.check_new_passphrase(passphrase)
        self._counter += 1
        gid = f"{self.pid}-{self._counter}"
        me = Member(self.pid, self.name)
        self._groups[gid] = GroupView(gid, desc, "239.1.1.1", 47477, private, True, (me,), (), 1, time.time(),
                                      frozenset({"gjlp"}))
        self._history[gid] = []
        if passphrase is not None:
            self._passphrases[gid] = passphrase
        self.listener(GroupCreated(gid))
        self.listener(GroupsDiscovered([self._groups[gid]]))
        return gid

    def join_group(self, gid: str, passphrase: str | None = None) -> str:
        view = self.group(gid)
        if not view.joined:
            if not view.verified:
                raise rules.not_verified(view.desc)
            rules.check_join_passphrase(view.desc, view.private, passphrase)
            # A private group injected without a passphrase opens to none.
            if view.private and passphrase != self._passphrases.get(gid):
                raise rules.wrong_passphrase(view.desc)
            me = Member(self.pid, self.name)
            view = _replace(view, joined=True, members=view.members + (me,), member_count=view.member_count + 1)
            self._groups[gid] = view
            self._history.setdefault(gid, [])
            self.listener(MemberJoined(gid, me))
            self.listener(GroupsDiscovered([view]))
        return gid

    # The middleware derives keys off its loop in these; here there is nothing to derive (and so
    # nothing to wait for: MemoryBackend runs them to their end at once).
    async def create_group_async(self, desc: str, passphrase: str | None = None) -> str:
        return self.create_group(desc, passphrase)

    async def join_group_async(self, gid: str, passphrase: str | None = None) -> str:
        return self.join_group(gid, passphrase)

    def leave_group(self, gid: str) -> None:
        view = self.group(gid)
        if not view.joined:
            raise rules.not_a_member(gid)
        self._groups[gid] = _replace(view, joined=False)

    def send(self, gid: str, text: str, parent: Mid | None = None) -> Mid:
        view = self.group(gid)
        if not view.joined:
            raise rules.not_a_member(gid)
        text = rules.check_message_text(text)
        if parent is not None and all(m.mid != parent for m in self._history[gid]):
            raise rules.bad_parent(gid, parent)
        self._seqno += 1
        mid = (self.pid, self._seqno)
        self.sent.append((gid, text, parent))
        now = int(time.time() * 1000)
        self._deliver(gid, [ChatMessage(gid, mid, parent, self.name, text, now, now)])
        return mid

    def operation_message(self, gid: str, author: Member, seqno: int, kind: str, target: Mid | None = None,
                          **fields) -> ChatMessage:
        """An operation by another member, as it would arrive (for ``inject_messages``)."""
        text = self._group_ops(gid).compose(author.pid, kind, target, **fields)
        now = int(time.time() * 1000)
        return ChatMessage(gid, (author.pid, seqno), target, author.name, text, now, now)

    def topic(self, gid: str) -> tuple[str, str]:
        self.group(gid)
        return self._group_ops(gid).topic()

    def pinned(self, gid: str) -> list[ChatMessage]:
        pinned = set(self._group_ops(gid).pinned())
        return [m for m in self.history(gid) if m.mid in pinned]

    def groups(self) -> list[GroupView]:
        return [self.group(gid) for gid in self._groups]

    def group(self, gid: str) -> GroupView:
        view = self._groups.get(gid)
        if view is None:
            raise rules.unknown_group(gid)
        ops = self._ops.get(gid)
        return replace(view, topic=ops.topic()[0]) if ops is not None else view

    def history(self, gid: str) -> list[ChatMessage]:
        self.group(gid)
        ops = self._group_ops(gid)
        return self._by_record(gid, [ops.view(m) for m in self._history.get(gid, []) if not is_operation(m)])

    def _by_record(self, gid: str, messages: list[ChatMessage]) -> list[ChatMessage]:
        """Each author by its member's name, as the middleware shows them (``PeerCore.by_record``);
        authors injected without a member entry keep the name their message carries."""
        view = self._groups[gid]
        names = {m.pid: shown(m.name) for m in (*view.members, *view.left)}
        return [m if names.get(m.sender, m.sender_name) == m.sender_name else
                m._replace(sender_name=names[m.sender], signed_name=m.sender_name) for m in messages]

    def pending(self, gid: str | None = None) -> int:
        return self.pending_count.get(gid, 0) if gid else sum(self.pending_count.values())

    def export_log(self, path: str | Path, gid: str | None = None) -> int:
        gids = [gid] if gid else [g for g, v in self._groups.items() if v.joined]
        count = 0
        with Path(path).open("w", encoding="utf-8") as out:
            for g in gids:
                for message in self.history(g):
                    row = message.to_json()
                    row["group_desc"] = self._groups[g].desc
                    row["received_at"] = iso_millis(message.received_at)
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
                    count += 1
        return count

    def stats_dict(self) -> dict:
        return {"delivered": sum(len(h) for h in self._history.values()), "pending": self.pending()}

    def advertise(self) -> None:
        self.advertised += 1

    def read_marks(self, gid: str) -> list[tuple[int, int]] | None:
        self.group(gid)
        return list(self.marks[gid]) if gid in self.marks else None

    def mark_read(self, gid: str, ranges: list[tuple[int, int]]) -> None:
        self.group(gid)
        merged = RangeSet.from_ranges(self.marks.get(gid, []))
        for first, last in ranges:
            merged.add_range(first, last + 1)
        self.marks[gid] = merged.ranges()

    def presence_of(self, gid: str) -> dict[str, str]:
        return {m.pid: "online" if m.pid == self.pid else self.presence.get(m.pid, "offline")
                for m in self.group(gid).members}

    def set_name(self, name: str) -> None:
        self.name = rules.check_name(name)

    # -- the fake network ---------------------------------------------------------------------

    def inject_group(self, gid: str, desc: str, members: tuple[Member, ...] = (), private: bool = False,
                     joined: bool = False, left: tuple[Member, ...] = (), history: list[ChatMessage] | None = None,
                     notify: bool = True, passphrase: str | None = None, creator: str | None = None,
                     verified: bool = True) -> GroupView:
        """A group seen on the network; its creator is its first member unless said otherwise."""
        private = private or passphrase is not None
        if creator is None:
            creator = members[0].pid if members else ""
        view = GroupView(gid, desc, "239.1.1.2", 47477, private, joined, tuple(members), tuple(left),
                         len(members), time.time(), frozenset({"gjlp"} if verified else {"zeroconf"}),
                         verified=verified, creator=creator if verified else "")
        if passphrase is not None:
            self._passphrases[gid] = passphrase
        self._groups[gid] = view
        self._history[gid] = list(history or [])
        self._ops.pop(gid, None)
        self._group_ops(gid).take(self._history[gid])
        if notify:
            self.listener(GroupsDiscovered([view]))
        return view

    def inject_messages(self, gid: str, messages: list[ChatMessage], notify: bool = True) -> None:
        """Messages from other peers, in delivery order (stored, and told to the GUI if joined)."""
        self._history.setdefault(gid, [])
        if self._groups.get(gid) is not None and self._groups[gid].joined and notify:
            self._deliver(gid, messages)
        else:
            self._group_ops(gid).take(self._store(gid, messages))

    def inject_member(self, gid: str, member: Member, joined: bool = True) -> None:
        view = self.group(gid)
        if joined:
            view = _replace(view, members=view.members + (member,), member_count=view.member_count + 1)
            self._groups[gid] = view
            self.listener(MemberJoined(gid, member))
        else:
            members = tuple(m for m in view.members if m.pid != member.pid)
            view = _replace(view, members=members, left=view.left + (member,), member_count=len(members))
            self._groups[gid] = view
            self.listener(MemberLeft(gid, member))
        self.listener(GroupsDiscovered([view]))

    def inject_warning(self, gid: str, text: str) -> None:
        """What the middleware tells as a :class:`WarningRaised` (equivocation, and the like)."""
        self.listener(WarningRaised(gid, text))

    def _group_ops(self, gid: str) -> GroupOperations:
        ops = self._ops.get(gid)
        if ops is None:
            ops = self._ops[gid] = GroupOperations(gid)
        return ops

    def _operate(self, gid: str, kind: str, target: Mid | None, **fields) -> Mid:
        view = self.group(gid)
        if not view.joined:
            raise rules.not_a_member(gid)
        rules.check_target(target)
        known = target is None or any(m.mid == target and not is_operation(m) for m in self._history[gid])
        text = self._group_ops(gid).compose(self.pid, kind, target, target_known=known, **fields)
        self._seqno += 1
        mid = (self.pid, self._seqno)
        now = int(time.time() * 1000)
        self._deliver(gid, [ChatMessage(gid, mid, target, self.name, text, now, now)])
        return mid

    def _store(self, gid: str, messages: list[ChatMessage]) -> list[ChatMessage]:
        stored = []
        for message in messages:
            self._order += 1
            stored.append(_with_order(message, self._order))
        self._history[gid].extend(stored)
        return stored

    def _deliver(self, gid: str, messages: list[ChatMessage]) -> None:
        changes = self._group_ops(gid).take(self._store(gid, messages))
        if changes.messages:
            self.listener(MessagesDelivered(gid, self._by_record(gid, changes.messages)))
        if changes.updated:
            by_mid = {m.mid: m for m in self._history[gid]}
            ops = self._group_ops(gid)
            self.listener(MessagesUpdated(gid, self._by_record(gid, [ops.view(by_mid[mid]) for mid in changes.updated
                                                                      if mid in by_mid])))
        if changes.topic_changed:
            text, by = self._group_ops(gid).topic()
            self.listener(TopicChanged(gid, text, by))


class MemoryBackend(Backend):
    """A :class:`~ui.bridge.Backend` over a :class:`MemoryManager`; calls complete at once."""

    def __init__(self, name: str = "Me", pid: str = "me0000000000", parent=None) -> None:
        super().__init__(parent)
        self.manager = MemoryManager(self.post, pid, name)
        self.pid, self.name, self.interface, self.port = pid, name, "127.0.0.1", 47477

    def _submit(self, work: Callable[[Peer], Any]) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(_run_to_end(work(self.manager)))
        except Exception as exc:
            future.set_exception(exc)
        return future


def _run_to_end(result: Any) -> Any:
    """A coroutine's value (ours never suspend: they await nothing); anything else as it is."""
    if not inspect.iscoroutine(result):
        return result
    try:
        result.send(None)
    except StopIteration as done:
        return done.value
    result.close()
    raise RuntimeError("a MemoryManager coroutine waited for something")


def _replace(view: GroupView, **changes) -> GroupView:
    return replace(view, **changes)


def _with_order(message: ChatMessage, order: int) -> ChatMessage:
    return message._replace(order=order)
