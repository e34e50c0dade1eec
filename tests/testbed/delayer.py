"""Delay chosen packets on a namespace LAN: an NFQUEUE rule and a process that holds each packet.

This kernel has no netem (nor the prio qdisc), so a delay is made in user space:
an iptables rule in a host's namespace sends the packets it matches to a netfilter
queue, and this module, run as a script in the same namespace, holds each queued
packet for ``seconds`` before it accepts it.  Packets keep their order and none is
dropped by the delayer.  The queue is bound through NetfilterQueue (the dev extra,
built against libnetfilter-queue, which packaging/system-deps.sh installs).

    with Delayer(lan.hosts[0], lan.addresses[1], 2.0):   # host 0's UDP to host 1, 2 s late
        ...

The test that uses it creates and removes both the rule and the process.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import pytest

READY = "ready"


def require_delayer() -> None:
    """Skip (with the reason) where the NFQUEUE binding is missing; CI installs it and never skips."""
    try:
        import netfilterqueue  # noqa: F401
    except ImportError as error:
        reason = f"the NFQUEUE delayer needs NetfilterQueue (pip install -e '.[dev]' after packaging/system-deps.sh): {error}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


class Delayer:
    """Holds the UDP packets that namespace ``host`` sends to ``destination`` for ``seconds``.

    ``port``: only those to this destination port.  ``close()`` removes the rule, then lets
    every packet still held go at once; ``held`` and ``released`` count what it handled."""

    def __init__(self, host: str, destination: str, seconds: float, *, port: int | None = None,
                 queue: int = 7) -> None:
        require_delayer()
        self.host, self.seconds = host, seconds
        self.held = self.released = 0
        self.rule = ["OUTPUT", "-p", "udp", "-d", destination, *(["--dport", str(port)] if port else []),
                     "-j", "NFQUEUE", "--queue-num", str(queue)]
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", host, sys.executable, str(Path(__file__)), str(queue), str(seconds)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._rule_in = False
        try:
            ready, _, _ = select.select([self.process.stdout], [], [], 15)
            line = self.process.stdout.readline() if ready else ""
            if line.strip() != READY:
                raise RuntimeError(f"the delayer did not start: {line!r} {self._stderr()}")
            # Inserted only once the queue is bound: a packet queued with no reader would be dropped.
            self._iptables("-I", *self.rule)
            self._rule_in = True
        except BaseException:
            self.close()
            raise

    def _iptables(self, *args: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.host, "iptables", *args], check=True, capture_output=True)

    def _stderr(self) -> str:
        if self.process.poll() is None:
            return ""
        return self.process.stderr.read()[-800:]

    def __enter__(self) -> "Delayer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._rule_in:
            self._iptables("-D", *self.rule)
            self._rule_in = False
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            out, err = self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
        for line in out.splitlines():
            if line.startswith("{"):
                counts = json.loads(line)
                self.held, self.released = counts["held"], counts["released"]


def hold_and_release(queue: int, seconds: float) -> None:
    """Bind ``queue`` and accept each packet ``seconds`` after it was queued, in order (until SIGTERM)."""
    from netfilterqueue import NetfilterQueue

    held: deque = deque()  # (when queued, packet): one delay for all, so the oldest is always due first
    counts = {"held": 0, "released": 0}

    def hold(packet) -> None:
        held.append((time.monotonic(), packet))
        counts["held"] += 1

    def release(packet) -> None:
        packet.accept()
        counts["released"] += 1

    stopping = False

    def stop(*_) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    nfq = NetfilterQueue()
    nfq.bind(queue, hold, max_len=4096)
    fd = nfq.get_fd()
    print(READY, flush=True)
    try:
        while not stopping:
            # Short waits: select() resumes after a signal (PEP 475), so ``stopping`` is looked at this often.
            wait = min(0.2, max(0.0, held[0][0] + seconds - time.monotonic())) if held else 0.2
            readable, _, _ = select.select([fd], [], [], wait)
            if readable:
                nfq.run(block=False)
            now = time.monotonic()
            while held and held[0][0] + seconds <= now:
                release(held.popleft()[1])
    finally:
        while held:  # the rule is gone by now: what is still held goes at once rather than being dropped
            release(held.popleft()[1])
        nfq.unbind()
        print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    hold_and_release(int(sys.argv[1]), float(sys.argv[2]))
