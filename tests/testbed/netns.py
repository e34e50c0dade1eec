"""Private network namespaces: a LAN on one machine, for tests, demos and benchmarks.

Everything our multicast and mDNS send stays inside namespaces made here and
deleted afterwards (``close``), never on the machine's real interfaces.  Names
and subnets are unique per process, so parallel runs do not collide.  Needs root.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import uuid

_run_tag = uuid.uuid4().hex[:6]
_counter = itertools.count(1)


class NetnsError(RuntimeError):
    pass


def can_make_namespaces() -> bool:
    return os.geteuid() == 0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


class Lan:
    """``hosts`` namespaces joined by veth pairs to a bridge in a namespace of its own."""

    def __init__(self, hosts: int) -> None:
        if not can_make_namespaces():
            raise NetnsError("making network namespaces needs root")
        n = next(_counter)
        self.prefix = f"m2{_run_tag}{n}"
        self.subnet = f"10.{200 + (os.getpid() % 50)}.{n % 250}"
        self.hub = f"{self.prefix}hub"
        self.hosts: list[str] = []
        self.addresses: list[str] = []
        self._processes: list[subprocess.Popen] = []
        try:
            _ip("netns", "add", self.hub)
            _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.hub, "link", "set", "br0", "up")
            for i in range(1, hosts + 1):
                self.add_host(i)
        except Exception:
            self.close()
            raise

    def add_host(self, i: int) -> None:
        host = f"{self.prefix}h{i}"
        _ip("netns", "add", host)
        self.hosts.append(host)
        _ip("link", "add", f"v{self.prefix}{i}", "netns", host, "type", "veth", "peer", "name", f"port{i}", "netns", self.hub)
        _ip("-n", self.hub, "link", "set", f"port{i}", "master", "br0")
        _ip("-n", self.hub, "link", "set", f"port{i}", "up")
        address = f"{self.subnet}.{i}"
        _ip("-n", host, "addr", "add", f"{address}/24", "dev", f"v{self.prefix}{i}")
        _ip("-n", host, "link", "set", f"v{self.prefix}{i}", "up")
        _ip("-n", host, "link", "set", "lo", "up")
        _ip("-n", host, "route", "add", "224.0.0.0/4", "dev", f"v{self.prefix}{i}")
        self.addresses.append(address)

    def run(self, index: int, argv: list[str]) -> subprocess.Popen:
        """Start ``argv`` on host ``index``; close() stops it if it is still running."""
        process = subprocess.Popen(["ip", "netns", "exec", self.hosts[index], *argv])
        self._processes.append(process)
        return process

    def __enter__(self) -> "Lan":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def set_loss(self, index: int, probability: float, protocols: tuple[str, ...] = ("udp",)) -> None:
        """Drop incoming packets of ``protocols`` at random inside host ``index`` (kernel-level loss, iptables)."""
        host = self.hosts[index]
        subprocess.run(["ip", "netns", "exec", host, "iptables", "-F", "INPUT"], check=True, capture_output=True)
        for protocol in protocols if probability > 0 else ():
            subprocess.run(
                ["ip", "netns", "exec", host, "iptables", "-A", "INPUT", "-p", protocol, "-m", "statistic",
                 "--mode", "random", "--probability", str(probability), "-j", "DROP"],
                check=True, capture_output=True, text=True,
            )

    def set_link(self, index: int, up: bool) -> None:
        """Cut a host off the LAN (or reconnect it) at the bridge port."""
        _ip("-n", self.hub, "link", "set", f"port{index + 1}", "up" if up else "down")

    def close(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for host in self.hosts:
            _ip("netns", "del", host, check=False)
        _ip("netns", "del", self.hub, check=False)


class LoopbackHost:
    """One namespace with only ``lo``, multicast routed to it."""

    def __init__(self) -> None:
        if not can_make_namespaces():
            raise NetnsError("making network namespaces needs root")
        self.name = f"m2{_run_tag}{next(_counter)}lo"
        _ip("netns", "add", self.name)
        try:
            _ip("-n", self.name, "link", "set", "lo", "up")
            _ip("-n", self.name, "link", "set", "lo", "multicast", "on")
            _ip("-n", self.name, "route", "add", "224.0.0.0/4", "dev", "lo")
        except Exception:
            self.close()
            raise
        self.address = "127.0.0.1"

    def close(self) -> None:
        _ip("netns", "del", self.name, check=False)




class Router:
    """A router namespace between two :class:`Lan`\\ s: it forwards unicast between their
    subnets (``.254`` on each side, every host's route to the other subnet), and, as routers
    do, neither multicast nor broadcast."""

    def __init__(self, left: Lan, right: Lan) -> None:
        self.name = f"{left.prefix}rt"
        self.lans = (left, right)
        _ip("netns", "add", self.name)
        try:
            _ip("-n", self.name, "link", "set", "lo", "up")
            for side, lan in enumerate(self.lans):
                inside, outside = f"r{side}{lan.prefix}", f"rport{side}"
                _ip("link", "add", inside, "netns", self.name, "type", "veth", "peer", "name", outside,
                    "netns", lan.hub)
                _ip("-n", lan.hub, "link", "set", outside, "master", "br0")
                _ip("-n", lan.hub, "link", "set", outside, "up")
                _ip("-n", self.name, "addr", "add", f"{lan.subnet}.254/24", "dev", inside)
                _ip("-n", self.name, "link", "set", inside, "up")
            subprocess.run(["ip", "netns", "exec", self.name, "sysctl", "-qw", "net.ipv4.ip_forward=1"], check=True)
            for lan, other in (self.lans, self.lans[::-1]):
                for host in lan.hosts:
                    _ip("-n", host, "route", "add", f"{other.subnet}.0/24", "via", f"{lan.subnet}.254")
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        _ip("netns", "del", self.name, check=False)
