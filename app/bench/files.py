"""Benchmark of files between m2mc-peer processes on a namespace LAN, against a plain TCP copy.

    sudo .venv/bin/python -m m2mc.app.bench.files [--size-mb 1024] [--three-mb 200] [--rounds 1]

In one run, on the same namespace hosts:

1. a plain TCP copy of the file from host 1 to host 2 (``socket.sendfile`` into
   ``recv_into`` and a write to disk, no hashing): the baseline;
2. the same file offered by an m2mc-peer on host 1 and fetched by one on host 2
   (``fetch_file`` until the ``done`` progress, so every chunk and the whole file
   checked): throughput as a share of the baseline (target 70 %);
3. a smaller file fetched by three receivers at once: how much the offerer
   uploaded, as a multiple of the file (target at most 1.5x), and the time.

Each m2mc-peer's peak RSS (VmHWM) is printed (target under 200 MB).  Every socket
lives in private namespaces made (and deleted) here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECEIVE = """
import os, socket, sys, time
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], 47999))
server.listen(1)
print("ready", flush=True)
conn, _ = server.accept()
began = time.monotonic()
buffer = bytearray(1 << 20)
view = memoryview(buffer)
total = 0
with open(sys.argv[2], "wb") as out:
    while True:
        n = conn.recv_into(buffer)
        if not n:
            break
        out.write(view[:n])
        total += n
cpu = sum(os.times()[:2])
print(total, time.monotonic() - began, cpu, flush=True)
"""

SEND = """
import socket, sys
sock = socket.create_connection((sys.argv[1], 47999))
with open(sys.argv[2], "rb") as source:
    sock.sendfile(source)
sock.close()
"""


def write_random(path: Path, size: int) -> None:
    with path.open("wb") as out:
        left = size
        while left:
            block = os.urandom(min(left, 1 << 24))
            out.write(block)
            left -= len(block)


def plain_copy(lan, source: Path, dest: Path) -> tuple[float, float]:
    """Seconds a plain TCP copy of ``source`` from host 1 to host 2 takes, as the receiver sees it,
    and the CPU seconds its receiving process used."""
    receiver = subprocess.Popen(["ip", "netns", "exec", lan.hosts[1], sys.executable, "-c", RECEIVE,
                                 lan.addresses[1], str(dest)], stdout=subprocess.PIPE, text=True)
    assert receiver.stdout is not None
    assert receiver.stdout.readline().strip() == "ready"
    subprocess.run(["ip", "netns", "exec", lan.hosts[0], sys.executable, "-c", SEND, lan.addresses[1], str(source)],
                   check=True)
    total, seconds, cpu = receiver.stdout.readline().split()
    receiver.wait()
    assert int(total) == source.stat().st_size
    dest.unlink()
    return float(seconds), float(cpu)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process ``pid`` has used, its threads included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def fetched(peer, gid: str, mid: str) -> dict:
    return next(row for row in peer.call("files", {"gid": gid}) if row["mid"] == mid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="the one-receiver file (MiB)")
    parser.add_argument("--three-mb", type=int, default=200, help="the three-receiver file (MiB)")
    parser.add_argument("--rounds", type=int, default=1, help="plain copy and m2mc, alternating, this many times")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    testbed = importlib.import_module("tests.testbed.lan")  # the test bed's peers, not type-checked with the app
    Lan, PeerProcess = testbed.Lan, testbed.PeerProcess

    work = Path(tempfile.mkdtemp(prefix="m2mc-bench-files-"))
    big, small = work / "one.bin", work / "three.bin"
    write_random(big, args.size_mb * 2**20)
    write_random(small, args.three_mb * 2**20)
    with Lan(4) as lan:
        names = ("Ann", "Bob", "Cat", "Dan")
        peers = [PeerProcess(host, address, work / name, name, extra=["--no-zeroconf", "--auto-download", "0"])
                 for host, address, name in zip(lan.hosts, lan.addresses, names)]
        ann, bob, cat, dan = peers
        try:
            gid = ann.call("create_group", {"desc": "Bench"})["gid"]
            for peer in peers[1:]:
                peer.wait_notification("group_discovered", lambda p: p["gid"] == gid, timeout=30)
                peer.call("join_group", {"gid": gid}, timeout=30)
            for peer in peers:
                peer.wait_for(lambda p=peer: len(next(g for g in p.call("list_groups")
                                                      if g["gid"] == gid)["members"]) == 4, timeout=30)
            size = big.stat().st_size
            for round_ in range(args.rounds):
                began = time.monotonic()
                mid = ann.call("send_file", {"gid": gid, "path": str(big)}, timeout=600)["mid"]  # a new offer each
                print(f"offer of {size / 2**20:,.0f} MiB hashed in {time.monotonic() - began:.1f} s")
                bob.wait_for(lambda: any(m["mid"] == mid for m in bob.delivered(gid)), timeout=30)
                plain, plain_cpu = plain_copy(lan, big, work / "plain.bin")
                cpu_before = [cpu_seconds(p.proc.pid) for p in (ann, bob)]
                began = time.monotonic()
                bob.call("fetch_file", {"gid": gid, "mid": mid, "dest": str(work / f"bob-{round_}.bin")})
                bob.wait_for(lambda: fetched(bob, gid, mid)["state"] == "done", timeout=3600, what="the file")
                seconds = time.monotonic() - began
                sender_cpu, receiver_cpu = (cpu_seconds(p.proc.pid) - before
                                            for p, before in zip((ann, bob), cpu_before))
                row = fetched(bob, gid, mid)
                Path(row["path"]).unlink()
                print(f"one receiver, {size / 2**20:,.0f} MiB: plain TCP copy {plain:.2f} s "
                      f"({size / plain / 2**20:,.0f} MiB/s), m2mc {seconds:.2f} s ({size / seconds / 2**20:,.0f} MiB/s,"
                      f" chunks and whole file checked): {100 * plain / seconds:.0f} % of the plain copy; CPU s: plain"
                      f" receiver {plain_cpu:.2f}, m2mc receiver {receiver_cpu:.2f}, sender {sender_cpu:.2f}")
            size = small.stat().st_size
            before = ann.call("stats")["file_bytes_uploaded"]
            mid = ann.call("send_file", {"gid": gid, "path": str(small)}, timeout=600)["mid"]
            for peer in peers[1:]:
                peer.wait_for(lambda p=peer: any(m["mid"] == mid for m in p.delivered(gid)), timeout=30)
            began = time.monotonic()
            for peer in peers[1:]:
                peer.call("fetch_file", {"gid": gid, "mid": mid})
            done: dict[str, float] = {}
            while len(done) < 3:
                for peer in peers[1:]:
                    if peer.name not in done and fetched(peer, gid, mid)["state"] == "done":
                        done[peer.name] = time.monotonic() - began
                time.sleep(0.05)
            uploaded = ann.call("stats")["file_bytes_uploaded"] - before
            print(f"three receivers, {size / 2**20:,.0f} MiB at once: done in "
                  + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in done.items())
                  + f"; the offerer uploaded {uploaded / size:.2f}x the file; "
                  + ", ".join(f"{p.name} {fetched(p, gid, mid)['uploaded'] / size:.2f}x" for p in peers[1:]))
            print("peak RSS per peer: " + ", ".join(f"{p.name} {peak_rss(p.proc.pid) / 2**20:.0f} MB" for p in peers))
        finally:
            for peer in peers:
                peer.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
