"""GroupManager: the middleware's public API, an asyncio adapter over the sans-I/O :class:`PeerCore`.

The core (:mod:`middleware.peer_core`) holds the peer's protocol logic and its
store.  This adapter owns what does I/O: the multicast sockets
(:mod:`middleware.transport`), zeroconf (:mod:`middleware.discovery`), the
network watch (:mod:`middleware.netif`, :mod:`middleware.roaming`), the key-derivation worker thread and the one timer.  It
reads the clocks (:mod:`middleware.clock`) and passes ``now`` (and the wall
stamp) in.  Each of these comes in :class:`Parts` (:func:`default_parts`: the real ones;
:mod:`middleware.memory_lan`: a LAN in memory on virtual time).  All methods run on the asyncio loop thread (use
:class:`~middleware.runner.ManagerThread` from other threads).

Every public call is a command (:mod:`middleware.commands`) run by
:meth:`GroupManager.execute`: the GUI's typed methods (``commands.Calls``) and
the JSON-RPC peer's table both come here, and the core runs what it can.
Writes are batched per event-loop turn (:meth:`GroupManager.flush`), and handed
out in the core's crash-safe order (persist, transmit, notify: see
:mod:`middleware.peer_core`).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import ipaddress
import json
import logging
import random
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from . import clock, commands, crypto, kinds, netif, rules
from .channel import GroupChannel
from .discovery import FoundCallback, ZeroconfDiscovery
from .events import Event, Listener, MessagesDelivered, RemovedFromGroup, ignore
from .file_transfer import FileService
from .files import DEFAULT_AUTO_DOWNLOAD, DEFAULT_MAX_FILE_SIZE
from .gjlp import Gjlp, GroupRecord
from .invites import parse_invite
from .mop import DEFAULT_MAX_HELD, DEFAULT_MAX_HELD_BYTES
from .peer_core import CONTROL_ADDR, DEFAULT_PORT, Datagram, PeerCore, Stats, Turn
from .presence import Presence
from .store import Store
from .store_api import PeerStore
from .addresses import ANSWER_WAIT, Arrival, Endpoint, GroupAddress, Via, answered_at, resolve_endpoint
from .roaming import WATCH_INTERVAL, Move, NetworkFollower
from .transport import MulticastNetwork, Received, Transport, TransportError, interface_name, resolve_interface
from .direct import conversation_id
from .types import (GroupView, Mid, PassphraseRefused, UsageError,
                    format_mid, iso_millis, shown_sent_at)

log = logging.getLogger(__name__)



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
    download_dir: Path | None = None  # files fetched go here; None: <data_dir>/downloads
    auto_download: int = DEFAULT_AUTO_DOWNLOAD  # offers up to this many bytes are fetched on their own
    max_file_size: int = DEFAULT_MAX_FILE_SIZE  # larger offers are refused with an error


class Clock(Protocol):
    """The two clocks a manager reads (:mod:`middleware.clock` is the real one)."""

    def now(self) -> float: ...  # monotonic seconds, on the event loop's ``loop.time()`` scale

    def wall(self) -> float: ...  # seconds since the epoch, for stamps


# (passphrase, salt, kdf, opslimit, memlimit) -> a group's key, as crypto.derive_group_key
KeyDerivation = Callable[[str, bytes, str, int, int], bytes]


@dataclass
class Parts:
    """What a :class:`GroupManager` does its I/O through, made by the application
    (:func:`default_parts`) or by a test: the store and the network as they are, and the file
    service and zeroconf as factories, since they need the core (or this peer's pid) first.
    The clocks, the key derivation, the name lookup and the interface listing default to the real
    ones; an in-memory LAN (:mod:`middleware.memory_lan`) gives its virtual clock, a cheap key and
    no interfaces (``interfaces=None``: no network watch, nothing to follow)."""

    store: PeerStore
    network: Transport
    # (core, listener) -> the file service; (address, pid, on_found) -> zeroconf, made again on a move
    files: Callable[[PeerCore, Listener], FileService]
    discovery: Callable[[str, str, FoundCallback], ZeroconfDiscovery] | None = None
    clock: Clock = field(default_factory=lambda: clock)
    derive_key: KeyDerivation = crypto.derive_group_key
    lookup: Callable[..., list] = socket.getaddrinfo  # as socket.getaddrinfo, for add_peer's host names
    interfaces: Callable[[], list[netif.InterfaceInfo]] | None = netif.interfaces


def default_parts(config: Config) -> Parts:
    """The real ones: the SQLite store in ``config.data_dir``, multicast on ``config.iface`` (as
    :func:`~middleware.transport.resolve_interface` finds it), the TCP file service, and zeroconf
    unless ``config.zeroconf`` is off.  Made on the thread that runs the manager (SQLite's
    connection stays on its thread)."""
    def files(core: PeerCore, listener: Listener) -> FileService:
        return FileService(core, config.data_dir, listener, download_dir=config.download_dir,
                           auto_download=config.auto_download, max_file_size=config.max_file_size,
                           rng=random.Random(config.seed))

    return Parts(store=Store(Path(config.data_dir) / "m2mc.sqlite3"),
                 network=MulticastNetwork(resolve_interface(config.iface), config.port),
                 files=files, discovery=ZeroconfDiscovery if config.zeroconf else None)


class GroupManager(commands.Calls):
    def __init__(self, config: Config, listener: Listener | None = None, parts: Parts | None = None) -> None:
        """``listener``: called with each event (:mod:`middleware.events`) on the loop's thread.
        ``parts``: the store, network, file service and zeroconf to use (:func:`default_parts`
        of ``config`` when not given)."""
        self.config = config
        self.listener: Listener = listener or ignore
        parts = parts or default_parts(config)
        store = parts.store
        name = rules.check_name(config.name) if config.name and config.name != store.name() else config.name
        self._clock: Clock = parts.clock
        self._derive_key = parts.derive_key
        self._lookup = parts.lookup
        self._interfaces = parts.interfaces
        self.core = PeerCore(store, self._clock.now(), name, wall=self._clock.wall(), control_addr=config.control_addr, port=config.port,
                             max_held=config.max_held, max_held_bytes=config.max_held_bytes,
                             rng=random.Random(config.seed))
        self.identity = self.core.identity
        self.pid = self.core.pid
        self.interface = resolve_interface(config.iface)
        self.follower = NetworkFollower(config.iface)
        # Key derivations run here, one at a time (Argon2id takes 256 MiB and ~0.6 s), never on the loop.
        self._kdf_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="m2mc-kdf")
        # (data, source, path): control datagrams, broadcasts and whatever reaches this peer's endpoint
        self._control_backlog: collections.deque[tuple[bytes, Arrival]] = collections.deque()
        self._control_backlog_bytes = 0
        self._control_draining = False
        self.control_backlog_dropped = 0
        self.network: Transport = parts.network
        self._make_discovery = parts.discovery
        self.discovery = parts.discovery(self.interface, self.pid, self._on_zeroconf) if parts.discovery else None
        self._flush_scheduled = False
        self._last_flush = 0.0
        self._flush_interval = self.FLUSH_INTERVAL
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._closed = False
        self._store_closed = False
        self._background: set[asyncio.Task] = set()
        self.files = parts.files(self.core, lambda event: self.listener(event))

    # The core's state, as the callers and tests of this class have always seen it.

    @property
    def store(self) -> PeerStore:
        return self.core.store

    @property
    def name(self) -> str:
        return self.core.name

    @property
    def gjlp(self) -> Gjlp:
        return self.core.gjlp

    @property
    def channels(self) -> dict[str, GroupChannel]:
        return self.core.channels

    @property
    def presence(self) -> Presence:
        return self.core.presence

    @property
    def stats(self) -> Stats:
        return self.core.stats

    @property
    def storage_error(self) -> str | None:
        return self.core.storage_error

    @property
    def plaintext_refused(self) -> int:
        return self.core.plaintext_refused

    @property
    def _outgoing(self) -> list[Datagram]:
        """What the core holds for sending (a manager never started keeps it here)."""
        return self.core._outbox

    # -- life cycle ---------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.network.open()
        if self._interfaces is not None:
            self._note_networks(self._interfaces())
        await self.network.listen(self.core.control_group, self._on_control_datagrams)
        if self.network.endpoint is not None:
            self.core.reach.own.add(self.network.endpoint)
        self.network.listen_unicast(self._on_unicast_datagrams)
        self.network.listen_broadcast(self.config.port, self._on_broadcast_datagrams)
        if self.network.endpoint is not None:  # files are served on TCP where the endpoint is, same port
            await self.files.start(self.network.endpoint.host, self.network.endpoint.port)
        for gid in self.channels:
            await self._listen_group(gid)
        if self.discovery is not None:
            await self.discovery.start()
            for gid in self.channels:
                self._announce(gid)
        self._started = True
        self.core.warn_conflicts_held()
        name = interface_name(self.interface)
        self.follower.bound(name, self.interface, self._clock.now(), usable=self._usable(name))
        self._notify(self.core.events())
        if self._interfaces is not None:
            self._spawn(self._watch_network())
        self.advertise()
        log.info("peer %s (%s) on %s (%s), control %s:%d", self.pid, self.name, name or "?", self.interface,
                 self.config.control_addr, self.config.port)

    def _usable(self, interface: str | None) -> bool:
        """Whether the address in use reaches other computers: not loopback, unless asked for."""
        return bool(self.config.iface) or not self.interface.startswith("127.")

    async def _watch_network(self) -> None:
        """Follow the network (:mod:`middleware.roaming`): move to a new address or interface, resync
        when the link comes back or after a sleep, and tell the user the state."""
        while not self._closed:
            await asyncio.sleep(WATCH_INTERVAL)
            try:
                await self._look_at_network()
            except Exception:  # one bad look (an interface vanishing mid-read) must not end the watch
                log.exception("network watch: this look failed; the next one comes in %.1f s", WATCH_INTERVAL)

    async def _look_at_network(self) -> None:
        failure, sent = self.network.send_report() if hasattr(self.network, "send_report") else (None, 0)
        now = self._clock.now()
        assert self._interfaces is not None  # the watch runs only with them
        interfaces = self._interfaces()
        self._note_networks(interfaces)
        for action in self.follower.observe(interfaces, now, netif.route_source(), failure, sent):
            if isinstance(action, Move):
                await self._move(action.interface, action.address)
            else:
                log.info("%s: resynchronising every group", action.reason)
                self.core.woke(now)
                self._after_input()
        self._notify(self.core.events())

    def _note_networks(self, interfaces: list[netif.InterfaceInfo]) -> None:
        """The subnets of this computer's interfaces, with their netmasks: no hint (a PEER_LIST's
        entry, an invite, a forged source) may name their network or broadcast address, which
        would carry a HELLO to every host there (reach.hint_refused)."""
        self.core.reach.networks = {ipaddress.IPv4Network(f"{i.address}/{i.prefix}", strict=False)
                                    for i in interfaces if i.prefix < 31}

    async def _move(self, interface: str, address: str) -> None:
        """Rebind to ``address`` on ``interface``: sockets and memberships, the file server, then
        the core (proven peers told, every group resynced), then zeroconf there, in the background."""
        old = self.network.endpoint
        log.info("network: moving from %s to %s (%s)", self.interface, address, interface)
        move = getattr(self.network, "move", None)
        if move is None:
            return
        try:
            await move(address)
        except TransportError as exc:
            log.warning("network: cannot move to %s (%s): %s", address, interface, exc)
            self.follower.move_failed(str(exc), self._clock.now())
            return
        self.interface = address
        new = self.network.endpoint
        assert new is not None
        self.core.moved(old, new, self._clock.now())
        self.follower.bound(interface, address, self._clock.now(), usable=True)
        self._after_input()
        await self.files.listen_at(new.host, new.port)
        if self.discovery is not None:
            self._spawn(self._restart_discovery(address))
        log.info("network: connected on %s (%s), endpoint %s", interface, address, new)

    async def _restart_discovery(self, address: str) -> None:
        old = self.discovery
        if old is None or self._make_discovery is None:
            return
        self.discovery = self._make_discovery(address, self.pid, self._on_zeroconf)
        try:
            await old.close()
        except Exception as exc:  # zeroconf's own errors on a socket whose address went away
            log.debug("zeroconf on the old address did not close cleanly: %r", exc)
        await self.discovery.start()
        for gid in self.channels:
            self._announce(gid)

    def network_state(self) -> dict:
        """Whether this peer is on the network: state, interface, address and reason."""
        view = self.follower.view()
        return {"state": view.state, "interface": view.interface, "address": view.address, "reason": view.reason}

    def resync(self) -> None:
        """Ask every joined group for what this peer missed, and re-advertise."""
        self.core.resync(self._clock.now())
        self._after_input()

    async def close(self) -> None:
        """Leave announcements are not sent: closing is not leaving (a restart resumes); a goodbye
        is, so members show this peer offline at once."""
        if self._closed:
            return
        self._closed = True
        self.core.say_goodbye()
        self.flush()
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._background):
            task.cancel()
        await self.files.close()
        if self.discovery is not None:
            await self.discovery.close()
        self.network.close()
        self._store_closed = True  # a flush scheduled by input that came in while closing finds nothing to do
        self.store.close()
        self._kdf_executor.shutdown(wait=False, cancel_futures=True)

    # -- public API -------------------------------------------------------------------

    def execute(self, command: commands.Command) -> Any:
        """Run one call (:mod:`middleware.commands`) and answer what it answers: the ones that need
        this adapter here (a coroutine for those that wait: a key derived, the network, a file
        hashed), every other in the core, after a flush when what was delivered counts, and an
        action committed and sent on the next loop turn."""
        c = commands
        if isinstance(command, c.ADAPTER_COMMANDS):
            return c.run_on_adapter(self, command)
        if command.flush_first:
            self.flush()
        result = self.core.execute(command, self._clock.now(), self._clock.wall())
        match command:
            case c.SetName():
                for gid in result:
                    self._announce(gid)
            case c.LeaveGroup(gid):
                record = self.core.known(gid)
                self.network.stop_listening(GroupAddress(record.addr, record.port))
                if self.discovery is not None:
                    self._spawn(self.discovery.withdraw(gid))
        if isinstance(command, c.Action):
            self._after_input()
        return result


    def add_peer(self, address: str, found_by: str = "manual") -> Endpoint:
        """A peer's ``host:port`` (the port defaults to this peer's; the host an IPv4 address or a
        computer's name, resolved once): probed, then asked for its groups."""
        endpoint = self.core.add_peer(self._resolve(address), self._clock.now(), found_by)
        self._after_input()
        return endpoint

    def _resolve(self, address: str) -> Endpoint:
        try:
            return resolve_endpoint(address, self.core.port, self._lookup)
        except ValueError as exc:
            raise UsageError(f"bad address: {exc}") from None

    async def add_peer_async(self, address: str, wait: float = ANSWER_WAIT) -> dict:
        """:meth:`add_peer`, answered once the peer there has proven itself (the HELLO nonce round
        trip): ``{"endpoint", "pid", "name"}``; UsageError "Nobody answered at … within 10 s" when
        nobody does within ``wait`` seconds.  The name is looked up off the loop."""
        endpoint = await asyncio.get_running_loop().run_in_executor(None, self._resolve, address)
        self.add_peer(str(endpoint))
        deadline = self._clock.now() + wait
        while (row := answered_at(self.peers(), endpoint)) is None:
            if self._clock.now() >= deadline:
                raise UsageError(f"Nobody answered at {endpoint} within {wait:g} s")
            await asyncio.sleep(0.1)
        return {"endpoint": str(endpoint), "pid": row["pid"], "name": row.get("name", "")}

    def create_group(self, desc: str, passphrase: str | None = None) -> str:
        """A new group; with a passphrase it is private (content sealed with a key derived from it).

        Deriving a private group's key blocks for about half a second: on a running
        event loop, await :meth:`create_group_async` instead."""
        desc = rules.check_desc(desc)
        salt = crypto.new_salt()
        key = None
        if passphrase is not None:
            rules.check_new_passphrase(passphrase)
            key = self._derive_key(passphrase, salt, crypto.ARGON2ID, crypto.ARGON2_OPSLIMIT, crypto.ARGON2_MEMLIMIT)
        return self._create(desc, salt, key)

    async def create_group_async(self, desc: str, passphrase: str | None = None) -> str:
        """:meth:`create_group`, with the key derived on a worker thread while the loop goes on."""
        desc = rules.check_desc(desc)
        salt = crypto.new_salt()
        key = None
        if passphrase is not None:
            rules.check_new_passphrase(passphrase)
            key = await self._derive(passphrase, salt, crypto.ARGON2ID, crypto.ARGON2_OPSLIMIT, crypto.ARGON2_MEMLIMIT)
        gid = self._create(desc, salt, key)
        self.flush()  # the caller (GUI or JSON-RPC) hears of it once it is stored and sent
        return gid

    async def _derive(self, passphrase: str, salt: bytes, kdf: str, ops: int, mem: int) -> bytes:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._kdf_executor, self._derive_key, passphrase, salt, kdf, ops, mem)

    def _create(self, desc: str, salt: bytes, key: bytes | None) -> str:
        gid = self.core.create_group(desc, salt, key, self._clock.wall())
        self._spawn(self._listen_group(gid))
        self._announce(gid)
        self._after_input()
        return gid

    def join_group(self, gid: str, passphrase: str | None = None) -> str:
        """Join a known, verified group.  A private group's key derivation blocks for about
        half a second: on a running event loop, await :meth:`join_group_async` instead."""
        record = self.core.joinable(gid, passphrase)
        if record is None:
            return gid
        key = None
        if record.private and passphrase:  # joinable() refuses a private group without one
            key = self.core.checked_key(record, self._derive_key(passphrase, *self.core.kdf_args(record)))
        return self._join(record, key)

    async def join_group_async(self, gid: str, passphrase: str | None = None) -> str:
        """:meth:`join_group`, with the key derived on a worker thread while the loop goes on."""
        record = self.core.joinable(gid, passphrase)
        if record is None:
            return gid
        key = None
        if record.private and passphrase:  # joinable() refuses a private group without one
            key = self.core.checked_key(record, await self._derive(passphrase, *self.core.kdf_args(record)))
            if self.core.joinable(gid, passphrase) is None:  # joined meanwhile, by another call
                return gid
        self._join(record, key)
        self.flush()  # the caller (GUI or JSON-RPC) hears of it once it is stored and sent
        return gid

    # How long joining from an invite waits for the inviter to answer with the group.  At 10 % loss
    # each way, 10 s gave up on one join in about 25 (tests/lan/test_lan_reach.py::test_b, 24 runs
    # beside CPU load); 20 s also takes in the probe's fifth HELLO, at 15 s (reach.PROBE_RETRY).
    INVITE_WAIT = 20.0

    async def join_invite_async(self, text: str, passphrase: str | None = None) -> str:
        """Join the group an invite names (:meth:`find_invited_async`).  An invite to a private group
        that re-keyed carries a one-time secret instead of needing the passphrase: this peer asks
        to be admitted and waits up to :attr:`INVITE_WAIT` s for a member's answer."""
        view = await self.find_invited_async(text)
        invite = parse_invite(text)
        if invite is None or not invite.secret or passphrase or not view.private or view.joined:
            return await self.join_group_async(view.gid, passphrase)
        gid = view.gid
        self.core.request_admission(gid, invite.secret, self._clock.now())
        await self._listen_group(gid)
        self._after_input()
        deadline = self._clock.now() + self.INVITE_WAIT
        while not self.gjlp.is_member(gid):
            if self._clock.now() >= deadline:
                raise UsageError(f"no member of {view.desc!r} admitted this peer within {self.INVITE_WAIT:.0f} s: "
                                 "is the inviter's app running? (an invite works once)")
            await asyncio.sleep(0.05)
        self._announce(gid)
        self.flush()
        return gid

    async def find_invited_async(self, text: str) -> GroupView:
        """The group an invite names.  Its ``peer`` endpoints are probed first, so the group is
        found where multicast does not flow; an unknown group is waited for up to
        :attr:`INVITE_WAIT` seconds."""
        invite = self.core.accept_invite(text, self._clock.now())
        self._after_input()
        deadline = self._clock.now() + self.INVITE_WAIT
        ask_at = self._clock.now() + 1.0
        while invite.gid not in self.gjlp.groups or not self.gjlp.groups[invite.gid].verified:
            if self._clock.now() >= ask_at:  # an advertisement or its answer was lost: ask again
                ask_at = self._clock.now() + 1.0
                self.advertise()
            if self._clock.now() >= deadline:
                where = ", ".join(map(str, invite.peers)) or "the LAN"
                raise UsageError(f"group {invite.desc or invite.gid!r} was not found within {self.INVITE_WAIT:.0f} s "
                                 f"(asked {where}): is the inviter's app running, and is its address "
                                 "reachable from here?")
            await asyncio.sleep(0.05)
        return self.core.group(invite.gid)

    def _join(self, record: GroupRecord, key: bytes | None) -> str:
        gid = self.core.join(record, key, self._clock.now(), self._clock.wall())
        self._spawn(self._listen_group(gid))
        self._announce(gid)
        self._after_input()
        return gid

    # -- files (middleware.files, middleware.file_transfer)

    async def send_file(self, gid: str, path: str, parent: Mid | None = None) -> tuple[Mid, str]:
        """Offer the file at ``path`` in ``gid``: its offer is a message (a reply to ``parent``);
        returns the offer's mid and the file's SHA-256 once the offer is stored and sent."""
        mid, sha256 = await self.files.offer(gid, path, parent, self._send_offer)
        self.flush()
        return mid, sha256

    def _send_offer(self, gid: str, text: str, parent: Mid | None) -> Mid:
        mid = self.core.offer_file(gid, text, parent, self._clock.now(), self._clock.wall())
        self._after_input()
        return mid

    def fetch_file(self, gid: str, mid: Mid, dest: str | None = None) -> dict:
        """Fetch (or resume fetching) the file offered by ``mid`` to ``dest`` (a folder or a name)."""
        return self.files.fetch_file(gid, mid, dest)

    def cancel_file(self, gid: str, mid: Mid) -> dict:
        return self.files.cancel(gid, mid).to_json()

    def file_list(self, gid: str) -> list[dict]:
        """The files offered in ``gid``, each with its state here, bytes held and holders."""
        self.flush()
        return self.files.files(gid)

    def export_log(self, path: str | Path, gid: str | None = None, direct: bool = False) -> int:
        """Write delivered messages as JSON Lines (the analytics export format); direct messages
        only with ``direct`` (and no ``gid``)."""
        if gid:
            self.core.known(gid)
        self.flush()
        return export_log(self.core, path, gid, direct)

    def take_unsent(self) -> dict[Mid, str]:
        """Own messages taken back since the last call because they could not be stored
        (never sent; their seqnos go to the next messages), each with the reason."""
        return self.core.take_unsent()

    def stats_dict(self) -> dict:
        counters = self.core.stats_dict()
        return {
            "datagrams_in": counters.pop("datagrams_in"),
            "datagrams_out": self.network.datagrams_out,
            "bytes_in": counters.pop("bytes_in"),
            "bytes_out": self.network.bytes_out,
            **counters,
            "control_backlog_dropped": self.control_backlog_dropped,
            "unicast_out": getattr(self.network, "unicast_out", 0),
            "broadcast_out": getattr(self.network, "broadcast_out", 0),
            "send_errors": getattr(self.network, "send_errors", 0),
            "send_failures": getattr(self.network, "send_failures", {}),
            "resolves_skipped": self.discovery.resolves_skipped if self.discovery else 0,
            **self.files.stats(),
        }

    # -- internals -------------------------------------------------------------------

    async def _listen_group(self, gid: str) -> None:
        record = self.gjlp.groups[gid]
        await self.network.listen(GroupAddress(record.addr, record.port), self._on_data_datagrams)

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

    # Control datagrams can each ask for hundreds of signature checks (member records, at
    # ~70 µs each), so they are worked through in slices of CONTROL_SLICE seconds, the loop
    # free in between: a flood delays group news, never the chat or the JSON-RPC answers.
    # The backlog is bounded; what does not fit is dropped and counted (senders re-announce).
    CONTROL_SLICE = 0.01
    MAX_CONTROL_BACKLOG = 8_000_000  # bytes

    def _on_control_datagrams(self, batch: Received, via: Via = Via.CONTROL) -> None:
        for data, source in batch:
            if self._control_backlog_bytes + len(data) > self.MAX_CONTROL_BACKLOG:
                self.control_backlog_dropped += 1
                continue
            self._control_backlog.append((data, Arrival(source, via)))
            self._control_backlog_bytes += len(data)
        if not self._control_draining:
            self._drain_control()

    def _drain_control(self) -> None:
        self._control_draining = False
        deadline = time.perf_counter() + self.CONTROL_SLICE
        now, wall = self._clock.now(), self._clock.wall()
        while self._control_backlog:
            data, arrival = self._control_backlog.popleft()
            self._control_backlog_bytes -= len(data)
            self.core.receive(data, arrival, now, wall)
            if self._control_backlog and time.perf_counter() > deadline and self._loop is not None:
                self._control_draining = True
                self._loop.call_soon(self._drain_control)
                break
        self._after_input()

    def _on_unicast_datagrams(self, batch: Received) -> None:
        """Anything may arrive at this peer's endpoint, so it queues with the control datagrams."""
        self._on_control_datagrams(batch, Via.UNICAST)

    def _on_broadcast_datagrams(self, batch: Received) -> None:
        self._on_control_datagrams(batch, Via.BROADCAST)

    def _on_data_datagrams(self, batch: Received) -> None:
        now, wall = self._clock.now(), self._clock.wall()
        receive = self.core.receive
        for data, source in batch:
            receive(data, Arrival(source, Via.MULTICAST), now, wall)
        self._after_input()

    def _on_zeroconf(self, gid: str, desc: str, private: bool, member_count: int, source: str) -> None:
        self.core.note_zeroconf(gid, desc, private, member_count, self._clock.now(), self._clock.wall(), source)
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
        wait = self._last_flush + self._flush_interval - self._clock.now()
        if wait > 0:
            loop.call_later(wait, self.flush)
        else:
            loop.call_soon(self.flush)

    def flush(self) -> None:
        """Persist, then transmit, then notify: everything batched since the last flush."""
        self._flush_scheduled = False
        if self._store_closed:
            return
        now = self._clock.now()
        if self._loop is not None:
            self._last_flush = now
        if self._started:
            turn = self.core.turn(now, self._clock.wall())
        else:  # a manager never started keeps its datagrams in the core
            turn = Turn(self.core.flush(now, self._clock.wall()), [], self.core.events())
        self._flush_interval = self.BUSY_FLUSH_INTERVAL if turn.stored >= self.BUSY_MESSAGES else self.FLUSH_INTERVAL
        for data, destination in turn.datagrams:
            self.network.send(data, destination)
        self._notify(turn.events)
        for gid in self.core.take_announcements():
            self._announce(gid)
        self._arm_timer()

    def _notify(self, events: list[Event]) -> None:
        for network_event in self.follower.events():
            self.listener(network_event)
        for event in events:
            self.listener(event)
            if isinstance(event, RemovedFromGroup):  # nothing more arrives: stop listening, stop announcing
                record = self.core.known(event.gid)
                self.network.stop_listening(GroupAddress(record.addr, record.port))
                if self.discovery is not None:
                    self._spawn(self.discovery.withdraw(event.gid))
            if isinstance(event, MessagesDelivered) and self._started:
                self.files.delivered(event.gid, event.messages)  # offers within the auto-download size

    def _arm_timer(self) -> None:
        deadline = self.core.get_timer()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if deadline is None or self._loop is None:
            return
        delay = max(0.0, deadline - self._clock.now())
        self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.core.handle_timer(self._clock.now())
        self.flush()


