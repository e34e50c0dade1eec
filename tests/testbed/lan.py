"""Test support: namespace LANs that skip cleanly without root, and m2mc-peer processes.

Every namespace is created by the test that uses it and deleted afterwards
(tests/testbed/netns.py), so our multicast and mDNS never touch the machine's real interfaces.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.testbed import netns
from tests.testbed.netns import can_make_namespaces

BIN = Path(sys.executable).parent


def require_netns() -> None:
    """Skip (with the reason) where namespaces cannot be made; CI runs as root and never skips."""
    if not can_make_namespaces():
        if os.environ.get("CI"):
            pytest.fail("network-namespace tests must run as root in CI")
        pytest.skip("needs root to create private network namespaces")
    if shutil.which("ip") is None:
        pytest.fail("iproute2 ('ip') is missing: run packaging/system-deps.sh")


class Lan(netns.Lan):
    def __init__(self, hosts: int) -> None:
        require_netns()
        super().__init__(hosts)


class LoopbackHost(netns.LoopbackHost):
    def __init__(self) -> None:
        require_netns()
        super().__init__()


class RpcTimeout(AssertionError):
    pass


class PeerProcess:
    """An ``m2mc-peer`` in a namespace, spoken to over JSON-RPC."""

    def __init__(self, netns: str, iface: str | None, data_dir: Path, name: str, port: int = 47477,
                 extra: list[str] | None = None, program: list[str] | None = None) -> None:
        """``iface``: None starts the peer as a user does, choosing its interface itself.
        ``program``: the command that is m2mc-peer (another checkout's, for a benchmark's before)."""
        self.netns, self.iface, self.data_dir, self.name, self.port = netns, iface, data_dir, name, port
        self.extra = extra or []
        self.program = program or [str(BIN / "m2mc-peer")]
        self._ids = itertools.count(1)
        self.notifications: list[dict] = []
        self.batches: list[list[dict]] = []
        self._delivered: dict[str, list[dict]] = {}
        self._responses: dict[int, dict] = {}
        self._cond = threading.Condition()
        self.stderr_path = Path(data_dir) / f"peer-{name}.stderr"
        self.start()

    def start(self) -> None:
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        self._stderr = open(self.stderr_path, "ab")
        command = [
            "ip", "netns", "exec", self.netns, *self.program, "--name", self.name,
            "--data-dir", str(self.data_dir), *(["--iface", self.iface] if self.iface else []),
            "--port", str(self.port), *self.extra,
        ]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # The peer reads requests only once its sockets are open: this waits for that.
        self.pid = self.call("whoami", timeout=30)["pid"]

    def _read(self) -> None:
        for line in self.proc.stdout:
            message = json.loads(line)
            with self._cond:
                if type(message) is list:  # a batch's responses
                    self.batches.append(message)
                elif "id" in message:
                    self._responses[message["id"]] = message
                else:
                    message["received_at"] = time.time()  # when this test heard it (wall clock, as captures)
                    self.notifications.append(message)
                    if message.get("method") == "delivered":
                        self._delivered.setdefault(message["params"]["gid"], []).append(message["params"])
                        self.on_delivered(message["params"])
                self._cond.notify_all()

    def on_delivered(self, params: dict) -> None:
        """A ``delivered`` notification, just read (under the lock): for subclasses that note more."""

    def request(self, method: str, params: dict | None = None, timeout: float = 10) -> dict:
        """Send a request and return the whole response object (result or error)."""
        rid = next(self._ids)
        line = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        with self._cond:
            while rid not in self._responses:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RpcTimeout(f"{self.name}: no answer to {method} ({self.stderr_tail()})")
                self._cond.wait(left)
            return self._responses.pop(rid)

    def call(self, method: str, params: dict | None = None, timeout: float = 10) -> Any:
        response = self.request(method, params, timeout)
        assert "error" not in response, f"{self.name}: {method} failed: {response['error']}"
        return response["result"]

    def send_raw(self, line: bytes) -> None:
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 15, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise RpcTimeout(f"{self.name}: timed out waiting for {what}")
            time.sleep(0.05)

    def wait_notification(self, method: str, match: Callable[[dict], bool] = lambda p: True, timeout: float = 15) -> dict:
        def find():
            with self._cond:
                for note in self.notifications:
                    if note["method"] == method and match(note["params"]):
                        return note["params"]
            return None

        return self.wait_for(find, timeout, f"notification {method}")

    def delivered(self, gid: str, last: int | None = None) -> list[dict]:
        """Messages delivered in ``gid`` so far (only the ``last`` ones, if given)."""
        with self._cond:
            messages = self._delivered.get(gid, [])
            return messages[-last:] if last else list(messages)

    def stderr_tail(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-800:]
        except OSError:
            return ""

    def shutdown(self, timeout: float = 10) -> int:
        if self.proc.poll() is None:
            try:
                self.request("shutdown", timeout=timeout)
            except (RpcTimeout, BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._stderr.close()


SEND_SCRIPT = """
import socket, sys, time
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(sys.argv[1]))
sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
pause = float(sys.argv[4])
data, at = memoryview(sys.stdin.buffer.read()), 0
while at < len(data):
    size = int.from_bytes(data[at:at + 4], "big")
    sock.sendto(data[at + 4:at + 4 + size], (sys.argv[2], int(sys.argv[3])))
    at += 4 + size
    if pause:
        time.sleep(pause)
