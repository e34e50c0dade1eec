"""A LAN held in memory, on virtual time: real GroupManagers and bare PeerCores exchange datagrams
with no socket, and time moves only when nothing is left to do at the present instant.

:class:`VirtualTimeLoop` is an asyncio event loop whose ``time()`` is a number it keeps: when
no callback is ready, instead of sleeping until the next timer it jumps to it.  So a
:class:`~middleware.manager.GroupManager` runs on it unchanged (its flushes, its core's timer,
its polling waits) and a minute of protocol passes in milliseconds, the same way on every run.
``run_in_executor`` runs the function at once, on the loop's thread: nothing here may wait for
a real thread while virtual time runs on.

:class:`MemoryLan` joins the peers: a manager through a :class:`MemoryTransport` (its
``Parts.network``), a bare core (a simulated other peer, driven by whoever holds it) through
:meth:`MemoryLan.add_core`.  Each datagram sent reaches every other peer that is up, on the next
loop turn, as multicast reaches everyone on a quiet LAN (a unicast one only its endpoint's
peer).  :func:`memory_parts` makes a manager's parts for it (over :func:`memory_store`, the
SQLite store on ``:memory:``): the LAN's clock, a cheap key derivation, and no interfaces (no network watch).
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import selectors
from typing import Any, Awaitable, Callable, TypeVar

from .addresses import Arrival, Broadcast, Endpoint, GroupAddress, Via
from .crypto import Identity
from .events import Listener, ignore
from .manager import Parts
from .peer_core import Datagram, PeerCore
from .store import Store
from .store_api import PeerStore
from .transport import Received

T = TypeVar("T")

OnDatagrams = Callable[[Received], None]


class _IdleSelector(selectors.DefaultSelector):
    """The loop's selector: it never blocks; where the loop would sleep, virtual time jumps instead."""

    def __init__(self, loop: "VirtualTimeLoop") -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None):
        events = super().select(0)  # the loop's own wake-up pipe: nothing else is registered here
        if not events and timeout != 0:
            self._loop._idle(timeout)
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock (see the module docstring); it starts at ``start`` seconds."""

    def __init__(self, start: float = 1_000.0) -> None:
        self._now = start
        super().__init__(_IdleSelector(self))

    def time(self) -> float:
        return self._now

    # asyncio's own queues (BaseEventLoop's, undocumented but stable since 3.4): the timers in a heap,
    # and the callbacks ready to run.  Reading them is how a loop tells idle from busy.
    def _next_timer(self) -> float | None:
        scheduled = self._scheduled  # type: ignore[attr-defined]
        return scheduled[0].when() if scheduled else None

    def _busy(self) -> bool:
        return bool(self._ready)  # type: ignore[attr-defined]

    def _idle(self, timeout: float | None) -> None:
        """Nothing is ready: on to the next timer, ``timeout`` from now (None: there is none)."""
        if timeout is None:
            raise RuntimeError("the virtual-time loop has nothing left to run and no timer: it would wait forever")
        self._now += timeout
        at = self._next_timer()
        if at is not None:  # exactly onto the timer's time, whatever the float sum gave
            self._now = max(self._now, at)

    def run_in_executor(self, executor: Any, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:  # type: ignore[override]
        """``func(*args)`` here and now (a real thread would finish at no definite virtual time)."""
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as exc:  # the future carries it to whoever awaits, as an executor's would
            future.set_exception(exc)
        return future

    def run_until(self, until: float) -> None:
        """Run every callback due up to ``until`` (time jumping from timer to timer), and what they
        lead to at that instant, then stop with the time at ``until`` (or now, if that is later)."""
        def stop_when_quiet() -> None:
            if self._busy():  # more at this instant (due timers are moved here first): after them
                self.call_soon(stop_when_quiet)
            else:
                self.stop()
        self.call_at(max(until, self._now), stop_when_quiet)
        self.run_forever()

    def settle(self) -> None:
        """Run what is ready at the present instant, and what it leads to, without moving time."""
        self.run_until(self._now)

    def complete(self, work: Awaitable[T], limit: float = 600.0) -> T:
        """``work`` run to its end (virtual time moving as it waits, by ``limit`` virtual seconds at
        most), then what it led to at that instant."""
        task = asyncio.ensure_future(work, loop=self)
        timeout = self.call_at(self._now + limit, task.cancel)
        try:
            result = self.run_until_complete(task)
        except asyncio.CancelledError:
            raise RuntimeError(f"a call on the virtual-time loop did not end within {limit:g} virtual seconds") from None
        finally:
            timeout.cancel()
        self.settle()
        return result


def cheap_group_key(passphrase: str, salt: bytes, *_params: object) -> bytes:
    """A private group's key on the in-memory LAN: a hash of the passphrase, not Argon2id (nothing
    here is kept from an attacker, and a GUI test should not wait 0.6 s per passphrase).  Takes
    the kdf arguments of :func:`~middleware.crypto.derive_group_key` and ignores them."""
    return hashlib.blake2b(passphrase.encode(), key=salt[:64], digest_size=32).digest()


class MemoryLan:
    """Peers joined in memory on a :class:`VirtualTimeLoop`; ``down`` holds the pids that neither
    hear nor are heard (their app is closed, or their link down)."""

    START = 1_000.0
    SETTLE = 3.0  # virtual seconds that settle() lets go by unless told: a join's answers, acks and sync fit in it

    def __init__(self, wall: float) -> None:
        self.loop = VirtualTimeLoop(self.START)
        self._wall0 = wall
        self.endpoints: dict[str, Endpoint] = {}  # where each peer's datagrams come from (a port each, no socket)
        self.cores: dict[str, PeerCore] = {}  # the bare cores, driven here
        self.transports: dict[str, MemoryTransport] = {}  # the managers' networks
        self.down: set[str] = set()
        self._listeners: dict[str, Listener] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._queue: collections.deque[tuple[str, Datagram]] = collections.deque()
        self._delivering = False

    # -- the clocks (``clock`` is a manager's Parts.clock) -----------------------------------

    @property
    def clock(self) -> "LanClock":
        return LanClock(self)

    @property
    def now(self) -> float:
        return self.loop.time()

    def wall(self) -> float:
        """The wall clock, in seconds since the epoch: it starts at the real one and moves with ``now``."""
        return self._wall0 + self.now - self.START

    # -- who is on it ------------------------------------------------------------------------

    def _endpoint(self, pid: str) -> Endpoint:
        return self.endpoints.setdefault(pid, Endpoint("127.0.0.1", 40_000 + len(self.endpoints)))

    def transport(self, pid: str) -> "MemoryTransport":
        """The network of the manager whose peer is ``pid``."""
        transport = self.transports[pid] = MemoryTransport(self, pid, self._endpoint(pid))
        return transport

    def add_core(self, core: PeerCore, listener: Listener = ignore) -> None:
        """A bare core on the LAN: its datagrams go out and its timer fires, as a manager's would."""
        self.cores[core.pid] = core
        core.reach.own.add(self._endpoint(core.pid))
        self._listeners[core.pid] = listener

    def run(self, core: PeerCore, action: Callable[[PeerCore], T]) -> T:
        """``action`` on a bare ``core``, then its flush, then every datagram it leads to, until the LAN is quiet."""
        result = action(core)
        self._flush(core)
        self.loop.settle()
        return result

    def settle(self, seconds: float = SETTLE) -> None:
        """Let ``seconds`` of virtual time go by, every peer's timers firing (0: only what is due now)."""
        self.loop.run_until(self.now + seconds)

    def _flush(self, core: PeerCore) -> None:
        turn = core.turn(self.now, self.wall())
        for datagram in turn.datagrams:
            self.send(core.pid, datagram)
        listener = self._listeners[core.pid]
        for event in turn.events:
            listener(event)
        self._arm(core)

    def _arm(self, core: PeerCore) -> None:
        old = self._timers.pop(core.pid, None)
        if old is not None:
            old.cancel()
        at = core.get_timer()
        if at is not None:
            self._timers[core.pid] = self.loop.call_at(at, self._fire, core)

    def _fire(self, core: PeerCore) -> None:
        self._timers.pop(core.pid, None)
        if core.pid in self.down:  # it runs again when it comes back (set_online's resync flushes it)
            return
        core.handle_timer(self.now)
        self._flush(core)

    # -- the datagrams ------------------------------------------------------------------------

    def send(self, sender: str, datagram: Datagram) -> None:
        if sender in self.down:
            return
        self._queue.append((sender, datagram))
        if not self._delivering:
            self._delivering = True
            self.loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        self._delivering = False
        while self._queue:
            sender, (data, destination) = self._queue.popleft()
            if isinstance(destination, Broadcast):
                continue  # multicast reaches everyone here: nobody needs the subnet's broadcasts
            source = self.endpoints[sender]
            for pid in list(self.endpoints):
                if pid == sender or pid in self.down:
                    continue
                if isinstance(destination, Endpoint) and destination != self.endpoints[pid]:
                    continue  # one peer's: to it alone
                core = self.cores.get(pid)
                if core is not None:
                    self._receive(core, data, source, destination)
                elif pid in self.transports:
                    self.transports[pid].receive(data, source, destination)

    def _receive(self, core: PeerCore, data: bytes, source: Endpoint, destination: Endpoint | GroupAddress) -> None:
        if isinstance(destination, Endpoint):
            via = Via.UNICAST
        else:
            via = Via.CONTROL if destination.host == core.control_addr else Via.MULTICAST
        core.receive(data, Arrival(source, via), self.now, self.wall())
        self._flush(core)


