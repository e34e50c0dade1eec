"""What the middleware asks of the operating system's network: interface addresses, flags,
link state and kind (a LAN, a virtual bridge, a tunnel), the route's choice of source address,
and the options of a socket that receives one multicast group.

Two implementations answer the same calls.  :class:`LinuxNetwork` reads ``/sys/class/net`` and
sets Linux-only socket options (``IP_MULTICAST_ALL``, ``SO_RCVBUFFORCE``).  :class:`PortableNetwork`
uses only what Windows and macOS have as well: ``ifaddr`` for addresses, ``psutil`` for interface
state and flags, and the socket options the ``socket`` module offers there.  One is chosen at
import: the Linux one on Linux, the portable one elsewhere or when ``M2MC_PORTABLE=1`` forces it
(the tests force it, so the path other systems take is run on Linux too).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

# Linux-only options, by their Linux numbers where the socket module (or its type stubs) lacks them.
IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
IFF_UP, IFF_LOOPBACK, IFF_POINTOPOINT, IFF_MULTICAST = 0x1, 0x8, 0x10, 0x1000

LAN, VIRTUAL, TUNNEL, LOOPBACK = "lan", "virtual", "tunnel", "loopback"
# Interfaces a chat must not pick while a LAN is up, by the names their makers give them:
# container and VM bridges and their links (Linux, macOS, Windows' Hyper-V switch), and VPN
# tunnels (OpenVPN's tun/tap, WireGuard, Tailscale, ZeroTier, macOS' utun, PPP, IPsec).  A tunnel
# is also known by its point-to-point flag, whatever its name.
VIRTUAL_PREFIXES = ("veth", "docker", "br-", "virbr", "vmnet", "vboxnet", "lxcbr", "lxdbr", "cni", "flannel",
                    "podman", "vethernet", "bridge", "anpi", "awdl", "llw")
TUNNEL_PREFIXES = ("tun", "tap", "wg", "tailscale", "utun", "ppp", "zt", "ipsec", "gpd", "nordlynx", "proton",
                   "ham", "wireguard", "openvpn")


@dataclass(frozen=True, slots=True)
class InterfaceInfo:
    """One IPv4 address of one interface, as the network is now."""

    name: str
    address: str
    prefix: int  # the network's prefix length
    up: bool  # switched on and with a link
    multicast: bool
    kind: str  # LAN, VIRTUAL, TUNNEL or LOOPBACK

    @property
    def usable_lan(self) -> bool:
        """A LAN a chat may use: up, multicast-capable, neither loopback, virtual nor a tunnel."""
        return self.up and self.multicast and self.kind == LAN


def interface_kind(name: str, address: str, pointopoint: bool = False) -> str:
    """What an interface is, from its name, address and point-to-point flag (portable: no
    system call)."""
    lowered = name.lower()
    if address.startswith("127.") or lowered in ("lo", "lo0") or lowered.startswith("loopback"):
        return LOOPBACK
    if pointopoint or lowered.startswith(TUNNEL_PREFIXES):
        return TUNNEL
    if lowered.startswith(VIRTUAL_PREFIXES):
        return VIRTUAL
    return LAN


def route_source(destination: str = "198.51.100.1") -> str | None:
    """The address this host would send from toward ``destination``, by its routes: a UDP socket's
    ``connect`` picks the route and the source address and sends nothing.  The default
    (TEST-NET-2, RFC 5737) is routed by no specific route, so this is the default route's
    interface.  None where there is no route (a host offline, a namespace with none)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.connect((destination, 9))
        address = sock.getsockname()[0]
    except OSError:
        return None
    finally:
        sock.close()
    return None if address == "0.0.0.0" else address


class NetworkCalls(Protocol):
    name: str

    def interfaces(self) -> list[InterfaceInfo]:
        """Every IPv4 address of every interface, in the system's interface order."""

    def ipv4_addresses(self) -> list[tuple[str, str]]:
        """``(interface name, IPv4 address)`` pairs, in the system's interface order."""

    def multicast_capable(self, interface: str) -> bool:
        """Whether ``interface`` is up, carries multicast and is not loopback (a LAN to pick by default)."""

    def link_is_up(self, interface: str) -> bool:
        """Whether ``interface`` has a link (loopback and unknown interfaces count as up)."""

    def prepare_shared_socket(self, sock: socket.socket) -> None:
        """Let every peer of the host bind ``sock``'s port too (group and broadcast listeners)."""

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


