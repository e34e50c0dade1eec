"""Benchmark of files between m2mc-peer processes on a namespace LAN, against a plain TCP copy.

    sudo .venv/bin/python -m m2mc.app.bench.files [--size-mb 1024] [--rates 1gbit,10gbit,unlimited]
                                                   [--pairs 3] [--three-mb 200]

On the same namespace hosts, for each rate the sender's link is held to (``tc qdisc … tbf`` on
host 1's side of its veth; ``unlimited``: no qdisc), pairs of runs in turns, A B A B…:

A. a plain TCP copy of the file from host 1 to host 2 (``socket.sendfile`` into ``recv_into``
   and a write to disk in m2mc's pieces, ``WRITE_PIECE``, no hashing): the baseline (written in
   larger pieces it ran at half m2mc's rate here, which measured the memory, not the protocol);
B. the same file offered by an m2mc-peer on host 1 (a new offer each pair, all hashed before
   the first run) and fetched by one on host 2, from ``fetch_file`` to its ``done`` notification
   (every chunk checked against the offer's hash tree; its sync to disk, which follows, is
   waited for before the next run).

Each run starts right after the previous one's file is deleted: on this virtual machine memory
freed for more than about 2 s goes back to the host, and writing into it again costs 3 to 4 times
the CPU (1.1-1.6 against 0.35 CPU s a GiB of page cache), so a run started later than the other
would pay for it.  So the first pair of a rate, which follows the offers' hashing, follows a plain
copy that is not counted.

Each pair prints its ratio, plain copy's seconds over m2mc's (1.00: as fast as the plain copy),
and each receiver's CPU seconds per GiB; each rate ends with its ratios and their median
against the target (95 % at 1 Gbit/s, 90 % at 10 Gbit/s, 50 % unlimited).  Then a smaller file
is fetched by three receivers at once: how much the offerer uploaded, as a multiple of the file
(target at most 1.2x).  Each m2mc-peer's peak RSS (VmHWM) is printed.  Every socket lives in
private namespaces made (and deleted) here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ...middleware.file_transfer import WRITE_PIECE

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
piece = int(sys.argv[3])
total = 0
fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
while True:
    n = conn.recv_into(buffer)
    if not n:
        break
    for start in range(0, n, piece):
        os.write(fd, view[start:min(n, start + piece)])
    total += n
os.close(fd)
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

TARGETS = {"1gbit": 0.95, "10gbit": 0.90, "unlimited": 0.50}
BURST = {"1gbit": "1mb", "10gbit": "10mb"}  # at least a timer tick's worth of bytes at the rate


def write_random(path: Path, size: int) -> None:
    with path.open("wb") as out:
        left = size
        while left:
            block = os.urandom(min(left, 1 << 24))
            out.write(block)
            left -= len(block)


def hold_link(lan, index: int, rate: str) -> None:
    """Hold host ``index``'s outgoing link to ``rate`` (tbf), or let it go (``unlimited``)."""
    device = f"v{lan.prefix}{index + 1}"
    base = ["ip", "netns", "exec", lan.hosts[index], "tc", "qdisc"]
    subprocess.run([*base, "del", "dev", device, "root"], capture_output=True)  # none yet: fine
    if rate != "unlimited":
        subprocess.run([*base, "add", "dev", device, "root", "tbf", "rate", rate, "burst", BURST.get(rate, "10mb"),
                        "latency", "50ms"], check=True)


def plain_copy(lan, source: Path, dest: Path) -> tuple[float, float]:
    """Seconds a plain TCP copy of ``source`` from host 1 to host 2 takes, as the receiver sees it,
    and the CPU seconds its receiving process used."""
    receiver = subprocess.Popen(["ip", "netns", "exec", lan.hosts[1], sys.executable, "-c", RECEIVE,
                                 lan.addresses[1], str(dest), str(WRITE_PIECE)], stdout=subprocess.PIPE, text=True)
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


def peer_pid(peer) -> int:
    """The m2mc-peer's own pid: ``ip netns exec`` execs it, so it is the process started."""
    return peer.proc.pid


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of process ``pid``."""
    seconds = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        seconds[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return seconds


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def fetched(peer, gid: str, mid: str) -> dict:
    return next(row for row in peer.call("files", {"gid": gid}) if row["mid"] == mid)


def wait_done(peer, mid: str, timeout: float = 3600) -> None:
    """Until ``peer`` notifies that ``mid``'s file is done: woken by the notification itself (the
    test bed's condition), not by polling, so the time taken is not rounded up to a poll."""
    deadline = time.monotonic() + timeout
    with peer._cond:
        while not any(n["method"] == "file_progress" and n["params"]["mid"] == mid
                      and n["params"]["state"] in ("done", "failed") for n in peer.notifications):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{peer.name}: {mid} not done")
            peer._cond.wait(left)


def offers(ann, bob, gid: str, source: Path, count: int) -> list[str]:
    """``count`` offers of ``source`` by Ann, delivered to Bob: made before any run is timed."""
    mids = [ann.call("send_file", {"gid": gid, "path": str(source)}, timeout=600)["mid"] for _ in range(count)]
    bob.wait_for(lambda: all(any(m["mid"] == mid for m in bob.delivered(gid)) for mid in mids), timeout=30)
    time.sleep(0.5)  # the offers' own traffic (acks, repairs) out of the way
    return mids


