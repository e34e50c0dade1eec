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
import json
import logging
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import crypto, wire
from .channel import Conflict, GapReported, GroupChannel, SyncProgress
from .discovery import ZeroconfDiscovery
from .gjlp import Gjlp, GroupRecord, GroupSeen, MemberJoined, MemberLeft, group_address
from .store import Store
from .transport import MulticastNetwork, interface_name, link_is_up, resolve_interface
from .types import (ChatMessage, GroupListener, GroupView, Mid, NullListener, UsageError, check_unicode, format_mid,
                    iso_millis)

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
    max_held: int = 100_000
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
        self.gjlp = Gjlp(self.pid, self.name, self._rng)
        self.channels: dict[str, GroupChannel] = {}
        self.network = MulticastNetwork(self.interface)
        self.discovery = ZeroconfDiscovery(self.interface, self.pid, self._on_zeroconf) if config.zeroconf else None
        self.stats = Stats()
        self._outgoing: list[tuple[str, int, bytes]] = []
        self._flush_scheduled = False
        self._last_flush = 0.0
        self._flush_interval = self.FLUSH_INTERVAL
        self._seqnos_to_save: set[str] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closed = False
        self._background: set[asyncio.Task] = set()
        for record, next_seqno in self.store.load_groups():
            self.gjlp.restore(record)
            if self.gjlp.is_member(record.gid):
                self._open_channel(record.gid, next_seqno)

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
        now = time.time()
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

    # -- public API -------------------------------------------------------------------

    def set_name(self, name: str) -> None:
        self.name = self.gjlp.name = _check_name(name)
        self.store.set_name(self.name)

    def advertise(self) -> None:
        """GJLP advertisement: ask every peer on the LAN for the groups it knows."""
        self.gjlp.advertise()
        self._after_input()

    def create_group(self, desc: str, passphrase: str | None = None) -> str:
        """A new group; with a passphrase it is private (content sealed with a key derived from it)."""
        desc = desc.strip() if isinstance(desc, str) else desc
        if not isinstance(desc, str) or not desc:
            raise UsageError("a group needs a description")
        if len(desc) > MAX_DESC:
            raise UsageError(f"description too long: {len(desc)} characters, limit is {MAX_DESC}")
        check_unicode(desc, "description")
        salt = check = key = b""
        if passphrase is not None:
            _check_passphrase(passphrase)
            salt = crypto.new_salt()
            key = crypto.derive_group_key(passphrase, salt)
            check = crypto.key_check(key)
        gid = f"{self.pid}-{self.store.next_counter('group_counter')}"
        record = self.gjlp.create_group(
            gid, desc, group_address(gid, self.config.control_addr), self.config.port, time.time(), salt, check
        )
        self.store.save_group(record)
        if key:
            self.store.set_group_key(gid, key)
            self._ciphers[gid] = crypto.GroupCipher(key)
        self._open_channel(gid, 1, sync=False)
        self._spawn(self._listen_group(gid))
        self._announce(gid)
        self.listener.on_group_created(gid)
        self._after_input()
        return gid

    def join_group(self, gid: str, passphrase: str | None = None) -> str:
        record = self._known(gid)
        if self.gjlp.is_member(gid):
            return gid
        key = None
        if record.private:
            if not passphrase:
                raise UsageError(f"group {record.desc!r} is private: its passphrase is needed to join")
            if len(record.salt) != crypto.SALT_BYTES:
                raise UsageError(f"group {record.desc!r} is private but its key parameters are unknown yet")
            key = crypto.derive_group_key(passphrase, record.salt)
            if crypto.key_check(key) != record.key_check:
                raise UsageError(f"wrong passphrase for group {record.desc!r}")
        self.gjlp.join(gid, time.time())
        self.gjlp.advertise()  # the members' answers tell us who they are: we take datagrams only from them
        self.store.save_group(record)
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
        self.gjlp.leave(gid, time.time())
        self.store.save_group(record)
        channel = self.channels.pop(gid)
        self.store.set_next_seqno(gid, channel.next_seqno)
        self.network.stop_listening(record.addr, record.port)
        if self.discovery is not None:
            self._spawn(self.discovery.withdraw(gid))
        self._after_input()

    def send(self, gid: str, text: str, parent: Mid | None = None) -> Mid:
        channel = self._channel(gid)
        if not isinstance(text, str):
            raise UsageError("text must be a string")
        data = channel.compose(self.name, text, parent, time.time())
        self._seqnos_to_save.add(gid)
        self._after_input()
        return self.pid, data.seqno

    def groups(self) -> list[GroupView]:
        return [record.view(self.pid) for record in self.gjlp.groups.values()]

    def group(self, gid: str) -> GroupView:
        return self._known(gid).view(self.pid)

    def history(self, gid: str) -> list[ChatMessage]:
        self._known(gid)
        self.flush()
        return self.store.history(gid)

    def pending(self, gid: str | None = None) -> int:
        """Messages held back, waiting for the message they answer."""
        channels = [self._channel(gid)] if gid else self.channels.values()
        return sum(channel.pending for channel in channels)

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
                for message in self.store.history(g):
                    row = message.to_json()
                    row["group_desc"] = desc
                    row["received_at"] = iso_millis(message.received_at)
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
                    count += 1
        tmp.replace(path)
        return count

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
            "delivered": s.delivered,
            "own_looped_back": s.own_looped_back,
            "pending": self.pending(),
            "groups_known": len(self.gjlp.groups),
            "groups_joined": len(self.channels),
            "answers_suppressed": self.gjlp.answers_suppressed,
        }

    # -- internals -------------------------------------------------------------------

    def _known(self, gid: str) -> GroupRecord:
        record = self.gjlp.groups.get(gid) if isinstance(gid, str) else None
        if record is None:
            raise UsageError(f"unknown group {gid!r:.80}")
        return record

    def _channel(self, gid: str) -> GroupChannel:
        self._known(gid)
        channel = self.channels.get(gid)
        if channel is None:
            raise UsageError(f"not a member of group {gid}")
        return channel

    def _open_channel(self, gid: str, next_seqno: int | None, sync: bool = True) -> None:
        if next_seqno is None:
            stored = {record.gid: seq for record, seq in self.store.load_groups()}
            next_seqno = stored.get(gid, 1)
        key = self.store.group_key(gid)
        if key:
            self._ciphers[gid] = crypto.GroupCipher(key)
        record = self.gjlp.groups[gid]
        channel = GroupChannel(gid, self.identity, next_seqno, fetch=self.store.fetch, rng=self._rng,
                               max_held=self.config.max_held, is_member=record.is_current,
                               members=lambda: [m.pid for m in record.current()])
        channel.restore(self.store.delivered_mids(gid))
        self.channels[gid] = channel
        if sync:  # MSP: whatever the group said while this peer was away (or before it joined)
            channel.start_sync(time.time())

    async def _listen_group(self, gid: str) -> None:
        record = self.gjlp.groups[gid]
        await self.network.listen(record.addr, record.port, self._on_data_datagrams)

    def _announce(self, gid: str) -> None:
        if self.discovery is None or not self._started and self._loop is None:
            return
        view = self.gjlp.groups[gid]
        self._spawn(self.discovery.announce(view.to_wire(), len(view.current())))

    def _spawn(self, coroutine) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coroutine)
        except RuntimeError:  # not started yet: start() does this work
            coroutine.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _decode(self, data: bytes) -> wire.Envelope | None:
        self.stats.datagrams_in += 1
        self.stats.bytes_in += len(data)
        if wire.sent_by(data, self._pid_bytes):
            self.stats.own_looped_back += 1  # multicast loop echoes our own datagrams
            return None
        try:
            return wire.decode(data, self._ciphers.get)
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

    def _on_control_datagrams(self, batch: list[bytes]) -> None:
        now = time.time()
        for data in batch:
            envelope = self._decode(data)
            if envelope is None:
                continue
            if isinstance(envelope.message, (wire.Adv, wire.GroupsInfo, wire.Join, wire.Leave)):
                self.gjlp.receive(envelope.sender, envelope.message, now)
            else:
                self.stats.malformed_dropped += 1
        self._after_input()

    def _on_data_datagrams(self, batch: list[bytes]) -> None:
        now = time.time()
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
                channel.receive(envelope.sender, message, now, envelope.public_key)
        self._after_input()

    def _on_zeroconf(self, info: wire.GroupInfo, member_count: int) -> None:
        self.gjlp.note_zeroconf(info, member_count, time.time())
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
        wait = self._last_flush + self._flush_interval - loop.time()
        if wait > 0:
            loop.call_later(wait, self.flush)
        else:
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Persist, then transmit, then notify: everything batched since the last flush."""
        self._flush_scheduled = False
        if self._loop is not None:
            self._last_flush = self._loop.time()
        for gid in self._seqnos_to_save:
            if gid in self.channels:
                self.store.set_next_seqno(gid, self.channels[gid].next_seqno)
        self._seqnos_to_save.clear()
        for message in self.gjlp.datagrams_to_send():
            self._outgoing.append((self.config.control_addr, self.config.port, wire.encode(self.identity, message)))
        events = self.gjlp.events()
        changed_groups: dict[str, bool] = {}
        for event in events:
            record = self.gjlp.groups.get(event.gid)
            if record is None:
                continue
            if event.gid in self.channels or isinstance(event, (MemberJoined, MemberLeft)) and self.gjlp.is_member(event.gid):
                self.store.save_group(record)
            if isinstance(event, GroupSeen):
                changed_groups[event.gid] = changed_groups.get(event.gid, False) or event.new
        deliveries: list[ChatMessage] = []
        channel_events = []
        now = time.time()
        for gid, channel in self.channels.items():
            record = self.gjlp.groups[gid]
            channel.group_size = max(1, len(record.current()))
            for message in channel.datagrams_to_send(now):
                try:
                    self._outgoing.append((record.addr, record.port,
                                           wire.encode(self.identity, message, self._ciphers.get(gid))))
                except wire.WireError as exc:  # e.g. a digest past the datagram limit
                    log.warning("not sent: %s", exc)
            deliveries += channel.deliveries()
            channel_events += channel.events()
        stored = self.store.add_messages(deliveries) if deliveries else []
        self.store.commit()
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
            self.listener.on_messages(gid, messages)
        membership_changed = set()
        for event in events:
            if isinstance(event, MemberJoined):
                if event.gid in self.channels:  # what it sent before we knew it is asked for now
                    self.channels[event.gid].member_joined(event.member.pid, time.time())
                self.listener.on_member_joined(event.gid, event.member)
                membership_changed.add(event.gid)
            elif isinstance(event, MemberLeft):
                self.listener.on_member_left(event.gid, event.member)
                membership_changed.add(event.gid)
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
                warning = f"two different messages claim id {format_mid(event.mid)}; the first one is kept"
                log.warning("group %s: %s", event.gid, warning)
                self.listener.on_warning(event.gid, warning)
        self._arm_timer()

    def _arm_timer(self) -> None:
        deadlines = [d for d in (self.gjlp.get_timer(), *(c.get_timer() for c in self.channels.values()))
                     if d is not None]
        deadline = min(deadlines) if deadlines else None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is None or self._loop is None:
            return
        delay = max(0.0, deadline - time.time())
        self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = time.time()
        self.gjlp.handle_timer(now)
        for channel in self.channels.values():
            channel.handle_timer(now)
        self.flush()


def _check_passphrase(passphrase: str) -> None:
    if not isinstance(passphrase, str) or len(passphrase) < 8:
        raise UsageError("a passphrase needs at least 8 characters")
    if len(passphrase) > 1024:
        raise UsageError("passphrase too long (limit 1024 characters)")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise UsageError("a display name must not be empty")
    name = check_unicode(name.strip(), "display name")
    if len(name) > MAX_NAME:
        raise UsageError(f"display name too long: {len(name)} characters, limit is {MAX_NAME}")
    return name


__all__ = ["Config", "GroupManager", "UsageError", "format_mid", "DEFAULT_PORT"]
