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
on one host share the ports.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import struct
from pathlib import Path
from typing import Callable, Protocol

from .addresses import Destination, Endpoint, GroupAddress

log = logging.getLogger(__name__)

IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
RECEIVE_BUFFER = 8 * 2**20
IFF_UP, IFF_LOOPBACK, IFF_MULTICAST = 0x1, 0x8, 0x1000


class TransportError(OSError):
    """The network could not be set up as asked (bad interface, address in use…)."""


def _interface_flags(name: str) -> int:
    try:
        return int(Path(f"/sys/class/net/{name}/flags").read_text(), 16)
    except (OSError, ValueError):
        return 0


def _ipv4_addresses() -> list[tuple[str, str]]:
    """``(interface name, IPv4 address)`` pairs, in the kernel's interface order."""
    import ifaddr  # zeroconf's own dependency, so always present

    pairs = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str):
                pairs.append((adapter.name, ip.ip))
    return pairs


def resolve_interface(iface: str | None) -> str:
    """The IPv4 address to use for ``--iface`` (an address or an interface name).

    Without one: the first interface that is up, not loopback and multicast
    capable; 127.0.0.1 when there is none.
    """
    pairs = _ipv4_addresses()
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
        flags = _interface_flags(name)
        if flags & IFF_UP and flags & IFF_MULTICAST and not flags & IFF_LOOPBACK:
            return addr
    return "127.0.0.1"


def interface_name(address: str) -> str | None:
    """The name of the interface that holds ``address``."""
    for name, addr in _ipv4_addresses():
        if addr == address:
            return name
    return None


def link_is_up(name: str) -> bool:
    """Whether ``name`` has carrier (loopback and unknown interfaces count as up)."""
    try:
        return Path(f"/sys/class/net/{name}/carrier").read_text().strip() != "0"
    except OSError:
        return True


Received = list[tuple[bytes, Endpoint]]
"""A batch of datagrams, each with the endpoint it came from (as the socket saw it)."""


class Transport(Protocol):
    """What the adapter needs of a network: listen on group addresses, send to a destination."""

    datagrams_out: int
    bytes_out: int

    async def open(self) -> None: ...

    async def listen(self, group: GroupAddress, on_datagrams: Callable[[Received], None]) -> None: ...

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


class _Sender(asyncio.DatagramProtocol):
    def error_received(self, exc: Exception) -> None:
        # A send that failed (e.g. the link is down): the reliability layer repairs it.
        log.debug("send error: %s", exc)


class MulticastNetwork:
    """A :class:`Transport` over multicast: one sending socket, and a listener per group address."""

    def __init__(self, interface: str) -> None:
        self.interface = interface
        self._sender: asyncio.DatagramTransport | None = None
        self._listeners: dict[GroupAddress, _Listener] = {}
        self.datagrams_out = 0
        self.bytes_out = 0

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(self.interface))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, RECEIVE_BUFFER)
            sock.bind((self.interface, 0))
        except OSError as exc:
            sock.close()
            raise TransportError(f"cannot send multicast from {self.interface}: {exc}") from exc
        sock.setblocking(False)
        self._sender, _ = await loop.create_datagram_endpoint(_Sender, sock=sock)

    async def listen(self, group: GroupAddress, on_datagrams: Callable[[Received], None]) -> None:
        """Receive what is sent to ``group``, in batches, until :meth:`stop_listening`."""
        if group in self._listeners:
            return
        port = group.port
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            try:  # as root, past net.core.rmem_max: bursts of a fast sender fit
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUFFORCE, RECEIVE_BUFFER)
            except (OSError, AttributeError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
            sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
            sock.bind((group.host, port))
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
        if self._sender is None or self._sender.is_closing():
            return
        self._sender.sendto(data, (destination.host, destination.port))
        self.datagrams_out += 1
        self.bytes_out += len(data)

    def close(self) -> None:
        for listener in self._listeners.values():
            listener.close()
        self._listeners.clear()
        if self._sender is not None:
            self._sender.close()
