"""The peer's network: the :class:`Transport` seam, and asyncio UDP multicast on one IPv4 interface.

The adapter (:mod:`middleware.manager`) talks to a :class:`Transport`: it
listens on group addresses and gets batches of ``(data, source endpoint)``,
and sends datagrams to a destination (:mod:`middleware.addresses`).
:class:`MulticastNetwork` is the implementation over multicast sockets.

One sending socket per peer (TTL 1, multicast loop on, so peers on one host
hear each other) and one receiving socket per multicast address (the control
channel and each joined group's data channel).  Receiving sockets bind to the
multicast address itself and turn ``IP_MULTICAST_ALL`` off, so the kernel hands
a socket only its own group's datagrams: a host not in a group never
processes that group's traffic.  SO_REUSEADDR/SO_REUSEPORT let several peers
on one host share the ports.  What differs between operating systems (those
socket options, interface flags, link state) is asked of :mod:`middleware.netif`.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import logging
import socket
import struct
from typing import Callable, Protocol

from .addresses import Broadcast, Destination, Endpoint, GroupAddress
from .roaming import NetworkFollower

from . import netif

log = logging.getLogger(__name__)

RECEIVE_BUFFER = 8 * 2**20


class TransportError(OSError):
    """The network could not be set up as asked (bad interface, address in use…)."""


def resolve_interface(iface: str | None) -> str:
    """The IPv4 address to use for ``--iface`` (an address or an interface name).

    Without one: a LAN that is up and multicast capable (never loopback, a virtual bridge or a
    VPN tunnel), the one holding the default route first (:mod:`middleware.roaming`); 127.0.0.1
    when there is none.
    """
    pairs = netif.ipv4_addresses()
    if iface:
        try:
            address = str(ipaddress.IPv4Address(iface))
        except ValueError:
            matches = [addr for name, addr in pairs if name == iface]
            if not matches:
                names = sorted({name for name, _ in pairs})
                raise TransportError(f"no IPv4 interface named {iface!r} (have: {', '.join(names)})") from None
            return matches[0]
        if address not in {addr for _, addr in pairs}:
            raise TransportError(f"{address} is not an address of this host")
        return address
    chosen, _ = NetworkFollower()._choose(netif.interfaces(), netif.route_source())
    return chosen.address if chosen is not None else "127.0.0.1"


def broadcast_addresses(address: str) -> list[str]:
    """The subnet broadcast address of each IPv4 network ``address`` is in (none on loopback
    or a /31 or /32, which have no broadcast)."""
    out = []
    for info in netif.interfaces():
        broadcast = netif.broadcast_of(info.address, info.prefix) if info.address == address else None
        if broadcast is not None:
            out.append(broadcast)
    return out


def interface_name(address: str) -> str | None:
    """The name of the interface that holds ``address``."""
    for name, addr in netif.ipv4_addresses():
        if addr == address:
            return name
    return None


link_is_up = netif.link_is_up


Received = list[tuple[bytes, Endpoint]]
"""A batch of datagrams, each with the endpoint it came from (as the socket saw it)."""


class Transport(Protocol):
    """What the adapter needs of a network: listen on group addresses, send to a destination."""

    datagrams_out: int
    bytes_out: int

    async def open(self) -> None: ...

    endpoint: Endpoint | None  # where this peer receives unicast, once open

    async def listen(self, group: GroupAddress, on_datagrams: Callable[[Received], None]) -> None: ...

    def listen_unicast(self, on_datagrams: Callable[[Received], None]) -> None: ...

    def listen_broadcast(self, port: int, on_datagrams: Callable[[Received], None]) -> None: ...

    def stop_listening(self, group: GroupAddress) -> None: ...

    def send(self, data: bytes, destination: Destination) -> None: ...

    def close(self) -> None: ...


class _Listener:
    """A receiving socket drained in batches straight from the selector.

    asyncio's datagram transport reads one datagram per loop turn; at tens of
    thousands of datagrams a second that turn costs more than the datagram.
    Here each wake-up reads whatever is queued (up to ``BATCH``) and hands it
    over as one list, so the layers above can also commit once per batch.
    """

    BATCH = 512

    def __init__(self, sock: socket.socket, on_datagrams: Callable[[Received], None]) -> None:
        self.sock = sock
        self.on_datagrams = on_datagrams
        self.loop = asyncio.get_running_loop()
        self.loop.add_reader(sock.fileno(), self._read_ready)

    def _read_ready(self) -> None:
        batch = []
        recvfrom = self.sock.recvfrom
        for _ in range(self.BATCH):
            try:
                data, (host, port) = recvfrom(65536)
                batch.append((data, Endpoint(host, port)))
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                log.debug("receive error: %s", exc)
                break
        if batch:
            self.on_datagrams(batch)

    def close(self) -> None:
        self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


# Send failures that say this host is off the network, not that one destination is unreachable.
NETWORK_DOWN = frozenset(getattr(errno, name) for name in ("ENETUNREACH", "ENETDOWN", "EADDRNOTAVAIL", "ENODEV", "ENXIO")
                         if hasattr(errno, name))


class _Outbox:
    """Non-blocking sends on one socket: what the kernel cannot take now waits here, in order,
    until the socket is writable again (as asyncio's datagram transport does, but on a socket
    this module also reads in batches).  Bounded: past ``MAX_BYTES`` the newest give way."""

    MAX_BYTES = 16 * 2**20

    def __init__(self, sock: socket.socket, before: "_Outbox | None" = None) -> None:
        """``before``: the outbox of the socket this one replaces (the peer moved): what waits
        there goes out here, and its counts go on."""
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.waiting: collections.deque[tuple[bytes, tuple[str, int]]] = before.waiting if before else collections.deque()
        self.waiting_bytes: int = before.waiting_bytes if before else 0
        self.dropped: int = before.dropped if before else 0
        self.errors: int = before.errors if before else 0
        # Sends refused by the system, by cause ("Network is unreachable"...): each cause is logged
        # once until a send succeeds again, and counted always (stats' send_failures).
        self.failures: collections.Counter[str] = before.failures if before else collections.Counter()
        self.latest_failure: str | None = None
        self._logged: set[str] = set()
        if self.waiting:
            self.loop.add_writer(sock.fileno(), self._writable)

    def _failed(self, address: tuple[str, int], exc: OSError) -> None:
        # The link is down, the address gone, the host unreachable: the reliability layer repairs
        # once the network is back, and the roaming watch tells the user meanwhile.
        cause = exc.strerror or type(exc).__name__
        self.errors += 1
        self.failures[cause] += 1
        if exc.errno in NETWORK_DOWN:  # not one destination's trouble (a firewall's EPERM, a host's ARP)
            self.latest_failure = cause
        if cause not in self._logged:
            self._logged.add(cause)
            log.warning("cannot send (%s), first to %s:%d; further failures of this cause are counted in "
                        "stats (send_failures), not logged, until a send succeeds", cause, *address)

    def send(self, data: bytes, address: tuple[str, int]) -> bool:
        if not self.waiting:
            try:
                self.sock.sendto(data, address)
                if self._logged:
                    self._logged.clear()
                return True
            except (BlockingIOError, InterruptedError):
                self.loop.add_writer(self.sock.fileno(), self._writable)
            except OSError as exc:
                self._failed(address, exc)
                return False
        if self.waiting_bytes + len(data) > self.MAX_BYTES:
            self.dropped += 1
            return False
        self.waiting.append((data, address))
        self.waiting_bytes += len(data)
        return True

    def _writable(self) -> None:
        while self.waiting:
            data, address = self.waiting[0]
            try:
                self.sock.sendto(data, address)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._failed(address, exc)
            self.waiting.popleft()
            self.waiting_bytes -= len(data)
        self.loop.remove_writer(self.sock.fileno())

    def close(self, keep_waiting: bool = False) -> None:
        """Stop sending; ``keep_waiting``: what waits is handed to the next outbox, not dropped."""
        if self.waiting:
            self.loop.remove_writer(self.sock.fileno())
        if not keep_waiting:
            self.waiting.clear()


class MulticastNetwork:
    """A :class:`Transport` over multicast: a listener per group address, and one socket, this
    peer's unicast endpoint, that sends everything (to groups, to one peer, to the subnet's
    broadcast address) and receives what is sent to this peer alone.  Sending multicast from
    the endpoint makes the source of every datagram a peer sends the place to reach it."""

    def __init__(self, interface: str, unicast_port: int = 0) -> None:
        self.interface = interface
        self.unicast_port = unicast_port
        self._unicast: socket.socket | None = None
        self._outbox: _Outbox | None = None
        self._unicast_listener: _Listener | None = None
        self._broadcast: list[str] = []
        self._broadcast_listening: tuple[int, Callable[[Received], None]] | None = None
        self._on_unicast: Callable[[Received], None] | None = None
        self._listeners: dict[GroupAddress, _Listener] = {}
        self.endpoint: Endpoint | None = None
        self.datagrams_out = 0
        self.bytes_out = 0
        self.unicast_out = 0
        self.broadcast_out = 0
        self._reported_out = 0

    @property
    def send_errors(self) -> int:
        return self._outbox.errors + self._outbox.dropped if self._outbox else 0

    @property
    def send_failures(self) -> dict[str, int]:
        """Sends the system refused, by cause."""
        return dict(self._outbox.failures) if self._outbox else {}

    def send_report(self) -> tuple[str | None, int]:
        """Since the last call: the cause of the latest send refused because this host is off
        the network (:data:`NETWORK_DOWN`; None if none was), and how many datagrams went out."""
        sent, self._reported_out = self.datagrams_out - self._reported_out, self.datagrams_out
        if self._outbox is None:
            return None, sent
        failure, self._outbox.latest_failure = self._outbox.latest_failure, None
        return failure, sent

    async def open(self) -> None:
        """This peer's endpoint: the chosen port where it is free, else one the kernel picks
        (a second peer on one host).  Never shared (no SO_REUSEPORT): unicast to a shared port
        would reach only one of the peers."""
        self._unicast, self.endpoint = self._endpoint_socket(self.unicast_port)
        self._outbox = _Outbox(self._unicast)
        self._broadcast = broadcast_addresses(self.interface)

    def _endpoint_socket(self, port: int) -> tuple[socket.socket, Endpoint]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.interface))
            netif.prepare_endpoint_socket(sock, RECEIVE_BUFFER)
            try:
                sock.bind((self.interface, port))
            except OSError:
                sock.bind((self.interface, 0))
        except OSError as exc:
            sock.close()
            raise TransportError(f"cannot open a UDP socket on {self.interface}: {exc}") from exc
        sock.setblocking(False)
        host, bound_port = sock.getsockname()
        return sock, Endpoint(host, bound_port)

    async def move(self, interface: str) -> None:
        """Rebind to ``interface`` (an IPv4 address of this host), where the peer's address
        changed or it moved to another interface: a new endpoint socket (the same port where it
        is free), every group joined again there, and the new subnet's broadcast listened to.
        Nothing is dropped: what waited to be sent goes from the new socket.  On failure the
        old binding stays, and :class:`TransportError` says why."""
        old_interface = self.interface
        if interface == old_interface:  # the interface came back with the address: free its port first
            self._close_endpoint()
        self.interface = interface
        try:
            sock, endpoint = self._endpoint_socket(self.endpoint.port if self.endpoint else self.unicast_port)
        except TransportError:
            self.interface = old_interface
            raise
        broadcast_keys = {GroupAddress(address, self._broadcast_listening[0])
                          for address in self._broadcast} if self._broadcast_listening else set()
        groups = {group: listener.on_datagrams for group, listener in self._listeners.items()
                  if group not in broadcast_keys}
        before = self._outbox
        self._close_endpoint()
        for listener in self._listeners.values():
            listener.close()
        self._listeners.clear()
        self._unicast, self.endpoint, self._unicast_listener = sock, endpoint, None
        self._outbox = _Outbox(sock, before)
        self._broadcast = broadcast_addresses(interface)
        if self._on_unicast is not None:
            self.listen_unicast(self._on_unicast)
        if self._broadcast_listening is not None:
            self.listen_broadcast(*self._broadcast_listening)
        failed = []
        for group, on_datagrams in groups.items():
            try:
                await self.listen(group, on_datagrams)
            except TransportError as exc:
                failed.append(str(exc))
        if failed:
            raise TransportError("; ".join(failed))

    def _close_endpoint(self) -> None:
        """Close the endpoint socket; its outbox's waiting datagrams are kept for the next one."""
        if self._outbox is not None:
            self._outbox.close(keep_waiting=True)
        if self._unicast_listener is not None:
            self._unicast_listener.close()
        elif self._unicast is not None:
            self._unicast.close()
        self._unicast = self._unicast_listener = None

    def listen_unicast(self, on_datagrams: Callable[[Received], None]) -> None:
        """Receive what is sent to this peer's endpoint, in batches."""
        self._on_unicast = on_datagrams
        if self._unicast is not None and self._unicast_listener is None:
            self._unicast_listener = _Listener(self._unicast, on_datagrams)

    def listen_broadcast(self, port: int, on_datagrams: Callable[[Received], None]) -> None:
        """Receive what is sent to the subnet's broadcast address at ``port`` (shared by every
        peer of the host, like the multicast listeners)."""
        self._broadcast_listening = (port, on_datagrams)
        for address in self._broadcast:
            key = GroupAddress(address, port)
            if key in self._listeners:
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
            try:
                netif.prepare_shared_socket(sock)
                sock.bind((address, port))
            except OSError as exc:
                sock.close()
                log.warning("cannot listen for broadcasts on %s:%d: %s", address, port, exc)
                continue
            sock.setblocking(False)
            self._listeners[key] = _Listener(sock, on_datagrams)

    async def listen(self, group: GroupAddress, on_datagrams: Callable[[Received], None]) -> None:
        """Receive what is sent to ``group``, in batches, until :meth:`stop_listening`."""
        if group in self._listeners:
            return
        port = group.port
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            netif.prepare_group_socket(sock, RECEIVE_BUFFER)
            sock.bind((netif.group_bind_address(group.host), port))
            membership = struct.pack("4s4s", socket.inet_aton(group.host), socket.inet_aton(self.interface))
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        except OSError as exc:
            sock.close()
            raise TransportError(f"cannot join multicast group {group} on {self.interface}: {exc}") from exc
        sock.setblocking(False)
        self._listeners[group] = _Listener(sock, on_datagrams)

    def stop_listening(self, group: GroupAddress) -> None:
        listener = self._listeners.pop(group, None)
        if listener is not None:
            listener.close()

    def send(self, data: bytes, destination: Destination) -> None:
        outbox = self._outbox
        if outbox is None:
            return
        if type(destination) is Broadcast:
            sent = sum(outbox.send(data, (address, destination.port)) for address in self._broadcast)
            if not sent:
                return
            self.broadcast_out += sent
        else:
            assert type(destination) is GroupAddress or type(destination) is Endpoint
            if not outbox.send(data, (destination.host, destination.port)):
                return
            if type(destination) is Endpoint:
                self.unicast_out += 1
        self.datagrams_out += 1
        self.bytes_out += len(data)

    def close(self) -> None:
        for listener in self._listeners.values():
            listener.close()
        self._listeners.clear()
        if self._outbox is not None:
            self._outbox.close()
        if self._unicast_listener is not None:
            self._unicast_listener.close()
        elif self._unicast is not None:
            self._unicast.close()
        self._unicast = self._unicast_listener = self._outbox = None
