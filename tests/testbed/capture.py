"""Capture every frame on a namespace LAN's bridge, to search what an onlooker would see.

A raw AF_PACKET socket in the LAN's hub namespace (this module, run as a script there)
takes each frame as it enters the bridge from a host's port, so every frame that a
host sends is seen exactly once, unicast included.  It writes them to a pcap file
(``tcpdump -r`` reads it), which :class:`Capture` parses back into IPv4/UDP datagrams,
fragments reassembled, for a test to search for plaintext.

    with Capture(lan, tmp_path / "lan.pcap") as capture:
        ...
    assert not capture.find([b"secret"])
"""

from __future__ import annotations

import select
import signal
import socket
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, NamedTuple

READY = "ready"
PCAP_HEADER = struct.Struct("<IHHiIII")
PCAP_RECORD = struct.Struct("<IIII")
PCAP_MAGIC, LINKTYPE_ETHERNET, SNAPLEN = 0xA1B2C3D4, 1, 65535
ETH_P_ALL, ETH_P_IP, PACKET_OUTGOING = 0x0003, 0x0800, 4


class Datagram(NamedTuple):
    at: float  # seconds since the epoch, when the frame entered the bridge
    source: tuple[str, int]
    destination: tuple[str, int]
    payload: bytes

    @property
    def unicast(self) -> bool:
        first = int(self.destination[0].split(".")[0])
        return first < 224 and not self.destination[0].endswith(".255")


@dataclass
class Frame:
    at: float
    data: bytes


class Capture:
    """Frames entering the bridge of ``lan`` (a tests.testbed.netns.Lan) while it runs, kept in ``path``."""

    def __init__(self, lan, path: Path) -> None:
        self.path = Path(path)
        self.frames: list[Frame] = []
        self.process = subprocess.Popen(["ip", "netns", "exec", lan.hub, sys.executable, str(Path(__file__)),
                                         str(self.path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.process.stdout], [], [], 15)
        line = self.process.stdout.readline() if ready else ""
        if line.strip() != READY:
            self.process.kill()
            raise RuntimeError(f"the capture did not start: {line!r} {self.process.stderr.read()[-800:]}")

    def __enter__(self) -> "Capture":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> list[Frame]:
        """End the capture and read what it saw (again, if called twice)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.communicate()
        self.frames = list(read_pcap(self.path))
        return self.frames

    def datagrams(self) -> list[Datagram]:
        return list(udp_datagrams(self.frames))

    def find(self, needles: Iterable[bytes], unicast_only: bool = False) -> list[tuple[bytes, Datagram]]:
        """Every (needle, datagram) where the needle occurs in a UDP payload (fragments joined)."""
        needles = [n for n in needles if n]
        return [(needle, datagram) for datagram in self.datagrams() if datagram.unicast or not unicast_only
                for needle in needles if needle in datagram.payload]

    def find_in_frames(self, needles: Iterable[bytes]) -> list[tuple[bytes, Frame]]:
        """Every (needle, frame) where the needle occurs anywhere in a raw frame, whatever it carries."""
        needles = [n for n in needles if n]
        return [(needle, frame) for frame in self.frames for needle in needles if needle in frame.data]


def read_pcap(path: Path) -> Iterable[Frame]:
    data = Path(path).read_bytes()
    if len(data) < PCAP_HEADER.size:
        return
    at = PCAP_HEADER.size
    while at + PCAP_RECORD.size <= len(data):
        seconds, micros, kept, _ = PCAP_RECORD.unpack_from(data, at)
        at += PCAP_RECORD.size
        yield Frame(seconds + micros / 1e6, data[at:at + kept])
        at += kept


def udp_datagrams(frames: Iterable[Frame]) -> Iterable[Datagram]:
    """The IPv4/UDP datagrams in Ethernet ``frames``; fragments are joined into their datagram."""
    fragments: dict[tuple, dict[int, bytes]] = {}
    last: dict[tuple, int] = {}
    for frame in frames:
        data = frame.data
        if len(data) < 34 or struct.unpack_from("!H", data, 12)[0] != ETH_P_IP:
            continue
        ip = data[14:]
        header = (ip[0] & 0x0F) * 4
        total, ident, flags_offset = struct.unpack_from("!HHH", ip, 2)
        if ip[9] != socket.IPPROTO_UDP:
            continue
        source, destination = socket.inet_ntoa(ip[12:16]), socket.inet_ntoa(ip[16:20])
        body, offset, more = ip[header:total], (flags_offset & 0x1FFF) * 8, bool(flags_offset & 0x2000)
        if offset or more:
            key = (source, destination, ident)
            fragments.setdefault(key, {})[offset] = body
            if not more:
                last[key] = offset + len(body)
            if key not in last or sum(map(len, fragments[key].values())) != last[key]:
                continue
            body = b"".join(part for _, part in sorted(fragments.pop(key).items()))
            del last[key]
        if len(body) < 8:
            continue
        sport, dport, length = struct.unpack_from("!HHH", body)
        yield Datagram(frame.at, (source, sport), (destination, dport), bytes(body[8:length]))


def capture(path: str) -> None:
    """Write every frame entering the bridge from a port (not those it sends on) to ``path``, until SIGTERM."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    stopping = False

    def stop(*_) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    with open(path, "wb") as out:
        out.write(PCAP_HEADER.pack(PCAP_MAGIC, 2, 4, 0, 0, SNAPLEN, LINKTYPE_ETHERNET))
        print(READY, flush=True)
        while not stopping:
            readable, _, _ = select.select([sock], [], [], 0.2)
            while readable:
                try:
                    frame, (ifname, _, kind, *_) = sock.recvfrom(SNAPLEN, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                # Each frame once: as it comes in from the sending host's port, not as the bridge
                # forwards it (outgoing) nor as br0 passes a multicast frame up to the hub itself.
                if kind == PACKET_OUTGOING or ifname == "br0":
                    continue
                now = time.time()
                out.write(PCAP_RECORD.pack(int(now), int(now % 1 * 1e6), len(frame), len(frame)) + frame)


if __name__ == "__main__":
    capture(sys.argv[1])
