"""middleware.netif: the Linux and the portable calls agree on this host, the portable ones read
what Windows and macOS report, and M2MC_PORTABLE / M2MC_PURE_PYTHON choose the fallbacks at import.

Sockets here are made and inspected, never bound or sent on.
"""

import json
import socket
import subprocess
import sys
from types import SimpleNamespace

import psutil
import pytest

from m2mc.app.cli import default_data_dir
from m2mc.middleware import netif
from m2mc.middleware.netif import LinuxNetwork, PortableNetwork

LINUX, PORTABLE = LinuxNetwork(), PortableNetwork(windows=False)


def test_both_implementations_agree_on_this_hosts_interfaces():
    pairs = LINUX.ipv4_addresses()
    assert pairs and PORTABLE.ipv4_addresses() == pairs
    for name in {name for name, _ in pairs}:
        assert PORTABLE.multicast_capable(name) == LINUX.multicast_capable(name), name
        assert PORTABLE.link_is_up(name) == LINUX.link_is_up(name), name
    assert not PORTABLE.multicast_capable("lo") and not LINUX.multicast_capable("lo")


def test_an_unknown_interface_counts_as_up_but_is_never_chosen():
    for calls in (LINUX, PORTABLE):
        assert calls.link_is_up("m2mc-no-such-if")
        assert not calls.multicast_capable("m2mc-no-such-if")


def stats(isup: bool, flags: str) -> SimpleNamespace:
    """The fields of psutil's snicstats that netif reads."""
    return SimpleNamespace(isup=isup, flags=flags)


def test_portable_calls_read_windows_adapters_which_report_no_flags(monkeypatch):
    windows = PortableNetwork(windows=True)
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {
        "Ethernet": stats(True, ""), "Wi-Fi": stats(False, ""), "Loopback Pseudo-Interface 1": stats(True, ""),
    })
    monkeypatch.setattr(windows, "ipv4_addresses", lambda: [
        ("Loopback Pseudo-Interface 1", "127.0.0.1"), ("Ethernet", "192.168.1.20"), ("Wi-Fi", "192.168.1.21"),
    ])
    assert windows.multicast_capable("Ethernet")
    assert not windows.multicast_capable("Loopback Pseudo-Interface 1")
    assert not windows.multicast_capable("Wi-Fi")  # no link
    assert windows.link_is_up("Ethernet") and not windows.link_is_up("Wi-Fi")


def test_portable_calls_read_posix_flags(monkeypatch):
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {
        "en0": stats(True, "up,broadcast,running,multicast"),
        "utun0": stats(True, "up,pointopoint,running"),  # a VPN tunnel: no multicast
        "lo0": stats(True, "up,loopback,running,multicast"),
        "en1": stats(False, "up,broadcast,multicast"),  # cable out: not running
    })
    assert [name for name in ("en0", "utun0", "lo0", "en1") if PORTABLE.multicast_capable(name)] == ["en0"]
    assert not PORTABLE.link_is_up("en1") and PORTABLE.link_is_up("en0")


def test_group_sockets_get_only_options_the_system_has(monkeypatch):
    reuseport = socket.SO_REUSEPORT
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        LINUX.prepare_group_socket(sock, 1 << 20)
        assert sock.getsockopt(socket.SOL_SOCKET, reuseport) == 1
        assert sock.getsockopt(socket.IPPROTO_IP, netif.IP_MULTICAST_ALL) == 0
    assert LINUX.group_bind_address("239.1.2.3") == "239.1.2.3"

    monkeypatch.delattr(socket, "SO_REUSEPORT")  # as on Windows
    windows = PortableNetwork(windows=True)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        windows.prepare_group_socket(sock, 1 << 20)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, reuseport) == 0
        assert sock.getsockopt(socket.IPPROTO_IP, netif.IP_MULTICAST_ALL) == 1  # Linux's default, left alone
    assert windows.group_bind_address("239.1.2.3") == ""
    assert PORTABLE.group_bind_address("239.1.2.3") == "239.1.2.3"


CHOSEN = """
import json
from m2mc.middleware import crypto, mop, netif, transport
print(json.dumps([netif.SYSTEM.name, transport.link_is_up == netif.SYSTEM.link_is_up, crypto.COMPILED, mop.COMPILED]))
"""


@pytest.mark.parametrize("env, chosen", [
    ({}, ["linux", True, True, True]),
    ({"M2MC_PORTABLE": "0"}, ["linux", True, True, True]),
    ({"M2MC_PORTABLE": "1"}, ["portable", True, True, True]),
    ({"M2MC_PORTABLE": "1", "M2MC_PURE_PYTHON": "1"}, ["portable", True, False, False]),
])
def test_the_fallbacks_are_chosen_at_import(env, chosen):
    environ = {"PATH": "/usr/bin:/bin", **env}
    out = subprocess.run([sys.executable, "-c", CHOSEN], env=environ, capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == chosen


def test_the_default_data_dir_follows_the_platforms_convention(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_data_dir() == tmp_path / "m2mc"


class RefusingSocket:
    """A socket that refuses buffers past ``limit`` bytes, as macOS does past kern.ipc.maxsockbuf."""

    def __init__(self, limit: int) -> None:
        self.limit, self.options = limit, {}

    def setsockopt(self, level: int, option: int, value: int) -> None:
        if option in (socket.SO_RCVBUF, socket.SO_SNDBUF) and value > self.limit:
            raise OSError(55, "No buffer space available")
        self.options[option] = value


def test_a_buffer_the_system_refuses_is_asked_for_again_smaller():
    sock = RefusingSocket(limit=7_000_000)
    assert netif.request_buffer(sock, socket.SO_SNDBUF, 8 * 2**20) == 4 * 2**20
    PORTABLE.prepare_group_socket(sock, 8 * 2**20)
    assert sock.options[socket.SO_RCVBUF] == 4 * 2**20
    with pytest.raises(OSError):
        netif.request_buffer(RefusingSocket(limit=1000), socket.SO_RCVBUF, 8 * 2**20)


def test_the_broadcast_listener_asks_netif_for_port_sharing_so_windows_gets_no_reuseport(monkeypatch):
    """Windows' socket module has no SO_REUSEPORT: reading it raised AttributeError, which the
    transport's ``except OSError`` did not catch, so a peer there could not start."""
    import asyncio

    from m2mc.middleware import transport

    monkeypatch.delattr(socket, "SO_REUSEPORT")
    monkeypatch.setattr(netif, "prepare_shared_socket", PortableNetwork(windows=True).prepare_shared_socket)

    async def listen() -> list:
        network = transport.MulticastNetwork("127.0.0.1")
        network._broadcast = ["127.0.0.1"]  # a subnet's broadcast address, as broadcast_addresses() finds it
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        network.listen_broadcast(port, lambda received: None)
        try:
            return list(network._listeners)
        finally:
            network.close()

    assert [group.host for group in asyncio.run(listen())] == ["127.0.0.1"]
