"""The GUI's in-process backend: the real protocol core on a LAN held in memory (no sockets), for tests,
screenshots and benchmarks.

:class:`MemoryManager` answers the same calls as ``GroupManager`` (the GUI's
:class:`~ui.backend.Peer`), and like it is a thin adapter over a
:class:`~middleware.peer_core.PeerCore`, here over a
:class:`~middleware.memory_store.MemoryStore`.  Its datagrams cross a
:class:`MemoryLan` to other whole peers (cores of their own), run by the
``inject_*`` methods as "the others on the network": they create groups, join,
leave, write and operate through their own cores, signed with keys of their own
(:func:`sim_member`).  So every group rule, OBG operation, name check and
refusal is the middleware's, and the GUI hears the middleware's own events
(:mod:`middleware.events`), by the same queued path as a real peer's.

Two things are not the real ones.  The clock is virtual: time moves only when
the LAN settles (a join's answers and acknowledgements arrive within
:attr:`MemoryLan.SETTLE`), and the wall clock moves with it.  A private group's
key is derived by a cheap hash instead of Argon2id: there is nothing to keep
from an attacker here, and a GUI test should not wait 0.6 s per passphrase.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib
import inspect
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from ..middleware import commands, crypto, rules
from ..middleware.chatops import is_operation
from ..middleware.crypto import Identity
from ..middleware.addresses import ANSWER_WAIT, Arrival, Broadcast, Endpoint, Via, answered_at, resolve_endpoint
from ..middleware.events import Event, GroupsDiscovered, Listener, MessagesDelivered, WarningRaised, ignore
from ..middleware.manager import export_log
from ..middleware.memory_store import MemoryStore
from ..middleware.peer_core import Datagram, PeerCore
from ..middleware.store_api import PeerStore
from ..middleware.types import ChatMessage, GroupView, Member, Mid, UsageError

from .backend import Peer
from .bridge import Backend
from .memory_files import MemoryFiles, offer_of_file

T = TypeVar("T")

# Every peer that sim_member() made, by pid: the LAN runs a member's core under its own key.
_IDENTITIES: dict[str, Identity] = {}


def sim_identity(seed: str) -> Identity:
    """A key drawn from ``seed``: the same seed makes the same pid on every run."""
    return Identity.from_bytes(hashlib.sha256(b"m2mc memory peer\0" + seed.encode()).digest())


def sim_member(name: str, seed: str | None = None) -> Member:
    """A member that the in-memory LAN can run as a peer (its key drawn from ``seed``, else the name)."""
    identity = sim_identity(name if seed is None else seed)
    _IDENTITIES[identity.pid] = identity
    return Member(identity.pid, name)


def cheap_group_key(passphrase: str, salt: bytes) -> bytes:
    """A private group's key in memory: a hash of the passphrase, not Argon2id (see the module docstring)."""
    return hashlib.blake2b(passphrase.encode(), key=salt[:64], digest_size=32).digest()