def export_log(core: PeerCore, path: str | Path, gid: str | None = None, direct: bool = False) -> int:
    """``gid``'s delivered messages (every joined group's without one) as JSON Lines, the analytics
    export format, as ``core`` holds them (flush it first); written whole to ``path`` or not at all.
    With ``direct`` (and no ``gid``) the direct conversations too, each line marked ``"direct": true``
    with the conversation as its ``gid`` (``dm:<pid>:<pid>``, the two pids sorted). A file offer's
    line carries the offer's fields as ``file``, as JSON-RPC's message objects do."""
    gids = [gid] if gid else list(core.channels)
    count = 0
    path = Path(path)
    tmp = path.with_name(path.name + ".part")
    with tmp.open("w", encoding="utf-8") as out:
        for g in gids:
            desc = core.known(g).desc
            for message in core.history(g):
                row = message.to_json()  # with its kind's fields (a file offer's file: middleware.kinds)
                row["group_desc"] = desc
                row["received_at"] = iso_millis(message.received_at)
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
        for peer in list(core.direct.conversations) if direct and not gid else []:
            conversation = conversation_id(core.pid, peer)
            for dm in core.direct_history(peer):
                row = {"gid": conversation, "mid": format_mid(dm.mid),
                       "parent": format_mid(dm.parent) if dm.parent else None, "sender": dm.sender,
                       "sender_name": dm.sender_name, "kind": kinds.CHAT, "text": dm.text,
                       "sent_at": iso_millis(shown_sent_at(dm.sent_at, dm.received_at)),
                       "sent_at_clamped": shown_sent_at(dm.sent_at, dm.received_at) != dm.sent_at,
                       "edited": 0, "deleted": False, "reactions": {}, "pinned": False, "mentions": [],
                       "group_desc": f"direct: {core.name} and {core._member_name(peer) or peer[:8]}",
                       "received_at": iso_millis(dm.received_at), "direct": True}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
    tmp.replace(path)
    return count


__all__ = ["Config", "GroupManager", "Parts", "default_parts", "export_log", "UsageError", "format_mid", "DEFAULT_PORT", "PassphraseRefused", "Stats"]