"""


def _feed(argv: list[str], datagrams: list[bytes], stop: threading.Event | None) -> None:
    """Run a sender script on ``datagrams`` until it has sent them all, or until ``stop`` is set."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(len(d).to_bytes(4, "big") + d for d in datagrams))  # the script reads all first
        proc.stdin.close()
        deadline = time.monotonic() + 600
        while proc.poll() is None:
            if stop is not None and stop.is_set():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[:6]} still sending after 600 s")
            time.sleep(0.05)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, argv)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def send_from(host: str, iface: str, group: str, port: int, datagrams: list[bytes], pause: float = 0.0,
              stop: threading.Event | None = None) -> None:
    """Multicast raw ``datagrams`` from namespace ``host`` (an attacker's), ``pause`` s apart; the rest are
    not sent once ``stop`` is set."""
    _feed(["ip", "netns", "exec", host, sys.executable, "-c", SEND_SCRIPT, iface, group, str(port), str(pause)],
          datagrams, stop)


def rss_bytes(pid: int) -> int:
    """A process's resident set, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class MemberAttack:
    """Real peers (``names``) in one open group, and Mal on the last host: Mal's peer joined and
    posted once, then stopped, so its key (``mal``) is a member's in good standing and what a
    test signs with it is a member's validly signed traffic, sent from Mal's host."""

    def __init__(self, tmp_path: Path, names: tuple[str, ...] = ("Ann", "Bob"), desc: str = "Members only") -> None:
        from m2mc.middleware.store import Store

        self.tmp_path = tmp_path
        self.lan = Lan(len(names) + 1)
        self.peers: list[PeerProcess] = []
        try:
            self.peers = [PeerProcess(host, addr, tmp_path / name, name, extra=["--no-zeroconf"])
                          for host, addr, name in zip(self.lan.hosts, self.lan.addresses, [*names, "Mal"])]
            creator, *joiners = self.peers
            self.gid = gid = creator.call("create_group", {"desc": desc})["gid"]
            for peer in joiners:
                peer.wait_notification("group_discovered", lambda p: p["gid"] == gid)
                peer.call("join_group", {"gid": gid})
            *honest, mal = self.peers
            for peer in honest:
                peer.wait_for(lambda p=peer: len(self.group_at(p)["members"]) == len(self.peers),
                              what=f"{len(self.peers)} members")
            mal.call("send", {"gid": gid, "text": "hello from Mal", "parent": None})
            for peer in honest:
                peer.wait_for(lambda p=peer: p.delivered(gid), what="Mal's first message")
            self.group = self.group_at(creator)
            mal.shutdown()
            self.peers.remove(mal)
            store = Store(tmp_path / "Mal" / "m2mc.sqlite3")
            self.mal = store.identity()
            store.close()
        except BaseException:
            self.close()
            raise

    def group_at(self, peer: PeerProcess) -> dict:
        return next(g for g in peer.call("list_groups") if g["gid"] == self.gid)

    def send(self, datagrams: list[bytes], pause: float = 0.0) -> None:
        """Multicast ``datagrams`` to the group from Mal's host."""
        send_from(self.lan.hosts[-1], self.lan.addresses[-1], self.group["addr"], self.group["port"], datagrams, pause)

    def block(self, index: int, on: bool = True) -> None:
        """Make host ``index`` deaf to Mal (or hear it again)."""
        subprocess.run(["ip", "netns", "exec", self.lan.hosts[index], "iptables", "-I" if on else "-D", "INPUT",
                        "-s", self.lan.addresses[-1], "-j", "DROP"], check=True, capture_output=True)

    def restart(self, peer: PeerProcess) -> PeerProcess:
        """Stop ``peer`` and start it again from its data dir; the new process takes its place."""
        index = self.peers.index(peer)
        peer.shutdown()
        again = PeerProcess(peer.netns, peer.iface, peer.data_dir, peer.name, extra=peer.extra)
        self.peers[index] = again
        return again

    def close(self) -> None:
        for peer in self.peers:
            if peer.proc.poll() is None:
                peer.shutdown()
        self.lan.close()


def cpu_seconds(pid: int) -> float:
    """A process's user and system CPU time, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SPOOF_SCRIPT = """
import socket, struct, sys, time
source, source_port, target, target_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
pause, spread = float(sys.argv[5]), sys.argv[6] == "1"
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)  # IP_HDRINCL: we write the header
data, at = memoryview(sys.stdin.buffer.read()), 0
while at < len(data):
    size = int.from_bytes(data[at:at + 4], "big")
    payload = bytes(data[at + 4:at + 4 + size])
    at += 4 + size
    udp = struct.pack("!HHHH", source_port, target_port, 8 + len(payload), 0) + payload  # checksum 0: none
    source_port += spread
    # The kernel fills in the IP checksum, and the id when it is 0.
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(source), socket.inet_aton(target))
    sock.sendto(ip + udp, (target, 0))
    if pause:
        time.sleep(pause)
"""


def send_spoofed(host: str, source: tuple[str, int], target: tuple[str, int], datagrams: list[bytes],
                 pause: float = 0.0, spread_ports: bool = False, stop: threading.Event | None = None) -> None:
    """Send UDP ``datagrams`` from namespace ``host`` to ``target`` with a forged ``source`` address
    (a raw socket writes the IP header), as an attacker aiming a peer's answers at a victim;
    ``spread_ports``: each datagram from the next source port; the rest are not sent once ``stop`` is set."""
    _feed(["ip", "netns", "exec", host, sys.executable, "-c", SPOOF_SCRIPT, source[0], str(source[1]),
           target[0], str(target[1]), str(pause), "1" if spread_ports else "0"], datagrams, stop)
