"""What the middleware asks of the operating system's network: interface addresses, flags and
link state, and the options of a socket that receives one multicast group.

:class:`LinuxNetwork` reads ``/sys/class/net`` and sets Linux-only socket options
(``IP_MULTICAST_ALL``, ``SO_RCVBUFFORCE``).
"""

from __future__ import annotations

import socket
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
        except OSError:
            return True

    def prepare_group_socket(self, sock: socket.socket, buffer: int) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:  # as root, past net.core.rmem_max: bursts of a fast sender fit
            sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, buffer)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer)
        # Bound to the group's address, the socket already gets only that group; this also
        # keeps out the groups that other sockets of the process joined on the same port.
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)

    def group_bind_address(self, group: str) -> str:
        return group


SYSTEM: NetworkCalls = LinuxNetwork()
ipv4_addresses = SYSTEM.ipv4_addresses
multicast_capable = SYSTEM.multicast_capable
link_is_up = SYSTEM.link_is_up
prepare_group_socket = SYSTEM.prepare_group_socket
group_bind_address = SYSTEM.group_bind_address