def _ifaddr_rows(friendly_names: bool) -> list[tuple[str, str, int]]:
    """``(interface name, IPv4 address, prefix length)`` of every IPv4 address."""
    import ifaddr  # zeroconf's own dependency, so always present

    rows = []
    for adapter in ifaddr.get_adapters():
        name = adapter.nice_name if friendly_names else adapter.name
        for ip in adapter.ips:
            if isinstance(ip.ip, str):
                rows.append((name, ip.ip, ip.network_prefix))
    return rows


def _ifaddr_pairs(friendly_names: bool) -> list[tuple[str, str]]:
    return [(name, address) for name, address, _ in _ifaddr_rows(friendly_names)]


def broadcast_of(address: str, prefix: int) -> str | None:
    """The broadcast address of ``address``'s network (none on loopback, /31 or /32)."""
    if prefix >= 31:
        return None
    network = ipaddress.IPv4Network(f"{address}/{prefix}", strict=False)
    return None if network.is_loopback else str(network.broadcast_address)


class LinuxNetwork:
    name = "linux"

    def __init__(self, sys_class_net: Path = Path("/sys/class/net")) -> None:
        self.sys_class_net = sys_class_net

    def ipv4_addresses(self) -> list[tuple[str, str]]:
        return _ifaddr_pairs(friendly_names=False)

    def interfaces(self) -> list[InterfaceInfo]:
        out = []
        for name, address, prefix in _ifaddr_rows(friendly_names=False):
            flags = self._flags(name)
            kind = interface_kind(name, address, bool(flags & IFF_POINTOPOINT))
            if kind == LAN and (self.sys_class_net / name / "tun_flags").exists():  # a tun/tap by any name
                kind = TUNNEL
            out.append(InterfaceInfo(name, address, prefix, bool(flags & IFF_UP) and self.link_is_up(name),
                                     bool(flags & IFF_MULTICAST), kind))
        return out

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

    def prepare_shared_socket(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)

    def prepare_group_socket(self, sock: socket.socket, buffer: int) -> None:
        self.prepare_shared_socket(sock)
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

    def interfaces(self) -> list[InterfaceInfo]:
        import psutil

        stats = psutil.net_if_stats()
        out = []
        for name, address, prefix in _ifaddr_rows(friendly_names=True):
            stat = stats.get(name)
            flags = set(stat.flags.split(",")) if stat is not None and stat.flags else set()
            # Windows reports no flags: every adapter but loopback carries multicast there.
            multicast = "multicast" in flags if flags else not address.startswith("127.")
            out.append(InterfaceInfo(name, address, prefix, stat is not None and bool(stat.isup), multicast,
                                     interface_kind(name, address, "pointopoint" in flags)))
        return out

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

    def prepare_shared_socket(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):  # the BSDs and macOS share a port only with it; Windows has none
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)

    def prepare_group_socket(self, sock: socket.socket, buffer: int) -> None:
        self.prepare_shared_socket(sock)
        request_buffer(sock, socket.SO_RCVBUF, buffer)

    def group_bind_address(self, group: str) -> str:
        # Windows cannot bind to a multicast address; it filters by each socket's own memberships instead.
        return "" if self.windows else group


def forced_portable(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``M2MC_PORTABLE`` asks for :class:`PortableNetwork` even on Linux."""
    return environ.get("M2MC_PORTABLE", "") not in ("", "0")


SYSTEM: NetworkCalls = LinuxNetwork() if sys.platform == "linux" and not forced_portable() else PortableNetwork()
ipv4_addresses = SYSTEM.ipv4_addresses
interfaces = SYSTEM.interfaces
multicast_capable = SYSTEM.multicast_capable
link_is_up = SYSTEM.link_is_up
prepare_shared_socket = SYSTEM.prepare_shared_socket
prepare_group_socket = SYSTEM.prepare_group_socket
group_bind_address = SYSTEM.group_bind_address
prepare_endpoint_socket = SYSTEM.prepare_endpoint_socket
