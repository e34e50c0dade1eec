"""What the middleware asks of the operating system's network: interface addresses, flags and
link state, and the options of a socket that receives one multicast group.

Two implementations answer the same calls.  :class:`LinuxNetwork` reads ``/sys/class/net`` and
sets Linux-only socket options (``IP_MULTICAST_ALL``, ``SO_RCVBUFFORCE``).  :class:`PortableNetwork`
uses only what Windows and macOS have as well: ``ifaddr`` for addresses, ``psutil`` for interface
state and flags, and the socket options the ``socket`` module offers there.  One is chosen at
import: the Linux one on Linux, the portable one elsewhere or when ``M2MC_PORTABLE=1`` forces it
(the tests force it, so the path other systems take is run on Linux too).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

# Linux-only options, by their Linux numbers where the socket module (or its type stubs) lacks them.
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
IFF_UP, IFF_LOOPBACK, IFF_MULTICAST = 0x1, 0x8, 0x1000


class NetworkCalls(Protocol):
    name: str

    def ipv4_addresses(self) -> list[tuple[str, str]]:
        """``(interface name, IPv4 address)`` pairs, in the system's interface order."""

    def multicast_capable(self, interface: str) -> bool:
        """Whether ``interface`` is up, carries multicast and is not loopback (a LAN to pick by default)."""

    def link_is_up(self, interface: str) -> bool:
        """Whether ``interface`` has a link (loopback and unknown interfaces count as up)."""

    def prepare_group_socket(self, sock: socket.socket, buffer: int) -> None:
        """Set what a socket receiving one group needs before it binds: port sharing, a ``buffer``-byte queue."""

    def group_bind_address(self, group: str) -> str:
        """The address a socket receiving ``group`` binds to."""

    def prepare_endpoint_socket(self, sock: socket.socket, buffer: int) -> None:
        """Set what the peer's own socket needs (it sends everything, to groups, peers and the
        subnet's broadcast address, and receives unicast): ``buffer``-byte queues both ways."""


SMALLEST_BUFFER = 64 * 1024


def request_buffer(sock: socket.socket, option: int, size: int) -> int:
    """Ask for a ``size``-byte socket buffer (``SO_RCVBUF`` or ``SO_SNDBUF``), halving it while the
    system refuses; returns the size asked for last.

    Linux and Windows grant less without a word; macOS refuses (ENOBUFS) what is past
    ``kern.ipc.maxsockbuf``, 8 MiB less its bookkeeping by default.
    """
    while True:
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, size)
            return size
        except OSError:
            if size <= SMALLEST_BUFFER:
                raise
            size //= 2


def _ifaddr_pairs(friendly_names: bool) -> list[tuple[str, str]]:
    import ifaddr  # zeroconf's own dependency, so always present

    pairs = []
    for adapter in ifaddr.get_adapters():
        name = adapter.nice_name if friendly_names else adapter.name
        for ip in adapter.ips:
            if isinstance(ip.ip, str):
                pairs.append((name, ip.ip))
    return pairs


class LinuxNetwork:
    name = "linux"

    def __init__(self, sys_class_net: Path = Path("/sys/class/net")) -> None:
        self.sys_class_net = sys_class_net

    def ipv4_addresses(self) -> list[tuple[str, str]]:
        return _ifaddr_pairs(friendly_names=False)

    def _flags(self, interface: str) -> int:
        try:
            return int((self.sys_class_net / interface / "flags").read_text(), 16)
        except (OSError, ValueError):
            return 0

    def multicast_capable(self, interface: str) -> bool:
        flags = self._flags(interface)
        return bool(flags & IFF_UP and flags & IFF_MULTICAST and not flags & IFF_LOOPBACK)

    def link_is_up(self, interface: str) -> bool:
        try:
            return (self.sys_class_net / interface / "carrier").read_text().strip() != "0"
        except OSError:  # switched off (ip link set down), it has no carrier to read; gone, it counts as up
            return not (self.sys_class_net / interface).exists()

    def prepare_endpoint_socket(self, sock: socket.socket, buffer: int) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        request_buffer(sock, socket.SO_SNDBUF, buffer)
        try:  # as root, past net.core.rmem_max
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, buffer)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)

    def prepare_group_socket(self, sock: socket.socket, buffer: int) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:  # as root, past net.core.rmem_max: bursts of a fast sender fit
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, buffer)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
        # Only the groups this socket joined: by default Linux also hands it any group joined
        # elsewhere on the host whose datagrams match its binding.
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)

    def group_bind_address(self, group: str) -> str:
        return group


class PortableNetwork:
    """Windows, macOS and the BSDs: ifaddr and psutil, and only socket options the system has."""

    name = "portable"

    def __init__(self, windows: bool = os.name == "nt") -> None:
        self.windows = windows

    def ipv4_addresses(self) -> list[tuple[str, str]]:
        # Windows names an adapter by a GUID and shows (and psutil reports) its friendly name,
        # e.g. "Ethernet": --iface takes that one. Elsewhere the two are the same.
        return _ifaddr_pairs(friendly_names=True)

    def multicast_capable(self, interface: str) -> bool:
        import psutil

        stats = psutil.net_if_stats().get(interface)
        if stats is None or not stats.isup:
            return False
        flags = set(stats.flags.split(",")) if stats.flags else set()
        if flags:  # POSIX systems report them
            return "multicast" in flags and "loopback" not in flags
        # Windows reports no flags: only the loopback adapter's addresses are 127/8.
        return not any(name == interface and address.startswith("127.") for name, address in self.ipv4_addresses())

    def link_is_up(self, interface: str) -> bool:
        import psutil

        stats = psutil.net_if_stats().get(interface)
        return True if stats is None else bool(stats.isup)

    def prepare_endpoint_socket(self, sock: socket.socket, buffer: int) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        request_buffer(sock, socket.SO_SNDBUF, buffer)
        request_buffer(sock, socket.SO_RCVBUF, buffer)

    def prepare_group_socket(self, sock: socket.socket, buffer: int) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):  # the BSDs and macOS share a port only with it; Windows has none
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        request_buffer(sock, socket.SO_RCVBUF, buffer)

    def group_bind_address(self, group: str) -> str:
        # Windows cannot bind to a multicast address; it filters by each socket's own memberships instead.
        return "" if self.windows else group


def forced_portable(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``M2MC_PORTABLE`` asks for :class:`PortableNetwork` even on Linux."""
    return environ.get("M2MC_PORTABLE", "") not in ("", "0")


SYSTEM: NetworkCalls = LinuxNetwork() if sys.platform == "linux" and not forced_portable() else PortableNetwork()
ipv4_addresses = SYSTEM.ipv4_addresses
multicast_capable = SYSTEM.multicast_capable
link_is_up = SYSTEM.link_is_up
prepare_group_socket = SYSTEM.prepare_group_socket
group_bind_address = SYSTEM.group_bind_address
prepare_endpoint_socket = SYSTEM.prepare_endpoint_socket
