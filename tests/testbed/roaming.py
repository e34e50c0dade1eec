"""A laptop's day on a namespace LAN: three m2mc-peers started as a user starts them (no
``--iface``), and the changes a laptop's network goes through, made to Bob's host.

Used by tests/lan/test_lan_roaming.py and the benchmark ``python -m m2mc.app.bench.roaming``.
Each change returns the moment its new network was usable; :meth:`RoamingLan.time_to_flow`
then measures how long until messages flow both ways between Bob and Ann again, and
:meth:`RoamingLan.nothing_lost` that every message written meanwhile reached every peer.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.testbed.lan import Lan, PeerProcess

CHANGES = ("address", "interface", "recreate", "tunnel", "sleep")

# Holds a tun device open, as a VPN client does, so that it has a carrier (a tun nobody holds
# stays NO-CARRIER); TUNSETIFF with IFF_TUN | IFF_NO_PI.
TUN_HOLDER = """
import fcntl, os, struct, sys, time
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, 0x400454ca, struct.pack("16sH", sys.argv[1].encode(), 0x0001 | 0x1000))
print("ready", flush=True)
time.sleep(3600)
"""


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class RoamingLan:
    """Ann, Bob and Cat in one open group; Bob's host is the laptop whose network changes."""

    def __init__(self, work: Path, multicast: bool = True, program: list[str] | None = None) -> None:
        """``program``: the m2mc-peer command (default: this checkout's)."""
        self.work = work
        self.lan = Lan(3)
        self.multicast = multicast
        self._numbers = itertools.count(1)
        self.bob_dev = f"v{self.lan.prefix}2"  # the interface Bob uses now
        self.bob_address = self.lan.addresses[1]
        self._sent: list[str] = []
        self.peers: list[PeerProcess] = []
        try:
            if not multicast:
                for host in self.lan.hosts:  # a switch that drops multicast and broadcast: only unicast reach
                    for chain, side in (("OUTPUT", "-d"), ("INPUT", "-d")):
                        for target in ("224.0.0.0/4", f"{self.lan.subnet}.255", "255.255.255.255"):
                            subprocess.run(["ip", "netns", "exec", host, "iptables", "-A", chain, side, target,
                                            "-j", "DROP"], check=True, capture_output=True)
            self.peers = [PeerProcess(host, None, work / name, name, program=program)
                          for host, name in zip(self.lan.hosts, ("Ann", "Bob", "Cat"))]
            self.ann, self.bob, self.cat = self.peers
            self.gid = self.ann.call("create_group", {"desc": "Laptop day"})["gid"]
            for peer in (self.bob, self.cat):
                if multicast:
                    peer.wait_notification("group_discovered", lambda p: p["gid"] == self.gid, timeout=30)
                    peer.call("join_group", {"gid": self.gid}, timeout=30)
                else:
                    invite = self.ann.call("invite", {"gid": self.gid})["invite"]
                    peer.call("join_group", {"invite": invite}, timeout=40)
            for peer in self.peers:
                peer.wait_for(lambda p=peer: self.members(p) == 3, timeout=30, what="three members")
            self.say(self.ann, "hello all")
            self.wait_everywhere()
        except Exception:
            self.close()
            raise

    # -- conversation ----------------------------------------------------------------------

    def members(self, peer: PeerProcess) -> int:
        return next((len(g["members"]) for g in peer.call("list_groups") if g["gid"] == self.gid and g["joined"]), 0)

    def say(self, peer: PeerProcess, text: str) -> None:
        peer.call("send", {"gid": self.gid, "text": text, "parent": None})
        self._sent.append(text)

    def texts(self, peer: PeerProcess) -> set[str]:
        return {m["text"] for m in peer.delivered(self.gid)}

    def wait_everywhere(self, timeout: float = 20) -> None:
        for peer in self.peers:
            peer.wait_for(lambda p=peer: set(self._sent) <= self.texts(p), timeout=timeout,
                          what=f"all {len(self._sent)} messages")

    def nothing_lost(self, timeout: float = 20) -> list[str]:
        """The messages some peer still lacks after ``timeout`` (empty: nothing lost)."""
        deadline = time.monotonic() + timeout
        while True:
            lacking = [f"{peer.name} lacks {sorted(set(self._sent) - self.texts(peer))[:5]}"
                       for peer in self.peers if not set(self._sent) <= self.texts(peer)]
            if not lacking or time.monotonic() > deadline:
                return lacking
            time.sleep(0.1)

    def time_to_flow(self, since: float, timeout: float = 30.0, tag: str = "") -> float | None:
        """Seconds from ``since`` until a message Bob wrote after it reached Ann and one Ann wrote
        after it reached Bob (each writes one every 0.25 s meanwhile); None after ``timeout``."""
        tag = tag or f"r{next(self._numbers)}"
        ann_got = bob_got = None
        k = 0
        while time.monotonic() - since < timeout:
            k += 1
            self.say(self.bob, f"{tag} from Bob {k}")
            self.say(self.ann, f"{tag} from Ann {k}")
            end = time.monotonic() + 0.25
            while time.monotonic() < end:
                if ann_got is None and any(t.startswith(f"{tag} from Bob") for t in self.texts(self.ann)):
                    ann_got = time.monotonic()
                if bob_got is None and any(t.startswith(f"{tag} from Ann") for t in self.texts(self.bob)):
                    bob_got = time.monotonic()
                if ann_got is not None and bob_got is not None:
                    return max(ann_got, bob_got) - since
                time.sleep(0.02)
        return None

    def network_states(self, since: int = 0) -> list[str]:
        """Bob's ``network`` notifications' states from the ``since``-th on, a state told twice in a
        row (its reason changed: none yet, then "on eth0 (…)") once."""
        told = [n["params"]["state"] for n in self.bob.notifications if n["method"] == "network"][since:]
        return [state for i, state in enumerate(told) if i == 0 or told[i - 1] != state]

    def network_count(self) -> int:
        """How many ``network`` notifications Bob has sent (``since`` for :meth:`network_states`)."""
        return sum(n["method"] == "network" for n in self.bob.notifications)

    # -- the changes ------------------------------------------------------------------------

    def _bob(self, *args: str) -> None:
        ip("-n", self.lan.hosts[1], *args)

    def change(self, kind: str, sleep_seconds: float = 60.0) -> float:
        """Make change ``kind`` to Bob's network; returns when the new network was usable."""
        return getattr(self, f"_change_{kind}")(sleep_seconds) if kind == "sleep" else getattr(self, f"_change_{kind}")()

    def _change_address(self) -> float:
        """DHCP gives Bob a new address on the same interface."""
        new = f"{self.lan.subnet}.{100 + next(self._numbers) % 100}"
        self._bob("addr", "del", f"{self.bob_address}/24", "dev", self.bob_dev)
        self._bob("addr", "add", f"{new}/24", "dev", self.bob_dev)
        self._bob("route", "replace", "224.0.0.0/4", "dev", self.bob_dev)
        self.bob_address = new
        return time.monotonic()

    def _add_interface(self, name: str, port: str, address: str) -> None:
        ip("link", "add", name, "netns", self.lan.hosts[1], "type", "veth", "peer", "name", port, "netns", self.lan.hub)
        ip("-n", self.lan.hub, "link", "set", port, "master", "br0")
        ip("-n", self.lan.hub, "link", "set", port, "up")
        self._bob("addr", "add", f"{address}/24", "dev", name)
        self._bob("link", "set", name, "up")
        self._bob("route", "replace", "224.0.0.0/4", "dev", name)

    def _change_interface(self) -> float:
        """Dock to Wi-Fi: a second interface comes up on the same LAN, then the first goes away."""
        n = next(self._numbers)
        name, address = f"w{self.lan.prefix[-6:]}{n}", f"{self.lan.subnet}.{150 + n % 100}"
        self._add_interface(name, f"wp{n}", address)
        time.sleep(1.0)  # both up a while: the peer keeps the one it uses
        self._bob("link", "del", self.bob_dev)
        self.bob_dev, self.bob_address = name, address
        return time.monotonic()

    def _change_recreate(self) -> float:
        """Wi-Fi off and on: the interface goes away, and comes back under the same name and address."""
        n = next(self._numbers)
        self._bob("link", "del", self.bob_dev)
        for i in range(6):  # written while Bob is off the network, longer than the grace before "offline"
            self.say(self.ann, f"while Bob's Wi-Fi is off {n}.{i}")
            time.sleep(0.5)
        self._add_interface(self.bob_dev, f"rp{n}", self.bob_address)
        return time.monotonic()

    def _change_tunnel(self) -> float:
        """A VPN comes up (a tun device with a default route through it) and goes down again."""
        n = next(self._numbers)
        name = f"tun{n}"
        holder = subprocess.Popen(["ip", "netns", "exec", self.lan.hosts[1], sys.executable, "-c", TUN_HOLDER, name],
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            self._bob("addr", "add", f"10.99.{n % 250}.1/24", "dev", name)
            self._bob("link", "set", name, "up")
            self._bob("route", "replace", "default", "dev", name)
            time.sleep(2.0)
            self.say(self.ann, f"while the VPN is up {n}")
            self.say(self.bob, f"Bob on the VPN {n}")
            time.sleep(1.0)
        finally:
            holder.kill()
            holder.wait()
        subprocess.run(["ip", "-n", self.lan.hosts[1], "link", "del", name], capture_output=True)
        return time.monotonic()

    def _change_sleep(self, seconds: float) -> float:
        """The laptop sleeps (the process stopped) while the others write."""
        os.kill(self.bob.proc.pid, signal.SIGSTOP)
        try:
            end = time.monotonic() + seconds
            i = 0
            while time.monotonic() < end:
                i += 1
                self.say(self.ann if i % 2 else self.cat, f"while Bob sleeps {i}")
                time.sleep(min(2.0, max(0.0, end - time.monotonic())))
        finally:
            os.kill(self.bob.proc.pid, signal.SIGCONT)
        return time.monotonic()

    def presence(self, peer: PeerProcess) -> dict[str, str]:
        """``peer``'s view of each member's presence, by pid."""
        return peer.call("presence", {"gid": self.gid})

    def close(self) -> None:
        for peer in self.peers:
            try:
                peer.shutdown(timeout=5)
            except Exception:
                peer.kill()
        self.lan.close()

