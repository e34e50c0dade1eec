"""GroupManager: the middleware's public API, composing the protocol cores with their I/O.

It owns the store, the multicast sockets and the zeroconf adapter, maps each
joined gid to its :class:`~middleware.channel.GroupChannel`, and feeds the GJLP
core.  All methods run on the asyncio loop thread (use
:class:`~middleware.runner.ManagerThread` from other threads).

Writes are batched per event-loop turn: deliveries and seqnos go to SQLite,
one commit, and only then are datagrams transmitted and listeners told
(:meth:`flush`), so whatever was sent or shown survives a crash.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import random
import sqlite3
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import clock, crypto, passphrase as passphrases, wire
from .channel import Conflict, GapReported, GroupChannel, Replaced, SyncProgress
from .chatops import OP_MARKER, GroupOperations, is_operation
from .discovery import ZeroconfDiscovery
from .gjlp import Gjlp, GroupRecord, GroupSeen, MemberJoined, MemberLeft, MemberUpdated, group_address
from .mop import DEFAULT_MAX_HELD, DEFAULT_MAX_HELD_BYTES
from .presence import Presence
from .store import Store
from .transport import MulticastNetwork, interface_name, link_is_up, resolve_interface
from .types import (ChatMessage, GroupListener, GroupView, Mid, NullListener, PassphraseRefused, UsageError,
                    check_unicode, format_mid, iso_millis)

log = logging.getLogger(__name__)

CONTROL_ADDR = "239.255.77.77"
DEFAULT_PORT = 47477
MAX_DESC = wire.MAX_DESC
MAX_NAME = wire.MAX_NAME


@dataclass
class Config:
    data_dir: Path
    name: str | None = None
    iface: str | None = None
    port: int = DEFAULT_PORT
    control_addr: str = CONTROL_ADDR
    zeroconf: bool = True
    max_held: int = DEFAULT_MAX_HELD
    max_held_bytes: int = DEFAULT_MAX_HELD_BYTES
    seed: int | None = None


@dataclass
class Stats:
    datagrams_in: int = 0
    datagrams_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    malformed_dropped: int = 0
    bad_signature_dropped: int = 0
    sealed_dropped: int = 0
    not_member_dropped: int = 0
    duplicates_dropped: int = 0
    delivered: int = 0
    own_looped_back: int = 0
    extra: dict = field(default_factory=dict)


class GroupManager:
    def __init__(self, config: Config, listener: GroupListener | None = None) -> None:
        self.config = config
        self.listener: GroupListener = listener or NullListener()
        self.store = Store(Path(config.data_dir) / "m2mc.sqlite3")
        self.identity = self.store.identity()
        self.pid = self.identity.pid
        self._pid_bytes = self.pid.encode()
        self._ciphers: dict[str, crypto.GroupCipher] = {}  # private groups this peer holds the key of
        stored_name = self.store.name()
        if config.name and config.name != stored_name:
            self.store.set_name(_check_name(config.name))
        self.name = config.name or stored_name or ""
        self.interface = resolve_interface(config.iface)
        self._rng = random.Random(config.seed)
        self.gjlp = Gjlp(self.identity, self.name, self._rng, control_addr=config.control_addr)
        # Key derivations run here, one at a time (Argon2id takes 256 MiB and ~0.6 s), never on the loop.
        self._kdf_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="m2mc-kdf")
        self.plaintext_refused = 0
        self._control_backlog: collections.deque[bytes] = collections.deque()
        self._control_backlog_bytes = 0
        self._control_draining = False
        self.control_backlog_dropped = 0
        self.channels: dict[str, GroupChannel] = {}
        self.network = MulticastNetwork(self.interface)
        self.discovery = ZeroconfDiscovery(self.interface, self.pid, self._on_zeroconf) if config.zeroconf else None
        self.stats = Stats()
        self.presence = Presence()  # last heard per pid; idle beacons (middleware/presence.py)
        self._outgoing: list[tuple[str, int, bytes]] = []
        self._flush_scheduled = False
        self._last_flush = 0.0
        self._flush_interval = self.FLUSH_INTERVAL
        self._seqnos_to_save: set[str] = set()
        # While the store cannot be written: what failed, and what waits to be stored.
        self.storage_error: str | None = None
        self._unstored: list[ChatMessage] = []
        self._unstored_conflicts: list = []  # Conflict and Replaced events not stored yet
        self._members_to_save: dict[str, set[str]] = {}  # gid -> pids whose rows changed
        self._unsent: dict[Mid, str] = {}  # own messages taken back since take_unsent()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closed = False
        self._background: set[asyncio.Task] = set()
        self._operations: dict[str, GroupOperations] = {}  # per joined group, rebuilt from the store on first use
        for record, next_seqno in self.store.load_groups():
            self.gjlp.restore(record)
            key = self.store.group_key(record.gid) if record.private else None
            if key:
                self.gjlp.keys[record.gid] = key
            if self.gjlp.is_member(record.gid):
                self._open_channel(record.gid, next_seqno)
        if any(self.gjlp.groups[gid].members[self.pid].name != self.name for gid in self.gjlp.joined_gids()):
            for gid in self.gjlp.rename(self.name):  # renamed while away (--name): tell the members at start
                self.store.save_members(gid, [self.gjlp.groups[gid].members[self.pid]])

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.network.open()
        await self.network.listen(self.config.control_addr, self.config.port, self._on_control_datagrams)
        for gid in self.channels:
            await self._listen_group(gid)
        if self.discovery is not None:
            await self.discovery.start()
            for gid in self.channels:
                self._announce(gid)
        self._started = True
        for gid in self.channels:  # equivocations learnt before: the warning stands
            for kept, _ in self.store.conflicts(gid):
                self.listener.on_warning(gid, _conflict_warning((kept.sender, kept.seqno)))
        self._link_name = interface_name(self.interface)
        self._link_up = link_is_up(self._link_name) if self._link_name else True
        self._spawn(self._watch_link())
        self.advertise()
        log.info("peer %s (%s) on %s, control %s:%d", self.pid, self.name, self.interface,
                 self.config.control_addr, self.config.port)

    LINK_POLL = 0.5

    async def _watch_link(self) -> None:
        """On reconnect, advertise and resynchronise every group (GJLP and MSP "on return")."""
        while self._link_name:
            await asyncio.sleep(self.LINK_POLL)
            up = link_is_up(self._link_name)
            if up and not self._link_up:
                log.info("link %s is back: advertising and resynchronising", self._link_name)
                self.resync()
            self._link_up = up

    def resync(self) -> None:
        """Ask every joined group for what this peer missed, and re-advertise."""
        now = clock.now()
        for channel in self.channels.values():
            channel.start_sync(now)
        self.advertise()

    async def close(self) -> None:
        """Leave announcements are not sent: closing is not leaving (a restart resumes)."""
        if self._closed:
            return
        self._closed = True
        self.flush()
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._background):
            task.cancel()
        if self.discovery is not None:
            await self.discovery.close()
        self.network.close()
        self.store.close()
        self._kdf_executor.shutdown(wait=False, cancel_futures=True)

    # -- public API -------------------------------------------------------------------

    def set_name(self, name: str) -> None:
        """A new display name, kept and re-announced (a new signed record) in every joined group."""
        self.name = _check_name(name)
        self.store.set_name(self.name)
        for gid in self.gjlp.rename(self.name):
            self.store.save_members(gid, [self.gjlp.groups[gid].members[self.pid]])
            self._announce(gid)
        self._after_input()

    def advertise(self) -> None:
        """GJLP advertisement: ask every peer on the LAN for the groups it knows."""
        self.gjlp.advertise()
        self._after_input()

    def create_group(self, desc: str, passphrase: str | None = None) -> str:
        """A new group; with a passphrase it is private (content sealed with a key derived from it).

        Deriving a private group's key blocks for about half a second: on a running
        event loop, await :meth:`create_group_async` instead."""
        desc = _check_desc(desc)
        salt = crypto.new_salt()
        key = None
        if passphrase is not None:
            _check_new_passphrase(passphrase)
            key = crypto.derive_group_key(passphrase, salt, crypto.ARGON2ID)
        return self._create(desc, salt, key)

    async def create_group_async(self, desc: str, passphrase: str | None = None) -> str:
        """:meth:`create_group`, with the key derived on a worker thread while the loop goes on."""
        desc = _check_desc(desc)
        salt = crypto.new_salt()
        key = None
        if passphrase is not None:
            _check_new_passphrase(passphrase)
            key = await self._derive(passphrase, salt, crypto.ARGON2ID, crypto.ARGON2_OPSLIMIT, crypto.ARGON2_MEMLIMIT)
        gid = self._create(desc, salt, key)
        self.flush()  # the caller (GUI or JSON-RPC) hears of it once it is stored and sent
        return gid

    async def _derive(self, passphrase: str, salt: bytes, kdf: str, ops: int, mem: int) -> bytes:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._kdf_executor, crypto.derive_group_key, passphrase, salt, kdf, ops, mem)

    def _create(self, desc: str, salt: bytes, key: bytes | None) -> str:
        created_at = int(clock.wall() * 1000)
        addr = group_address(f"{self.pid}:{created_at}:{salt.hex()}", self.config.control_addr)
        if key:
            descriptor = wire.sign_descriptor(self.identity, desc, True, crypto.ARGON2ID, crypto.ARGON2_OPSLIMIT,
                                              crypto.ARGON2_MEMLIMIT, salt, crypto.key_check(key), addr,
                                              self.config.port, created_at)
        else:
            descriptor = wire.sign_descriptor(self.identity, desc, False, "", 0, 0, salt, b"", addr, self.config.port,
                                              created_at)
        record = self.gjlp.create_group(descriptor, created_at / 1000, key)
        gid = record.gid
        self.store.save_group(record)
        self.store.save_members(gid, record.members.values())
        if key:
            self.store.set_group_key(gid, key)
            self._ciphers[gid] = crypto.GroupCipher(key)
        self._open_channel(gid, 1, sync=False)
        self._spawn(self._listen_group(gid))
        self._announce(gid)
        self.listener.on_group_created(gid)
        self._after_input()
        return gid

    def _joinable(self, gid: str, passphrase: str | None) -> GroupRecord | None:
        """The group if joining needs doing (None if already a member); refuses what cannot be joined."""
        record = self._known(gid)
        if self.gjlp.is_member(gid):
            return None
        if record.legacy:
            raise UsageError(_LEGACY.format(desc=record.desc))
        if not record.verified:
            raise UsageError(f"group {record.desc!r} has not been verified yet (its creator's signed description "
                             "has not arrived): try again in a moment")
        if record.private and not passphrase:
            raise UsageError(f"group {record.desc!r} is private: its passphrase is needed to join")
        if not record.private and passphrase:
            # Whoever expects a private group must not write to an open one believing it sealed.
            raise UsageError(f"group {record.desc!r} is open, not private: anyone on the network can read it; "
                             "join it without a passphrase if that is what you want")
        return record

    @staticmethod
    def _checked(record: GroupRecord, key: bytes) -> bytes:
        if crypto.key_check(key) != record.key_check:
            raise PassphraseRefused(f"wrong passphrase for group {record.desc!r}", wrong=True)
        return key

    @staticmethod
    def _kdf_args(record: GroupRecord) -> tuple:
        d = record.descriptor
        return d.salt, d.kdf, d.kdf_ops, d.kdf_mem

    def join_group(self, gid: str, passphrase: str | None = None) -> str:
        """Join a known, verified group.  A private group's key derivation blocks for about
        half a second: on a running event loop, await :meth:`join_group_async` instead."""
        record = self._joinable(gid, passphrase)
        if record is None:
            return gid
        key = None
        if record.private:
            key = self._checked(record, crypto.derive_group_key(passphrase, *self._kdf_args(record)))
        return self._join(record, key)

    async def join_group_async(self, gid: str, passphrase: str | None = None) -> str:
        """:meth:`join_group`, with the key derived on a worker thread while the loop goes on."""
        record = self._joinable(gid, passphrase)
        if record is None:
            return gid
        key = None
        if record.private:
            key = self._checked(record, await self._derive(passphrase, *self._kdf_args(record)))
            if self._joinable(gid, passphrase) is None:  # joined meanwhile, by another call
                return gid
        self._join(record, key)
        self.flush()  # the caller (GUI or JSON-RPC) hears of it once it is stored and sent
        return gid

    def _join(self, record: GroupRecord, key: bytes | None) -> str:
        gid = record.gid
        self.gjlp.join(gid, clock.wall(), key)
        self.gjlp.advertise()  # the members' answers tell us who they are: we take datagrams only from them
        self.store.save_group(record)
        self.store.save_members(gid, record.members.values())  # what was known before joining, once
        if key is not None:
            self.store.set_group_key(gid, key)
            self._ciphers[gid] = crypto.GroupCipher(key)
        self._open_channel(gid, None)
        self._spawn(self._listen_group(gid))
        self._announce(gid)
        self._after_input()
        return gid

    def leave_group(self, gid: str) -> None:
        record = self._known(gid)
        if not self.gjlp.is_member(gid):
            raise UsageError(f"not a member of group {gid}")
        self.gjlp.leave(gid, clock.wall())
        self.store.save_members(gid, [record.members[self.pid]])
        channel = self.channels.pop(gid)
        self._operations.pop(gid, None)
        self.store.set_next_seqno(gid, channel.next_seqno)
        self.network.stop_listening(record.addr, record.port)
        if self.discovery is not None:
            self._spawn(self.discovery.withdraw(gid))
        self._after_input()

    def send(self, gid: str, text: str, parent: Mid | None = None) -> Mid:
        """Compose and queue a message; it is stored and sent by the next flush.  If that
        flush cannot store it, it is taken back, never sent (see :meth:`take_unsent`)."""
        channel = self._channel(gid)
        if not isinstance(text, str):
            raise UsageError("text must be a string")
        if text.startswith(OP_MARKER):
            raise UsageError("text must not start with the operation marker (U+0000 'obg1')")
        if parent is not None and self._ops(gid).is_operation_mid(parent):
            raise UsageError(f"bad parent: {format_mid(parent)} is an operation, not a message")
        data = channel.compose(self.name, text, parent, clock.now(), clock.wall())
        self._seqnos_to_save.add(gid)
        self._after_input()
        return self.pid, data.seqno

    # -- operations (middleware.obg): each is a message of ours, so it is signed, repaired and stored

    def edit(self, gid: str, mid: Mid, text: str) -> Mid:
        """Replace the text of our own message ``mid``."""
        if not isinstance(text, str) or not text.strip():
            raise UsageError("text must be a non-empty string")
        return self._operate(gid, "edit", mid, text=check_unicode(text, "text"))

    def delete(self, gid: str, mid: Mid) -> Mid:
        """Delete our own message ``mid``: its text goes, its place (and replies) stay."""
        return self._operate(gid, "delete", mid)

    def react(self, gid: str, mid: Mid, emoji: str, on: bool = True) -> Mid:
        if not isinstance(emoji, str):
            raise UsageError("emoji must be a string")
        return self._operate(gid, "react", mid, emoji=check_unicode(emoji, "emoji"), on=bool(on))

    def pin(self, gid: str, mid: Mid, on: bool = True) -> Mid:
        return self._operate(gid, "pin", mid, on=bool(on))

    def set_topic(self, gid: str, text: str) -> Mid:
        if not isinstance(text, str):
            raise UsageError("topic must be a string")
        return self._operate(gid, "topic", None, text=check_unicode(text.strip(), "topic"))

    def topic(self, gid: str) -> tuple[str, str]:
        """``(topic, pid of who set it)``; ``("", "")`` if none."""
        self._channel(gid)
        return self._ops(gid).topic()

    def pinned(self, gid: str) -> list[ChatMessage]:
        pinned = set(self._ops(gid).pinned()) if gid in self.channels else set()
        return [m for m in self.history(gid) if m.mid in pinned]

    def _operate(self, gid: str, kind: str, target: Mid | None, **fields) -> Mid:
        channel = self._channel(gid)
        if target is not None and (type(target) is not tuple or len(target) != 2):
            raise UsageError("a message id is (pid, seqno)")
        ops = self._ops(gid)
        self.flush()  # what was just delivered counts: the operation names the last one it saw
        known = target is None or channel.orderer.is_delivered(target)
        text = ops.compose(self.pid, kind, target, target_known=known, **fields)
        data = channel.compose(self.name, text, target, clock.now(), clock.wall())
        self._seqnos_to_save.add(gid)
        self._after_input()
        return self.pid, data.seqno

    def _ops(self, gid: str, history: list[ChatMessage] | None = None) -> GroupOperations:
        """The group's operations, built on first use by replaying the store (``history`` if at hand)."""
        ops = self._operations.get(gid)
        if ops is None:
            ops = self._operations[gid] = GroupOperations(gid, fetch=lambda mids, gid=gid: self._stored(gid, mids))
            ops.take(self.store.history(gid) if history is None else history)
        return ops

    def _stored(self, gid: str, mids: list[Mid]) -> list[ChatMessage]:
        return [ChatMessage(gid, (m.sender, m.seqno), m.parent, m.name, m.text, m.sent_at, 0)
                for m in self.store.fetch(gid, mids)]

    def groups(self) -> list[GroupView]:
        return [self._with_topic(record.view(self.pid)) for record in self.gjlp.groups.values()]

    def group(self, gid: str) -> GroupView:
        return self._with_topic(self._known(gid).view(self.pid))

    def _with_topic(self, view: GroupView) -> GroupView:
        if view.gid not in self.channels:
            return view
        topic = self._ops(view.gid).topic()[0]
        return replace(view, topic=topic) if topic else view

    def history(self, gid: str) -> list[ChatMessage]:
        self._known(gid)
        self.flush()
        messages = self.store.history(gid)
        if gid not in self.channels:
            return [m for m in messages if not is_operation(m)]
        ops = self._ops(gid, messages)
        touched = ops.core.touched_messages()  # a 100,000-message history: few messages touched
        return [ops.view(m) if m.mid in touched else m for m in messages if not m.text.startswith(OP_MARKER)]

    def pending(self, gid: str | None = None) -> int:
        """Messages held back, waiting for the message they answer."""
        channels = [self._channel(gid)] if gid else self.channels.values()
        return sum(channel.pending for channel in channels)

    def presence_of(self, gid: str) -> dict[str, str]:
        """Each current member's presence ("online", "away", "offline"); this peer is online."""
        now = clock.now()
        return {m.pid: "online" if m.pid == self.pid else self.presence.status(m.pid, now)
                for m in self._known(gid).current()}

    def read_marks(self, gid: str) -> list[tuple[int, int]] | None:
        """The delivery orders read in ``gid`` as inclusive ranges; None if never marked."""
        self._known(gid)
        return self.store.read_marks(gid)

    def mark_read(self, gid: str, ranges: list[tuple[int, int]]) -> None:
        """Add delivery-order ranges to what was read in ``gid`` (kept across restarts)."""
        self._known(gid)
        try:
            self.store.add_read_marks(gid, [tuple(r) for r in ranges])
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad read marks: {exc}") from None
        self.store.commit()

    def export_log(self, path: str | Path, gid: str | None = None) -> int:
        """Write delivered messages as JSON Lines (the analytics export format)."""
        gids = [gid] if gid else list(self.channels)
        if gid:
            self._known(gid)
        self.flush()
        count = 0
        path = Path(path)
        tmp = path.with_name(path.name + ".part")
        with tmp.open("w", encoding="utf-8") as out:
            for g in gids:
                desc = self.gjlp.groups[g].desc
                for message in self.history(g):
                    row = message.to_json()
                    row["group_desc"] = desc
                    row["received_at"] = iso_millis(message.received_at)
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
                    count += 1
        tmp.replace(path)
        return count

    def take_unsent(self) -> dict[Mid, str]:
        """Own messages taken back since the last call because they could not be stored
        (never sent; their seqnos go to the next messages), each with the reason."""
        unsent, self._unsent = self._unsent, {}
        return unsent

    def stats_dict(self) -> dict:
        s = self.stats
        return {
            "datagrams_in": s.datagrams_in,
            "datagrams_out": self.network.datagrams_out,
            "bytes_in": s.bytes_in,
            "bytes_out": self.network.bytes_out,
            "malformed_dropped": s.malformed_dropped,
            "bad_signature_dropped": s.bad_signature_dropped
            + sum(c.stats["bad_signature_dropped"] for c in self.channels.values()),
            "sealed_dropped": s.sealed_dropped,
            "not_member_dropped": s.not_member_dropped,
            "duplicates_dropped": sum(c.orderer.duplicates for c in self.channels.values()),
            **{key: sum(c.stats[key] for c in self.channels.values())
               for key in ("naks_sent", "repairs_sent", "sync_messages_sent", "gaps_reported", "conflicts",
                           "stranger_dropped", "requests_over_budget", "sync_requests_refused", "rate_cuts")},
            "evicted": sum(c.orderer.evicted for c in self.channels.values()),
            "operations_rejected": sum(ops.rejected for ops in self._operations.values()),
            "operations_pending": sum(ops.core.pending for ops in self._operations.values()),
            "held_bytes": sum(c.orderer.held_bytes for c in self.channels.values()),
            "delivered": s.delivered,
            "own_looped_back": s.own_looped_back,
            "pending": self.pending(),
            "groups_known": len(self.gjlp.groups),
            "groups_joined": len(self.channels),
            "answers_suppressed": self.gjlp.answers_suppressed,
            "descriptors_rejected": self.gjlp.descriptors_rejected,
            "descriptor_conflicts": self.gjlp.descriptor_conflicts,
            "member_records_rejected": self.gjlp.member_records_rejected,
            "member_records_stale": self.gjlp.member_records_stale,
            "member_records_refused": self.gjlp.member_records_refused,
            "groups_refused": self.gjlp.groups_refused,
            "plaintext_refused": self.plaintext_refused,
            "control_backlog_dropped": self.control_backlog_dropped,
            "storage_error": self.storage_error,
            "unstored": len(self._unstored),
        }

    # -- internals -------------------------------------------------------------------

    def _known(self, gid: str) -> GroupRecord:
        record = self.gjlp.groups.get(gid) if isinstance(gid, str) else None
        if record is None:
            raise UsageError(f"unknown group {gid!r:.80}")
        return record

    def _channel(self, gid: str) -> GroupChannel:
        record = self._known(gid)
        channel = self.channels.get(gid)
        if channel is None and record.legacy:
            raise UsageError(_LEGACY.format(desc=record.desc))
        if channel is None:
            raise UsageError(f"not a member of group {gid}")
        return channel

    def _open_channel(self, gid: str, next_seqno: int | None, sync: bool = True) -> None:
        if next_seqno is None:
            next_seqno = self.store.next_seqno(gid)
        key = self.store.group_key(gid)
        if key:
            self._ciphers[gid] = crypto.GroupCipher(key)
        record = self.gjlp.groups[gid]
        channel = GroupChannel(gid, self.identity, next_seqno, fetch=self.store.fetch, rng=self._rng,
                               max_held=self.config.max_held, max_held_bytes=self.config.max_held_bytes,
                               is_member=record.is_current, members=lambda: [m.pid for m in record.current()])
        channel.restore(self.store.delivered_mids(gid))
        channel.restore_conflicts(self.store.conflicts(gid))
        self.channels[gid] = channel
        if sync:  # MSP: whatever the group said while this peer was away (or before it joined)
            channel.start_sync(clock.now())

    async def _listen_group(self, gid: str) -> None:
        record = self.gjlp.groups[gid]
        await self.network.listen(record.addr, record.port, self._on_data_datagrams)

    def _announce(self, gid: str) -> None:
        if self.discovery is None or not self._started and self._loop is None:
            return
        record = self.gjlp.groups[gid]
        self._spawn(self.discovery.announce(gid, record.desc, record.private, len(record.current()), self.name,
                                            record.view(self.pid).creator, record.port))

    def _spawn(self, coroutine) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coroutine)
        except RuntimeError:  # not started yet: start() does this work
            coroutine.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _is_member_anywhere(self, pid: str) -> bool:
        """Whether ``pid`` is a current member of a group this peer is in.  Only members are
        kept in the presence table, so a flood of fresh keys cannot push members out of it."""
        groups = self.gjlp.groups
        return any(groups[gid].is_current(pid) for gid in self.channels)

    def _decode(self, data: bytes) -> wire.Envelope | None:
        self.stats.datagrams_in += 1
        self.stats.bytes_in += len(data)
        if wire.sent_by(data, self._pid_bytes):
            self.stats.own_looped_back += 1  # multicast loop echoes our own datagrams
            return None
        try:
            envelope = wire.decode(data, self._ciphers.get)
            if self._is_member_anywhere(envelope.sender):
                self.presence.heard(envelope.sender, clock.now())
            return envelope
        except wire.SignatureError as exc:
            self.stats.bad_signature_dropped += 1
            log.debug("dropped forged or tampered datagram: %s", exc)
        except wire.SealedError as exc:
            self.stats.sealed_dropped += 1
            log.debug("dropped sealed datagram: %s", exc)
        except wire.WireError as exc:
            self.stats.malformed_dropped += 1
            log.debug("dropped malformed datagram: %s", exc)
        return None

    # Control datagrams can each ask for hundreds of signature checks (member records, at
    # ~70 µs each), so they are worked through in slices of CONTROL_SLICE seconds, the loop
    # free in between: a flood delays group news, never the chat or the JSON-RPC answers.
    # The backlog is bounded; what does not fit is dropped and counted (senders re-announce).
    CONTROL_SLICE = 0.01
    MAX_CONTROL_BACKLOG = 8_000_000  # bytes

    def _on_control_datagrams(self, batch: list[bytes]) -> None:
        for data in batch:
            if self._control_backlog_bytes + len(data) > self.MAX_CONTROL_BACKLOG:
                self.control_backlog_dropped += 1
                continue
            self._control_backlog.append(data)
            self._control_backlog_bytes += len(data)
        if not self._control_draining:
            self._drain_control()

    def _drain_control(self) -> None:
        self._control_draining = False
        deadline = time.perf_counter() + self.CONTROL_SLICE
        now, wall = clock.now(), clock.wall()
        while self._control_backlog:
            data = self._control_backlog.popleft()
            self._control_backlog_bytes -= len(data)
            envelope = self._decode(data)
            if envelope is not None:
                if isinstance(envelope.message, (wire.Adv, wire.GroupsInfo, wire.Join, wire.Leave)):
                    self.gjlp.receive(envelope.sender, envelope.message, now, wall)
                else:
                    self.stats.malformed_dropped += 1
            if self._control_backlog and time.perf_counter() > deadline and self._loop is not None:
                self._control_draining = True
                self._loop.call_soon(self._drain_control)
                break
        self._after_input()

    def _on_data_datagrams(self, batch: list[bytes]) -> None:
        now, wall = clock.now(), clock.wall()
        for data in batch:
            envelope = self._decode(data)
            if envelope is None:
                continue
            message = envelope.message
            channel = self.channels.get(getattr(message, "gid", None))
            if channel is None:
                self.stats.not_member_dropped += 1
            elif self._ciphers.get(channel.gid) and not envelope.sealed:
                self.stats.sealed_dropped += 1  # plaintext claiming to be from a private group
            else:
                channel.receive(envelope.sender, message, now, envelope.public_key, wall)
        self._after_input()

    def _on_zeroconf(self, gid: str, desc: str, private: bool, member_count: int) -> None:
        self.gjlp.note_zeroconf(gid, desc, private, member_count, clock.now(), clock.wall())
        self._after_input()

    # Under load, commits (one fsync-free WAL append each) are coalesced to one per
    # FLUSH_INTERVAL; a lone message still goes out on the next loop turn.  While a
    # flush carries BUSY_MESSAGES or more, the next one waits BUSY_FLUSH_INTERVAL:
    # a flat-out stream then costs about 8 % less CPU per message, and a chat-paced
    # one keeps its latency.
    FLUSH_INTERVAL = 0.002
    BUSY_FLUSH_INTERVAL = 0.006
    BUSY_MESSAGES = 32

    def _after_input(self) -> None:
        if self._flush_scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._flush_scheduled = True
        wait = self._last_flush + self._flush_interval - clock.now()
        if wait > 0:
            loop.call_later(wait, self.flush)
        else:
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Persist, then transmit, then notify: everything batched since the last flush."""
        self._flush_scheduled = False
        if self._loop is not None:
            self._last_flush = clock.now()
        for message in self.gjlp.datagrams_to_send():
            try:
                self._outgoing.append((self.config.control_addr, self.config.port, wire.encode(self.identity, message)))
            except wire.WireError as exc:  # nothing the network sent should lead here; the flush goes on
                log.warning("not sent: %s", exc)
        events = self.gjlp.events()
        changed_groups: dict[str, bool] = {}
        for event in events:
            record = self.gjlp.groups.get(event.gid)
            if record is None:
                continue
            if isinstance(event, (MemberJoined, MemberLeft, MemberUpdated)) and self.gjlp.is_member(event.gid):
                self._members_to_save.setdefault(event.gid, set()).add(event.member.pid)
            if isinstance(event, GroupSeen):
                changed_groups[event.gid] = changed_groups.get(event.gid, False) or event.new
        deliveries: list[ChatMessage] = []
        channel_events = []
        conflict_writes = []
        now = clock.now()
        beacons = set(self.presence.beacons_due(list(self.channels), now))
        for gid, channel in self.channels.items():
            record = self.gjlp.groups[gid]
            channel.group_size = max(1, len(record.current()))
            outbox = channel.datagrams_to_send(now)
            if outbox:
                self.presence.spoke(gid, now)
            elif gid in beacons:  # idle: one heartbeat says this peer is still here
                outbox = [wire.Heartbeat(gid, channel.next_seqno - 1)]
            if outbox and record.private and gid not in self._ciphers:
                # Never plaintext to a group held to be private (nothing should lead here).
                self.plaintext_refused += len(outbox)
                log.error("group %s is private and its key is missing: nothing sent", gid)
                outbox = []
            for message in outbox:
                try:
                    self._outgoing.append((record.addr, record.port,
                                           wire.encode(self.identity, message, self._ciphers.get(gid))))
                except wire.WireError as exc:  # e.g. a digest past the datagram limit
                    log.warning("not sent: %s", exc)
            deliveries += channel.deliveries()
            events_now = channel.events()
            channel_events += events_now
            conflict_writes += [e for e in events_now if isinstance(e, (Conflict, Replaced))]
        for gid in {m.gid for m in deliveries}:
            if gid in self.channels:
                self._ops(gid)  # built from the store before this batch joins it
        stored = self._store(deliveries, conflict_writes)
        self._flush_interval = self.BUSY_FLUSH_INTERVAL if len(stored) >= self.BUSY_MESSAGES else self.FLUSH_INTERVAL
        if self._started:
            outgoing, self._outgoing = self._outgoing, []
            for addr, port, data in outgoing:
                self.network.send(addr, port, data)
        self.stats.delivered += len(stored)
        by_group: dict[str, list[ChatMessage]] = {}
        for message in stored:
            by_group.setdefault(message.gid, []).append(message)
        for gid, messages in by_group.items():
            self._tell(gid, messages)
        membership_changed = set()
        for event in events:
            if isinstance(event, MemberJoined):
                if event.gid in self.channels:  # what it sent before we knew it is asked for now
                    self.channels[event.gid].member_joined(event.member.pid, now)
                self.listener.on_member_joined(event.gid, event.member)
                membership_changed.add(event.gid)
            elif isinstance(event, MemberLeft):
                self.listener.on_member_left(event.gid, event.member)
                membership_changed.add(event.gid)
            elif isinstance(event, MemberUpdated):
                changed_groups.setdefault(event.gid, False)
        for gid in membership_changed:
            changed_groups.setdefault(gid, False)
            if gid in self.channels:
                self._announce(gid)
        if changed_groups:
            self.listener.on_groups_discovered([self.gjlp.groups[gid].view(self.pid) for gid in changed_groups])
        for event in channel_events:
            if isinstance(event, SyncProgress):
                self.listener.on_sync_progress(event.gid, event.received, event.expected)
            elif isinstance(event, GapReported):
                log.warning("group %s: no member holds %s's messages %s; replies to them stay held",
                            event.gid, event.sender, event.ranges)
            elif isinstance(event, Conflict):
                warning = _conflict_warning(event.mid)
                log.warning("group %s: %s", event.gid, warning)
                self.listener.on_warning(event.gid, warning)
        self._arm_timer()

    def _tell(self, gid: str, delivered: list[ChatMessage]) -> None:
        """Chat messages to the listener; operations to the group's OBG core, and what they changed."""
        ops = self._operations.get(gid)
        if ops is None:  # left the group meanwhile
            self.listener.on_messages(gid, [m for m in delivered if not is_operation(m)])
            return
        changes = ops.take(delivered)
        if changes.messages:
            self.listener.on_messages(gid, changes.messages)  # new: no operation can have reached them yet
        if changes.updated:
            updated = [ops.view(m) for m in self._stored(gid, changes.updated)]
            if updated:
                self.listener.on_updated(gid, updated)
        if changes.topic_changed:
            topic, by = ops.topic()
            self.listener.on_topic_changed(gid, topic, by)

    # While the store cannot be written, flushes try again this often.
    STORAGE_RETRY = 1.0

    def _store(self, deliveries: list[ChatMessage], conflicts: list) -> list[ChatMessage]:
        """Commit seqnos, groups, delivered messages and equivocations learnt (``conflicts``:
        Conflict and Replaced events); returns the messages stored.

        When the commit fails (a full disk), it is rolled back and nothing of this flush is
        transmitted: this peer's new messages are taken back (never sent, their seqnos free
        again, the caller told through :meth:`take_unsent`), the others' wait in memory and
        are stored, and shown, by the first flush that can write again."""
        try:
            for gid in self._seqnos_to_save:
                if gid in self.channels:
                    self.store.set_next_seqno(gid, self.channels[gid].next_seqno)
            for gid, pids in self._members_to_save.items():  # one row per member that changed
                members = self.gjlp.groups[gid].members if gid in self.gjlp.groups else {}
                self.store.save_members(gid, [members[pid] for pid in pids if pid in members])
            pending = self._unstored + deliveries
            stored = self.store.add_messages(pending) if pending else []
            for event in self._unstored_conflicts + conflicts:
                if isinstance(event, Conflict):
                    self.store.save_conflict(event.gid, event.kept, event.other)
                else:
                    self.store.replace_message(event.gid, event.message)
            self.store.commit()
        except (sqlite3.Error, OSError) as exc:
            self.store.rollback()
            self._outgoing = []
            reason = str(exc) or type(exc).__name__
            if self.storage_error is None:
                log.error("cannot store messages (%s): not sending, trying again every %.0f s", reason,
                          self.STORAGE_RETRY)
            self.storage_error = reason
            own = [m.mid for m in deliveries if m.sender == self.pid]
            taken_back = set()
            for gid, channel in self.channels.items():
                retracted = channel.retract(m.mid for m in deliveries if m.gid == gid and m.sender == self.pid)
                for mid in retracted:
                    taken_back.add(mid)
                    self._unsent[mid] = f"not sent: cannot store messages ({reason})"
                if retracted:
                    self.listener.on_warning(gid, f"{len(retracted)} message(s) not sent: cannot store messages "
                                                  f"({reason})")
            self._unstored += [m for m in deliveries if m.mid not in taken_back]
            self._unstored_conflicts += conflicts
            if len(taken_back) < len(own):
                log.error("kept %d own messages that could not be taken back; they go out once stored",
                          len(own) - len(taken_back))
            return []
        if self.storage_error is not None and stored:  # a commit without messages proves little
            log.info("storing works again (%d messages were waiting)", len(self._unstored))
            self.storage_error = None
        self._unstored = []
        self._unstored_conflicts = []
        self._seqnos_to_save.clear()
        self._members_to_save.clear()
        return stored

    def _arm_timer(self) -> None:
        deadlines = [d for d in (self.gjlp.get_timer(), *(c.get_timer() for c in self.channels.values()),
                                 self.presence.get_timer(list(self.channels))) if d is not None]
        if self._unstored or self._unstored_conflicts or self.storage_error is not None and (
                self._seqnos_to_save or self._members_to_save):
            deadlines.append(clock.now() + self.STORAGE_RETRY)
        deadline = min(deadlines) if deadlines else None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is None or self._loop is None:
            return
        delay = max(0.0, deadline - clock.now())
        self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = clock.now()
        self.gjlp.handle_timer(now)
        for channel in self.channels.values():
            channel.handle_timer(now)
        self.flush()