def m2mc_copy(ann, bob, gid: str, mid: str, dest: Path, idle=None) -> tuple[float, float, float]:
    """Seconds from Bob's ``fetch_file`` of ``mid`` to its ``done``, and Bob's and Ann's CPU seconds
    meanwhile (printed: Bob's by thread, his event loop's first, and ``idle``'s, a member doing nothing)."""
    before = [cpu_seconds(peer_pid(p)) for p in (bob, ann)]
    threads = thread_cpu(peer_pid(bob))
    idle_before = cpu_seconds(peer_pid(idle)) if idle is not None else 0.0
    began = time.monotonic()
    bob.call("fetch_file", {"gid": gid, "mid": mid, "dest": str(dest)})
    wait_done(bob, mid)
    seconds = time.monotonic() - began
    receiver, sender = (cpu_seconds(peer_pid(p)) - b for p, b in zip((bob, ann), before))
    after = thread_cpu(peer_pid(bob))
    used = sorted(((tid != peer_pid(bob), -(cpu - threads.get(tid, 0.0)), tid) for tid, cpu in after.items()))
    print("  receiver CPU s by thread (its loop first): "
          + ", ".join(f"{-minus:.2f}" for _, minus, _ in used if -minus >= 0.01)
          + (f"; an idle member meanwhile {cpu_seconds(peer_pid(idle)) - idle_before:.2f}" if idle is not None else ""))
    row = fetched(bob, gid, mid)
    assert row["state"] == "done", row
    Path(row["path"]).unlink()
    os.sync()  # the file's own sync, which follows its done, finished before the next run
    return seconds, receiver, sender


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="the one-receiver file (MiB)")
    parser.add_argument("--rates", default="1gbit,10gbit,unlimited",
                        help="the sender's link, one after the other (tc's rates, or unlimited)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (plain copy, m2mc) at each rate")
    parser.add_argument("--three-mb", type=int, default=200, help="the three-receiver file (MiB); 0: none")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    testbed = importlib.import_module("tests.testbed.lan")  # the test bed's peers, not type-checked with the app
    Lan, PeerProcess = testbed.Lan, testbed.PeerProcess

    work = Path(tempfile.mkdtemp(prefix="m2mc-bench-files-"))
    big, small = work / "one.bin", work / "three.bin"
    write_random(big, args.size_mb * 2**20)
    if args.three_mb:
        write_random(small, args.three_mb * 2**20)
    os.sync()  # the sources on disk, as a user's files are: no writeback of them during the runs
    size = big.stat().st_size
    gib = size / 2**30
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
            summary = []
            for rate in args.rates.split(",") if args.pairs else ():
                hold_link(lan, 0, rate)
                ratios = []
                mids = offers(ann, bob, gid, big, args.pairs)
                plain_copy(lan, big, work / "plain.bin")  # not counted: the memory since the offers is cold
                for pair, mid in enumerate(mids, 1):
                    plain, plain_cpu = plain_copy(lan, big, work / "plain.bin")
                    seconds, receiver_cpu, sender_cpu = m2mc_copy(ann, bob, gid, mid, work / "bob.bin", dan)
                    ratios.append(plain / seconds)
                    print(f"{rate} pair {pair}: plain copy {plain:.2f} s ({size / plain / 2**20:,.0f} MiB/s, receiver "
                          f"{plain_cpu / gib:.2f} CPU s/GiB), m2mc {seconds:.2f} s ({size / seconds / 2**20:,.0f} MiB/s,"
                          f" receiver {receiver_cpu / gib:.2f} CPU s/GiB, sender {sender_cpu / gib:.2f}): "
                          f"ratio {plain / seconds:.2f}", flush=True)
                median = statistics.median(ratios)
                target = TARGETS.get(rate)
                verdict = "" if target is None else f" (target {target:.2f}: {'met' if median >= target else 'NOT met'})"
                line = (f"{rate}, {args.size_mb:,} MiB, m2mc / plain copy by pair: "
                        + ", ".join(f"{r:.2f}" for r in ratios) + f"; median {median:.2f}{verdict}")
                summary.append(line)
                print(line, flush=True)
            hold_link(lan, 0, "unlimited")
            if args.three_mb:
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
                line = (f"three receivers, {size / 2**20:,.0f} MiB at once: done in "
                        + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in done.items())
                        + f"; the offerer uploaded {uploaded / size:.2f}x the file (target at most 1.2x: "
                        + f"{'met' if uploaded <= 1.2 * size else 'NOT met'}); "
                        + ", ".join(f"{p.name} {fetched(p, gid, mid)['uploaded'] / size:.2f}x" for p in peers[1:]))
                summary.append(line)
                print(line)
            print("peak RSS per peer: " + ", ".join(f"{p.name} {peak_rss(peer_pid(p)) / 2**20:.0f} MB" for p in peers))
            print("summary:\n  " + "\n  ".join(summary))
        finally:
            for peer in peers:
                peer.shutdown()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
