"""Test support: private network namespaces (a LAN on one machine) and m2mc-peer processes.

Every namespace is created by the test that uses it and deleted afterwards, so
our multicast and mDNS never touch the machine's real interfaces.  Names and
subnets are unique per run, so parallel runs do not collide.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

BIN = Path(sys.executable).parent
_run_tag = uuid.uuid4().hex[:6]
_counter = itertools.count(1)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def require_netns() -> None:
    """Skip (with the reason) where namespaces cannot be made; CI runs as root and never skips."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("network-namespace tests must run as root in CI")
        pytest.skip("needs root to create private network namespaces")
    if shutil.which("ip") is None:
        pytest.fail("iproute2 ('ip') is missing: run packaging/system-deps.sh")


class Lan:
    """``hosts`` namespaces joined by veth pairs to a bridge in a namespace of its own."""

    def __init__(self, hosts: int) -> None:
        require_netns()
        n = next(_counter)
        self.prefix = f"m2{_run_tag}{n}"
        self.subnet = f"10.{200 + (os.getpid() % 50)}.{n % 250}"
        self.hub = f"{self.prefix}hub"
        self.hosts: list[str] = []
        self.addresses: list[str] = []
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

    def set_link(self, index: int, up: bool) -> None:
        """Cut a host off the LAN (or reconnect it) at the bridge port."""
        _ip("-n", self.hub, "link", "set", f"port{index + 1}", "up" if up else "down")

    def close(self) -> None:
        for host in self.hosts:
            _ip("netns", "del", host, check=False)
        _ip("netns", "del", self.hub, check=False)


class LoopbackHost:
    """One namespace with only ``lo``, multicast routed to it."""

    def __init__(self) -> None:
        require_netns()
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


class RpcTimeout(AssertionError):
    pass


class PeerProcess:
    """An ``m2mc-peer`` in a namespace, spoken to over JSON-RPC."""

    def __init__(self, netns: str, iface: str, data_dir: Path, name: str, port: int = 47477,
                 extra: list[str] | None = None) -> None:
        self.netns, self.iface, self.data_dir, self.name, self.port = netns, iface, data_dir, name, port
        self.extra = extra or []
        self._ids = itertools.count(1)
        self.notifications: list[dict] = []
        self._responses: dict[int, dict] = {}
        self._cond = threading.Condition()
        self.stderr_path = Path(data_dir) / f"peer-{name}.stderr"
        self.start()

    def start(self) -> None:
        Path(self.data_dir).mkdir(parents=True, exist_ok=True)
        self._stderr = open(self.stderr_path, "ab")
        command = [
            "ip", "netns", "exec", self.netns, str(BIN / "m2mc-peer"), "--name", self.name,
            "--data-dir", str(self.data_dir), "--iface", self.iface, "--port", str(self.port), *self.extra,
        ]
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            message = json.loads(line)
            with self._cond:
                if "id" in message:
                    self._responses[message["id"]] = message
                else:
                    self.notifications.append(message)
                self._cond.notify_all()

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

    def delivered(self, gid: str | None = None) -> list[dict]:
        with self._cond:
            return [n["params"] for n in self.notifications
                    if n["method"] == "delivered" and (gid is None or n["params"]["gid"] == gid)]

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
