"""The GUI's in-process backend: the real ``GroupManager`` on a LAN held in memory (no sockets), for
tests, screenshots and benchmarks.

:class:`MemoryManager` runs a real :class:`~middleware.manager.GroupManager` over the parts of
:mod:`middleware.memory_lan`: the SQLite store on ``:memory:``, a transport with no socket, a
virtual clock, and :class:`~ui.memory_files.MemoryFiles` for the file service.  Its datagrams
cross a :class:`~middleware.memory_lan.MemoryLan` to other whole peers (bare cores of their own),
run by the ``inject_*`` methods as "the others on the network": they create groups, join, leave,
write and operate through their own cores, signed with keys of their own (:func:`sim_member`).
So every call the GUI makes is the middleware's own, and the GUI hears the middleware's events
(:mod:`middleware.events`), by the same queued path as a real peer's.

Three things are not the real ones.  The clock is virtual: the manager runs on a
:class:`~middleware.memory_lan.VirtualTimeLoop`, each call run to its end at once, and time
moves only while a call waits or the LAN settles (a join's answers and acknowledgements arrive
within :attr:`MemoryLan.SETTLE`); the wall clock moves with it.  A private group's key is
derived by a cheap hash instead of Argon2id (:func:`~middleware.memory_lan.cheap_group_key`).
And a file's bytes move when a test says so (:mod:`ui.memory_files`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import inspect
import random
import time
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from ..middleware import commands, crypto
from ..middleware.chatops import is_operation
from ..middleware.crypto import Identity
from ..middleware.addresses import ANSWER_WAIT, Endpoint
from ..middleware.events import Event, GroupsDiscovered, Listener, WarningRaised
from ..middleware.manager import Config, GroupManager
from ..middleware.memory_lan import MemoryLan, cheap_group_key, memory_parts, memory_store
from ..middleware.memory_store import MemoryStore
from ..middleware.peer_core import PeerCore
from ..middleware.store_api import PeerStore
from ..middleware.types import ChatMessage, GroupView, Member, Mid

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


class InstantFlushManager(GroupManager):
    """A GroupManager that flushes on the next loop turn, always: on virtual time a call's writes
    are then stored, sent and told at the instant of the call, as the GUI's tests expect, instead
    of a few virtual milliseconds later (the pacing is for a real loop under load)."""

    FLUSH_INTERVAL = 0.0
    BUSY_FLUSH_INTERVAL = 0.0


class MemoryManager(commands.Calls):
    """One peer (``name``, its key drawn from ``seed``), a real manager on a :class:`MemoryLan`; the
    ``inject_*`` methods run the others.  ``sent`` lists what this peer sent, as ``(gid, text, parent)``.
    Each call runs on the LAN's loop to its end (virtual time moving while it waits), from outside it."""

    # Virtual seconds after a direct message: the first to a peer waits for its endpoint to be proven
    # (a HELLO and its answer), as the real loop's timers would let it.
    DIRECT_SETTLE = 1.0

    def __init__(self, listener: Listener, name: str = "Me", seed: str | None = None,
                 store: Callable[[Identity], PeerStore] = memory_store) -> None:
        self.listener = listener
        self.lan = MemoryLan(time.time())
        self.hosts: dict[str, str] = {}  # the names add_peer resolves (a computer's name -> IPv4 address)
        self.file_contents: dict[tuple[str, Mid], bytes] = {}  # every file offered on the LAN, by its offer
        identity = sim_identity(f"this peer\0{name}\0{seed or ''}")  # never a sim_member()'s key
        parts = memory_parts(self.lan, store(identity), self._files)
        parts.lookup = self._lookup
        self.manager = InstantFlushManager(Config(Path(":memory:"), name=name, iface="127.0.0.1", seed=0),
                                           self._tell, parts)
        self.core = self.manager.core
        self.store = self.manager.store
        self.pid = self.manager.pid
        self.interface = self.manager.interface
        self.files: MemoryFiles = self.manager.files  # type: ignore[assignment]  # made by _files
        self.sent: list[tuple[str, str, Mid | None]] = []
        self._muted = 0  # while > 0, this peer's events are not told (the network's past, set up by a test)
        self.lan.loop.complete(self.manager.start())

    def _files(self, core: PeerCore, listener: Listener) -> MemoryFiles:
        return MemoryFiles(core, listener, self.file_contents)

    @property
    def name(self) -> str:
        return self.core.name

    def _tell(self, event: Event) -> None:
        if not self._muted:
            self.listener(event)

    def _on_loop(self, work: Callable[[], Any]) -> Any:
        """``work()`` run on the LAN's loop (awaited, if it gives a coroutine), then what it led to."""
        async def call() -> Any:
            result = work()
            return await result if inspect.isawaitable(result) else result
        return self.lan.loop.complete(call())

    def close(self) -> None:
        """Close the manager (its goodbye sent on the LAN) and the loop; once only."""
        if self.lan.loop.is_closed():
            return
        self._on_loop(self.manager.close)
        self.lan.loop.close()

    # -- GroupManager's API, run by the real one ------------------------------------------

    def execute(self, command: commands.Command) -> Any:
        """GroupManager's, on the LAN's loop; an action then runs on the LAN until it is quiet, and
        one that waits for answers lets virtual time go by as a user would wait."""
        c = commands
        result = self._on_loop(lambda: self.manager.execute(command))
        match command:
            case c.Send(gid, text, parent):
                self.sent.append((gid, text, parent))
            case c.SendFile(gid, _path, parent):
                self.sent.append((gid, self.core.store.messages(gid, [result[0]])[0].text, parent))
            case c.SendDirect():
                self.lan.settle(self.DIRECT_SETTLE)
            case c.Advertise() | c.JoinGroup() | c.AddPeer():
                self.lan.settle()
        return result

    # The adapter's own calls, as commands (each runs to its end: these coroutines never wait).

    async def create_group_async(self, desc: str, passphrase: str | None = None) -> str:
        return self.execute(commands.CreateGroup(desc, passphrase))

    def create_group(self, desc: str, passphrase: str | None = None) -> str:
        return self.execute(commands.CreateGroup(desc, passphrase))

    def join_group(self, gid: str, passphrase: str | None = None) -> str:
        return self.execute(commands.JoinGroup(gid, None, passphrase))

    async def join_group_async(self, gid: str, passphrase: str | None = None) -> str:
        return self.join_group(gid, passphrase)

    async def join_invite_async(self, text: str, passphrase: str | None = None) -> str:
        return self.execute(commands.JoinGroup(None, text, passphrase))

    async def find_invited_async(self, text: str) -> GroupView:
        return self._on_loop(lambda: self.manager.find_invited_async(text))

    def add_peer(self, address: str, found_by: str = "manual") -> Endpoint:
        endpoint = self._on_loop(lambda: self.manager.add_peer(address, found_by))
        self.lan.settle()
        return endpoint

    async def add_peer_async(self, address: str, wait: float = ANSWER_WAIT) -> dict:
        return self.execute(commands.AddPeer(address, wait))

    def _lookup(self, host: str, *_args: object) -> list[tuple]:
        """``socket.getaddrinfo`` over :attr:`hosts` (a computer's name -> its IPv4 address)."""
        address = self.hosts.get(host)
        return [(2, 2, 17, "", (address, 0))] if address is not None else []

    async def send_file(self, gid: str, path: str, parent: Mid | None = None) -> tuple[Mid, str]:
        return self.execute(commands.SendFile(gid, path, parent))

    def fetch_file(self, gid: str, mid: Mid, dest: str | None = None) -> dict:
        return self._on_loop(lambda: self.manager.fetch_file(gid, mid, dest))

    def cancel_file(self, gid: str, mid: Mid) -> dict:
        return self._on_loop(lambda: self.manager.cancel_file(gid, mid))

    def file_list(self, gid: str) -> list[dict]:
        return self._on_loop(lambda: self.manager.file_list(gid))

    def export_log(self, path: str | Path, gid: str | None = None, direct: bool = False) -> int:
        return self._on_loop(lambda: self.manager.export_log(path, gid, direct))

    def network_state(self) -> dict:
        return self.manager.network_state()

    def stats_dict(self) -> dict:
        return self._on_loop(self.manager.stats_dict)

    def take_unsent(self) -> dict[Mid, str]:
        return self.manager.take_unsent()

    def _run(self, core: PeerCore, action: Callable[[PeerCore], T]) -> T:
        """``action`` on ``core`` (this peer's, through its manager's flush; or another's) until the LAN is quiet."""
        if core is not self.core:
            return self.lan.run(core, action)

        def act() -> T:
            result = action(core)
            self.manager.flush()
            return result
        return self._on_loop(act)

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
            self.lan.add_core(core)
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
                self._run(self.core, lambda core: core.note_zeroconf(gid, desc, private, len(others), self.lan.now,
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
        if author_core is self.core:  # made by this peer's manager, which listens on the group's address
            gid = self._on_loop(lambda: self.manager.create_group_async(desc, passphrase))
        else:
            salt = crypto.new_salt()
            key = cheap_group_key(passphrase, salt) if passphrase is not None else None
            gid = self._run(author_core, lambda core: core.create_group(desc, salt, key, self.lan.wall()))
        self._join_all(gid, [self.peer(m) for m in (*others, *left) if m.pid != author.pid], passphrase)
        for member in left:
            self._run(self.peer(member), lambda core: core.leave(gid, self.lan.wall()))
        if creator is not None and creator not in members:  # a creator that is not a member any more
            self._run(author_core, lambda core: core.leave(gid, self.lan.wall()))
        return gid

    def _told(self, gid: str, notify: bool) -> GroupView:
        view = self.group(gid)
        if notify:
            self.listener(GroupsDiscovered([view]))
        return view

    def _join_all(self, gid: str, cores: list[PeerCore], passphrase: str | None) -> None:
        for core in cores:  # each learns of the group over GJLP, then joins it
            self._run(core, lambda core: core.advertise())
        self.lan.settle()
        for core in cores:
            if core is self.core:
                self._on_loop(lambda: self.manager.join_group_async(gid, passphrase))
            else:
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
            self._run(core, lambda core: _write_as_signed(core, gid, message, self.lan.now))

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
        mid = self._run(core, lambda core: core.offer_file(gid, offer.to_text(), parent, self.lan.now,
                                                              self.lan.wall()))
        self.file_contents[(gid, mid)] = path.read_bytes()
        return mid

    def inject_member(self, gid: str, member: Member, joined: bool = True) -> None:
        """``member`` joins ``gid`` (or leaves it), as the GUI hears it live."""
        if joined:
            self._join_all(gid, [self.peer(member)], None)
        else:
            self._run(self.peer(member), lambda core: core.leave(gid, self.lan.wall()))

    def set_online(self, member: Member, online: bool) -> None:
        """``member``'s app runs (it hears, and catches up on what it missed) or is closed (it hears nothing)."""
        if online:
            self.lan.down.discard(member.pid)
            self._run(self.peer(member), lambda core: core.resync(self.lan.now))
            self.lan.settle()
        else:
            self.lan.down.add(member.pid)

    def pass_time(self, seconds: float) -> None:
        """Let ``seconds`` of virtual time go by, the peers' timers firing (their beacons, for presence)."""
        self.lan.settle(seconds)

    def inject_direct(self, member: Member, text: str, parent: Mid | None = None) -> Mid:
        """``member`` writes to this peer: a direct message from its own core, sealed and sent over the LAN."""
        mid = self._run(self.peer(member), lambda core: core.send_direct(self.pid, text, parent, self.lan.wall()))
        self.lan.settle(self.DIRECT_SETTLE)
        return mid

    def inject_direct_read(self, member: Member, mid: Mid) -> None:
        """``member`` has read this peer's direct messages up to ``mid`` (a receipt comes if it sends them)."""
        self._run(self.peer(member), lambda core: core.mark_direct_read(self.pid, mid))

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
    """What GroupManager.join_group does, for a bare core, with the in-memory key."""
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
                 store: Callable[[Identity], PeerStore] = memory_store) -> None:
        super().__init__(parent)
        self.manager = MemoryManager(self.post, name, seed, store)
        self.pid, self.name, self.interface, self.port = self.manager.pid, name, "127.0.0.1", self.manager.core.port

    def _submit(self, work: Callable[[Peer], Any]) -> concurrent.futures.Future:
        """``work`` run to its end at once (the manager's calls each run on the LAN's loop)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(_run_to_end(work(self.manager)))
        except Exception as exc:
            future.set_exception(exc)
        return future

    def close(self) -> None:
        self.manager.close()


def _run_to_end(result: Any) -> Any:
    """A coroutine's value (MemoryManager's never suspend: each runs its call on the LAN's loop to
    its end); anything else as it is."""
    if not inspect.iscoroutine(result):
        return result
    try:
        result.send(None)
    except StopIteration as done:
        return done.value
    result.close()
    raise RuntimeError("a MemoryManager coroutine waited for something")