class MemoryLan:
    """Cores joined by an in-memory network: each datagram reaches every other core that is up, at once,
    and timers fire only in :meth:`settle`.  Each input is run as the asyncio adapter runs it: the input,
    then ``flush`` (persist), then ``datagrams_to_send`` (transmit), then ``events`` (notify)."""

    SETTLE = 3.0  # virtual seconds after a join: the members' answers, acknowledgements and sync fit in it
    MAX_STEPS = 100_000  # timer firings in one settle: far past what a join or a sync needs
    START = 1_000.0

    def __init__(self, wall: float) -> None:
        self.now = self.START
        self._wall0 = wall
        self.cores: dict[str, PeerCore] = {}
        self.endpoints: dict[str, Endpoint] = {}  # where each peer's datagrams come from (a port each, no socket)
        self.down: set[str] = set()  # pids that hear nothing (their app is closed, or their link down)
        self._listeners: dict[str, Listener] = {}
        self._queue: collections.deque[tuple[str, Datagram]] = collections.deque()
        self.file_contents: dict[tuple[str, Mid], bytes] = {}  # every file offered here, by its offer (ui.memory_files)

    def wall(self) -> float:
        """The wall clock, in seconds since the epoch: it starts at the real one and moves with ``now``."""
        return self._wall0 + self.now - self.START

    def add(self, core: PeerCore, listener: Listener = ignore) -> None:
        self.cores[core.pid] = core
        self.endpoints[core.pid] = Endpoint("127.0.0.1", 40_000 + len(self.endpoints))
        core.reach.own.add(self.endpoints[core.pid])
        self._listeners[core.pid] = listener

    def run(self, core: PeerCore, action: Callable[[PeerCore], T]) -> T:
        """``action`` on ``core``, then its flush; then every datagram it leads to, until the LAN is quiet."""
        result = action(core)
        self._flush(core)
        self._deliver()
        return result

    def _flush(self, core: PeerCore) -> None:
        core.flush(self.now)
        for datagram in core.datagrams_to_send():
            self._queue.append((core.pid, datagram))
        listener = self._listeners[core.pid]
        for event in core.events():
            listener(event)

    def _deliver(self) -> None:
        while self._queue:
            sender, (data, destination) = self._queue.popleft()
            source = self.endpoints[sender]
            if isinstance(destination, Broadcast):
                continue  # multicast reaches everyone here: nobody needs the subnet's broadcasts
            for pid, core in list(self.cores.items()):
                if pid == sender or pid in self.down:
                    continue
                if isinstance(destination, Endpoint):  # one peer's: to it alone
                    if destination != self.endpoints[pid]:
                        continue
                    core.receive(data, Arrival(source, Via.UNICAST), self.now, self.wall())
                else:
                    via = Via.CONTROL if destination.host == core.control_addr else Via.MULTICAST
                    core.receive(data, Arrival(source, via), self.now, self.wall())
                self._flush(core)

    def settle(self, seconds: float = SETTLE) -> None:
        """Fire the cores' timers in time order for ``seconds`` of virtual time."""
        until = self.now + seconds
        for _ in range(self.MAX_STEPS):
            due = [(at, pid) for pid, core in self.cores.items()
                   if pid not in self.down and (at := core.get_timer()) is not None]
            if not due or min(due)[0] > until:
                self.now = until
                return
            at, pid = min(due)
            self.now = max(self.now, at)
            self.run(self.cores[pid], lambda core: core.handle_timer(self.now))
        raise RuntimeError(f"the in-memory LAN found no rest after {self.MAX_STEPS} timers")


