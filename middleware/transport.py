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
import ipaddress
import logging
import socket
import struct
from typing import Callable, Protocol

from .addresses import Broadcast, Destination, Endpoint, GroupAddress

from . import netif

log = logging.getLogger(__name__)

RECEIVE_BUFFER = 8 * 2**20


class TransportError(OSError):
    """The network could not be set up as asked (bad interface, address in use…)."""


def resolve_interface(iface: str | None) -> str:
    """The IPv4 address to use for ``--iface`` (an address or an interface name).

    Without one: the first interface that is up, not loopback and multicast
    capable; 127.0.0.1 when there is none.
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
    for name, addr in pairs:
        if netif.multicast_capable(name):
            return addr
    return "127.0.0.1"


def broadcast_addresses(address: str) -> list[str]:
    """The subnet broadcast address of each IPv4 network ``address`` is in (none on loopback
    or a /31 or /32, which have no broadcast)."""
    import ifaddr

    out = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if ip.ip != address or not isinstance(ip.ip, str) or ip.network_prefix >= 31:
                continue
            network = ipaddress.IPv4Network(f"{ip.ip}/{ip.network_prefix}", strict=False)
            if not network.is_loopback:
                out.append(str(network.broadcast_address))
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


class _Outbox:
    """Non-blocking sends on one socket: what the kernel cannot take now waits here, in order,
    until the socket is writable again (as asyncio's datagram transport does, but on a socket
    this module also reads in batches).  Bounded: past ``MAX_BYTES`` the newest give way."""

    MAX_BYTES = 16 * 2**20

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.waiting: collections.deque[tuple[bytes, tuple[str, int]]] = collections.deque()
        self.waiting_bytes = 0
        self.dropped = 0
        self.errors = 0

    def send(self, data: bytes, address: tuple[str, int]) -> bool:
        if not self.waiting:
            try:
                self.sock.sendto(data, address)
                return True
            except (BlockingIOError, InterruptedError):
                self.loop.add_writer(self.sock.fileno(), self._writable)
            except OSError as exc:  # the link is down, or the host unreachable: the reliability layer repairs
                self.errors += 1
                log.debug("send to %s:%d failed: %s", *address, exc)
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
                self.errors += 1
                log.debug("send to %s:%d failed: %s", *address, exc)
            self.waiting.popleft()
            self.waiting_bytes -= len(data)
        self.loop.remove_writer(self.sock.fileno())

    def close(self) -> None:
        if self.waiting:
            self.loop.remove_writer(self.sock.fileno())
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
        self._listeners: dict[GroupAddress, _Listener] = {}
        self.endpoint: Endpoint | None = None
        self.datagrams_out = 0
        self.bytes_out = 0
        self.unicast_out = 0
        self.broadcast_out = 0

    @property
    def send_errors(self) -> int:
        return self._outbox.errors + self._outbox.dropped if self._outbox else 0

    async def open(self) -> None:
        """This peer's endpoint: the chosen port where it is free, else one the kernel picks
        (a second peer on one host).  Never shared (no SO_REUSEPORT): unicast to a shared port
        would reach only one of the peers."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.interface))
            netif.prepare_endpoint_socket(sock, RECEIVE_BUFFER)
            try:
                sock.bind((self.interface, self.unicast_port))
            except OSError:
                sock.bind((self.interface, 0))
        except OSError as exc:
            sock.close()
            raise TransportError(f"cannot open a UDP socket on {self.interface}: {exc}") from exc
        sock.setblocking(False)
        self._unicast = sock
        self._outbox = _Outbox(sock)
        host, port = sock.getsockname()
        self.endpoint = Endpoint(host, port)
        self._broadcast = broadcast_addresses(self.interface)

    def listen_unicast(self, on_datagrams: Callable[[Received], None]) -> None:
        """Receive what is sent to this peer's endpoint, in batches."""
        if self._unicast is not None and self._unicast_listener is None:
            self._unicast_listener = _Listener(self._unicast, on_datagrams)

    def listen_broadcast(self, port: int, on_datagrams: Callable[[Received], None]) -> None:
        """Receive what is sent to the subnet's broadcast address at ``port`` (shared by every
        peer of the host, like the multicast listeners)."""
        for address in self._broadcast:
            key = GroupAddress(address, port)
            if key in self._listeners:
                continue
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
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