class LanClock:
    """A :class:`MemoryLan`'s clocks as a manager reads them (:class:`~middleware.manager.Clock`)."""

    def __init__(self, lan: MemoryLan) -> None:
        self._lan = lan

    def now(self) -> float:
        return self._lan.now

    def wall(self) -> float:
        return self._lan.wall()


class MemoryTransport:
    """A manager's :class:`~middleware.transport.Transport` on a :class:`MemoryLan` (no socket)."""

    def __init__(self, lan: MemoryLan, pid: str, endpoint: Endpoint) -> None:
        self.lan = lan
        self.pid = pid
        self._endpoint = endpoint
        self.endpoint: Endpoint | None = None  # once open, as a socket's
        self.listening: dict[GroupAddress, OnDatagrams] = {}
        self._unicast: OnDatagrams | None = None
        self.datagrams_out = self.bytes_out = 0
        self.closed = False

    async def open(self) -> None:
        self.endpoint = self._endpoint

    async def listen(self, group: GroupAddress, on_datagrams: OnDatagrams) -> None:
        self.listening[group] = on_datagrams

    def listen_unicast(self, on_datagrams: OnDatagrams) -> None:
        self._unicast = on_datagrams

    def listen_broadcast(self, port: int, on_datagrams: OnDatagrams) -> None:
        pass  # the LAN carries no broadcasts (see MemoryLan._deliver)

    def stop_listening(self, group: GroupAddress) -> None:
        self.listening.pop(group, None)

    def send(self, data: bytes, destination: Endpoint | GroupAddress | Broadcast) -> None:
        if self.closed:
            return
        self.datagrams_out += 1
        self.bytes_out += len(data)
        self.lan.send(self.pid, Datagram(data, destination))

    def receive(self, data: bytes, source: Endpoint, destination: Endpoint | GroupAddress) -> None:
        """A datagram the LAN carries here: to the listener of its address, if any."""
        if self.closed:
            return
        on_datagrams = self._unicast if isinstance(destination, Endpoint) else self.listening.get(destination)
        if on_datagrams is not None:
            on_datagrams([(data, source)])

    def close(self) -> None:
        self.closed = True


def memory_parts(lan: MemoryLan, store: PeerStore, files: Callable) -> Parts:
    """A manager's :class:`~middleware.manager.Parts` on ``lan``, over ``store`` (see
    :func:`memory_store`): a :class:`MemoryTransport` for the store's peer, the LAN's clock,
    :func:`cheap_group_key`, no zeroconf and no interfaces to watch; ``files`` makes the file
    service (as ``Parts.files``)."""
    return Parts(store=store, network=lan.transport(store.identity().pid), files=files, discovery=None,
                 clock=lan.clock, derive_key=cheap_group_key, lookup=_no_names, interfaces=None)


def memory_store(identity: Identity | None = None) -> Store:
    """The real SQLite store, on ``:memory:`` (nothing written to disk), for the peer of ``identity``."""
    return Store(Store.IN_MEMORY, identity)


def _no_names(host: str, *_args: object) -> list:
    """``socket.getaddrinfo`` on a LAN where no name resolves."""
    return []


__all__ = ["VirtualTimeLoop", "MemoryLan", "MemoryTransport", "memory_parts", "memory_store", "cheap_group_key"]