def _conflict_warning(mid: Mid) -> str:
    return (f"two different signed messages claim id {format_mid(mid)} (its writer equivocated); every member "
            "keeps the one whose signed bytes hash lowest")


_LEGACY = ("group {desc!r} was made by an older version of M2MC, before groups were signed: its messages stay "
           "readable here, but it cannot be joined or written to any more; create a new group for new messages")


def _check_desc(desc: str) -> str:
    desc = desc.strip() if isinstance(desc, str) else desc
    if not isinstance(desc, str) or not desc:
        raise UsageError("a group needs a description")
    if len(desc) > MAX_DESC:
        raise UsageError(f"description too long: {len(desc)} characters, limit is {MAX_DESC}")
    return check_unicode(desc, "description")


def _check_new_passphrase(passphrase: str) -> None:
    if not isinstance(passphrase, str) or len(passphrase) < passphrases.MIN_LENGTH:
        raise PassphraseRefused(f"a passphrase needs at least {passphrases.MIN_LENGTH} characters")
    if len(passphrase) > passphrases.MAX_LENGTH:
        raise PassphraseRefused(f"passphrase too long (limit {passphrases.MAX_LENGTH} characters)")
    check_unicode(passphrase, "passphrase")
    weakness = passphrases.assess(passphrase).weakness
    if weakness:
        raise PassphraseRefused(f"passphrase too easy to guess: {weakness}")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise UsageError("a display name must not be empty")
    name = check_unicode(name.strip(), "display name")
    if len(name) > MAX_NAME:
        raise UsageError(f"display name too long: {len(name)} characters, limit is {MAX_NAME}")
    return name


__all__ = ["Config", "GroupManager", "UsageError", "format_mid", "DEFAULT_PORT"]