class MemoryManager(commands.Calls):
    """One peer (``name``, its key drawn from ``seed``) on a :class:`MemoryLan`; the ``inject_*`` methods
    run the others.  ``sent`` lists what this peer sent, as ``(gid, text, parent)``."""

    # Virtual seconds after a direct message: the first to a peer waits for its endpoint to be proven
    # (a HELLO and its answer), as the real loop's timers would let it.
    DIRECT_SETTLE = 1.0

    def __init__(self, listener: Listener, name: str = "Me", seed: str | None = None,
                 store: Callable[[Identity], PeerStore] = MemoryStore) -> None:
        self.listener = listener
        self.interface = "127.0.0.1"
        self.lan = MemoryLan(time.time())
        self.hosts: dict[str, str] = {}  # the names add_peer resolves (a computer's name -> IPv4 address)
        identity = sim_identity(f"this peer\0{name}\0{seed or ''}")  # never a sim_member()'s key
        self.store = store(identity)  # a SQLite Store for benchmarks of big histories
        self.core = PeerCore(self.store, self.lan.now, rules.check_name(name), wall=self.lan.wall(),
                             rng=random.Random(identity.pid))
        self.pid = self.core.pid
        self.lan.add(self.core, self._tell)
        self.sent: list[tuple[str, str, Mid | None]] = []
        self.files = MemoryFiles(self.core, self._tell, self.lan.file_contents)
        self._muted = 0  # while > 0, this peer's events are not told (the network's past, set up by a test)

    @property
    def name(self) -> str:
        return self.core.name

    def _tell(self, event: Event) -> None:
        if not self._muted:
            self.listener(event)
        if isinstance(event, MessagesDelivered):
            self.files.delivered(event.gid, event.messages)  # as GroupManager does: small offers come by themselves

    def _run(self, action: Callable[[PeerCore], T]) -> T:
        return self.lan.run(self.core, action)

    # -- GroupManager's API ------------------------------------------------------------

    def execute(self, command: commands.Command) -> Any:
        """As GroupManager's: the calls that need an adapter here (coroutines that never wait),
        the rest in the core; an action then runs on the LAN until it is quiet."""
        c = commands
        if isinstance(command, c.ADAPTER_COMMANDS):
            return c.run_on_adapter(self, command)
        if isinstance(command, c.Query):
            return self.core.execute(command, self.lan.now, self.lan.wall())
        result = self._run(lambda core: core.execute(command, self.lan.now, self.lan.wall()))
        match command:
            case c.Send(gid, text, parent):
                self.sent.append((gid, text, parent))
            case c.SendDirect():
                self.lan.settle(self.DIRECT_SETTLE)
            case c.Advertise():
                self.lan.settle()
        return result


    def create_group(self, desc: str, passphrase: str | None = None) -> str:
        desc = rules.check_desc(desc)
        salt = crypto.new_salt()
        key = None
        if passphrase is not None:
            rules.check_new_passphrase(passphrase)
            key = cheap_group_key(passphrase, salt)
        return self._run(lambda core: core.create_group(desc, salt, key, self.lan.wall()))

    def join_group(self, gid: str, passphrase: str | None = None) -> str:
        _join(self.lan, self.core, gid, passphrase)
        self.lan.settle()
        return gid

    # Nothing here derives a key off a loop, so nothing to wait for: MemoryBackend runs these to their end at once.
    async def create_group_async(self, desc: str, passphrase: str | None = None) -> str:
        return self.create_group(desc, passphrase)

    async def join_group_async(self, gid: str, passphrase: str | None = None) -> str:
        return self.join_group(gid, passphrase)

    async def join_invite_async(self, text: str, passphrase: str | None = None) -> str:
        """As GroupManager's: an invite with a one-time secret asks to be admitted instead."""
        invite = self._run(lambda core: core.accept_invite(text, self.lan.now))
        if not invite.secret or passphrase:
            return self.join_group(invite.gid, passphrase)
        self._run(lambda core: core.request_admission(invite.gid, invite.secret, self.lan.now))
        self.lan.settle(5.0)
        if invite.gid not in self.core.joined:
            raise UsageError(f"no member of {invite.desc!r} admitted this peer: an invite works once")
        self.listener(GroupsDiscovered([self.group(invite.gid)]))
        return invite.gid

    async def find_invited_async(self, text: str) -> GroupView:
        """The group an invite names: everyone here hears multicast, so its peers need no probing."""
        invite = self._run(lambda core: core.accept_invite(text, self.lan.now))
        return self.core.group(invite.gid)

    def add_peer(self, address: str, found_by: str = "manual") -> Endpoint:
        endpoint = self._run(lambda core: core.add_peer(address, self.lan.now, found_by))
        self.lan.settle()
        return endpoint

    async def add_peer_async(self, address: str, wait: float = ANSWER_WAIT) -> dict:
        """:meth:`add_peer`, answered once the peer there is proven; names resolve by :attr:`hosts`.
        The LAN's time runs on while it waits (in steps), as the network's would."""
        try:
            endpoint = resolve_endpoint(address, self.core.port, self._lookup)
        except ValueError as exc:
            raise UsageError(f"bad address: {exc}") from None
        self.add_peer(str(endpoint))
        waited = 0.0
        while (row := answered_at(self.peers(), endpoint)) is None:
            if waited >= wait:
                raise UsageError(f"Nobody answered at {endpoint} within {wait:g} s")
            self.lan.settle(1.0)
            waited += 1.0
        return {"endpoint": str(endpoint), "pid": row["pid"], "name": row.get("name", "")}

    def _lookup(self, host: str, *_args) -> list[tuple]:
        """``socket.getaddrinfo`` over :attr:`hosts` (a computer's name -> its IPv4 address)."""
        address = self.hosts.get(host)
        return [(2, 2, 17, "", (address, 0))] if address is not None else []

    async def send_file(self, gid: str, path: str, parent: Mid | None = None) -> tuple[Mid, str]:
        source = self.files.readable(path)
        offer = offer_of_file(source)
        mid = self._run(lambda core: core.offer_file(gid, offer.to_text(), parent, self.lan.now, self.lan.wall()))
        self.sent.append((gid, offer.to_text(), parent))
        return mid, self.files.offered(gid, mid, source)

    def fetch_file(self, gid: str, mid: Mid, dest: str | None = None) -> dict:
        return self.files.fetch(gid, mid, dest)

    def cancel_file(self, gid: str, mid: Mid) -> dict:
        return self.files.cancel(gid, mid)

    def file_list(self, gid: str) -> list[dict]:
        return self.files.files(gid)

    def export_log(self, path: str | Path, gid: str | None = None, direct: bool = False) -> int:
        if gid:
            self.core.known(gid)
        return export_log(self.core, path, gid, direct)

    def network_state(self) -> dict:
        """Always on the network: the LAN is in memory."""
        return {"state": "connected", "interface": "lo", "address": self.interface, "reason": ""}

    def stats_dict(self) -> dict:
        return self.core.stats_dict()

    # -- the others on the network ------------------------------------------------------

    def peer(self, member: Member) -> PeerCore:
        """``member``'s own core on the LAN (made of :func:`sim_member`), started on first use."""
        if member.pid == self.pid:
            return self.core
        core = self.lan.cores.get(member.pid)
        if core is None:
            identity = _IDENTITIES.get(member.pid)
            if identity is None:
                raise ValueError(f"{member.name} ({member.pid}) is not a sim_member(): the LAN has no key for it")
            core = PeerCore(MemoryStore(identity), self.lan.now, member.name, wall=self.lan.wall(),
                            rng=random.Random(member.pid))
            self.lan.add(core)
        return core

    def inject_group(self, desc: str, members: tuple[Member, ...] = (), private: bool = False,
                     joined: bool = False, left: tuple[Member, ...] = (), history: list[ChatMessage] | None = None,
                     notify: bool = True, passphrase: str | None = None, creator: Member | None = None,
                     verified: bool = True, unread: bool = False) -> GroupView:
        """A group made by ``creator`` (else the first of ``members``), which ``members`` and ``left`` join
        (``left`` leave it again) and ``history`` is written in, before this peer hears of it.  This peer
        is in it if ``joined`` (this peer in ``members`` says nothing).  ``notify``: the GUI is told of
        the group at the end.  ``private`` without a passphrase: a passphrase nobody is told.
        ``verified=False``: this peer has only seen the group's zeroconf announcement so far: it verifies once
        its descriptor is fetched over GJLP (within :attr:`MemoryLan.SETTLE` of :meth:`pass_time`).
        A joined group's ``history`` counts as read here already, unless ``unread``."""
        others = tuple(m for m in members if m.pid != self.pid)
        if private and passphrase is None:
            passphrase = f"the passphrase of {desc!r}, told to nobody"
        with self._quiet():
            if not verified:  # made while this peer heard nothing; then its zeroconf announcement came
                self.lan.down.add(self.pid)
                try:
                    gid = self._make_group(desc, others, left, passphrase, creator, members)
                finally:
                    self.lan.down.discard(self.pid)
                self._run(lambda core: core.note_zeroconf(gid, desc, private, len(others), self.lan.now,
                                                          self.lan.wall(), "10.77.0.9"))
                return self._told(gid, notify)
            gid = self._make_group(desc, others, left, passphrase, creator, members)
            if joined and gid not in self.core.channels:
                self._join_all(gid, [self.core], passphrase)
            self._write(gid, history or [])
            self.lan.settle()
            orders = [m.order for m in self.store.history(gid) if m.order]
            if joined and orders and not unread:  # the history was read here before: what comes later is news
                self.core.mark_read(gid, [(min(orders), max(orders))])
        return self._told(gid, notify)

    def _make_group(self, desc: str, others: tuple[Member, ...], left: tuple[Member, ...], passphrase: str | None,
                    creator: Member | None, members: tuple[Member, ...]) -> str:
        author = creator or (others[0] if others else Member(self.pid, self.name))
        author_core = self.peer(author)
        salt = crypto.new_salt()
        key = cheap_group_key(passphrase, salt) if passphrase is not None else None
        gid = self.lan.run(author_core, lambda core: core.create_group(desc, salt, key, self.lan.wall()))
        self._join_all(gid, [self.peer(m) for m in (*others, *left) if m.pid != author.pid], passphrase)
        for member in left:
            self.lan.run(self.peer(member), lambda core: core.leave(gid, self.lan.wall()))
        if creator is not None and creator not in members:  # a creator that is not a member any more
            self.lan.run(author_core, lambda core: core.leave(gid, self.lan.wall()))
        return gid

    def _told(self, gid: str, notify: bool) -> GroupView:
        view = self.group(gid)
        if notify:
            self.listener(GroupsDiscovered([view]))
        return view

    def _join_all(self, gid: str, cores: list[PeerCore], passphrase: str | None) -> None:
        for core in cores:  # each learns of the group over GJLP, then joins it
            self.lan.run(core, lambda core: core.advertise())
        self.lan.settle()
        for core in cores:
            _join(self.lan, core, gid, passphrase)
        self.lan.settle()

    def inject_messages(self, gid: str, messages: list[ChatMessage], notify: bool = True,
                        missed: bool = False) -> None:
        """Messages written by their authors' peers, in this order, each with its mid's seqno (an author's
        next seqnos are skipped to reach it), its ``sent_at`` and its signed name; an operation's text
        (:meth:`operation_message`) goes out as written, for the group's rules to judge.  ``notify``:
        the GUI hears of them; ``missed``: this peer loses them on the way (a reply to one is then held)."""
        if missed:
            self.lan.down.add(self.pid)
        try:
            if notify:
                self._write(gid, messages)
            else:
                with self._quiet():
                    self._write(gid, messages)
        finally:
            self.lan.down.discard(self.pid)

    def _write(self, gid: str, messages: list[ChatMessage]) -> None:
        for message in messages:
            core = self.peer(Member(message.sender, message.sender_name))
            self.lan.run(core, lambda core: _write_as_signed(core, gid, message, self.lan.now))

    def operation_message(self, gid: str, author: Member, seqno: int, kind: str, target: Mid | None = None,
                          **fields) -> ChatMessage:
        """An operation by ``author`` as its peer composes it (for :meth:`inject_messages`)."""
        text = self.peer(author).ops(gid).compose(author.pid, kind, target, **fields)
        wall = int(self.lan.wall() * 1000)
        return ChatMessage(gid, (author.pid, seqno), target, author.name, text, wall, wall)

    def inject_file(self, gid: str, member: Member, path: Path, parent: Mid | None = None) -> Mid:
        """``member`` offers the file at ``path`` in ``gid`` (its bytes are kept for :meth:`MemoryFiles.advance`)."""
        offer = offer_of_file(path)
        core = self.peer(member)
        mid = self.lan.run(core, lambda core: core.offer_file(gid, offer.to_text(), parent, self.lan.now,
                                                              self.lan.wall()))
        self.lan.file_contents[(gid, mid)] = path.read_bytes()
        return mid

    def inject_member(self, gid: str, member: Member, joined: bool = True) -> None:
        """``member`` joins ``gid`` (or leaves it), as the GUI hears it live."""
        if joined:
            self._join_all(gid, [self.peer(member)], None)
        else:
            self.lan.run(self.peer(member), lambda core: core.leave(gid, self.lan.wall()))

    def set_online(self, member: Member, online: bool) -> None:
        """``member``'s app runs (it hears, and catches up on what it missed) or is closed (it hears nothing)."""
        if online:
            self.lan.down.discard(member.pid)
            self.lan.run(self.peer(member), lambda core: core.resync(self.lan.now))
            self.lan.settle()
        else:
            self.lan.down.add(member.pid)

    def pass_time(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time go by, the peers' timers firing (their beacons, for presence)."""
        self.lan.settle(seconds)

    def inject_direct(self, member: Member, text: str, parent: Mid | None = None) -> Mid:
        """``member`` writes to this peer: a direct message from its own core, sealed and sent over the LAN."""
        mid = self.lan.run(self.peer(member), lambda core: core.send_direct(self.pid, text, parent, self.lan.wall()))
        self.lan.settle(self.DIRECT_SETTLE)
        return mid

    def inject_direct_read(self, member: Member, mid: Mid) -> None:
        """``member`` has read this peer's direct messages up to ``mid`` (a receipt comes if it sends them)."""
        self.lan.run(self.peer(member), lambda core: core.mark_direct_read(self.pid, mid))

    def inject_warning(self, gid: str, text: str) -> None:
        """What the middleware tells as a :class:`WarningRaised` (equivocation, and the like)."""
        self.listener(WarningRaised(gid, text))

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        """Within it, this peer's events are not told: what the network did before the GUI looked."""
        self._muted += 1
        try:
            yield
        finally:
            self._muted -= 1


def _join(lan: MemoryLan, core: PeerCore, gid: str, passphrase: str | None) -> None:
    """What GroupManager.join_group does, with the in-memory key."""
    record = core.joinable(gid, passphrase)
    if record is None:
        return
    key = None
    if record.private and passphrase:  # joinable() refuses a private group without one
        key = core.checked_key(record, cheap_group_key(passphrase, core.kdf_args(record)[0]))
    lan.run(core, lambda core: core.join(record, key, lan.now, lan.wall()))


def _write_as_signed(core: PeerCore, gid: str, message: ChatMessage, now: float) -> Mid:
    """``message`` written by ``core``'s peer: at its seqno, stamped with its sent_at, signed with its name."""
    channel = core.channel(gid)
    seqno = message.mid[1]
    if seqno < channel.next_seqno:
        raise ValueError(f"{message.sender_name} has already written seqno {seqno} in {gid}")
    channel.next_seqno = seqno
    wall = message.sent_at / 1000
    if is_operation(message) or message.sender_name != core.name:  # as a peer of other code could
        channel.compose(message.sender_name, message.text, message.parent, now, wall)
        return message.mid
    return core.send(gid, message.text, message.parent, now, wall)


class MemoryBackend(Backend):
    """A :class:`~ui.bridge.Backend` over a :class:`MemoryManager`; calls complete at once."""

    def __init__(self, name: str = "Me", seed: str | None = None, parent=None,
                 store: Callable[[Identity], PeerStore] = MemoryStore) -> None:
        super().__init__(parent)
        self.manager = MemoryManager(self.post, name, seed, store)
        self.pid, self.name, self.interface, self.port = self.manager.pid, name, "127.0.0.1", self.manager.core.port

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

