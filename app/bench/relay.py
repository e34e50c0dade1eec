"""Relay trees against today's per-member fan-out, in simulated time (issue 46).

    .venv/bin/python -m m2mc.app.bench.relay [--members 50,200,1000] [--seconds 60] [--rate 20]
        [--loss 0.05] [--churn 0.10] [--seed 1]
    sudo .venv/bin/python -m m2mc.app.bench.relay --lan [--peers 20] [--rate 100] [--seconds 10] [--writers 4]

``--lan`` runs real m2mc-peers on a namespace LAN instead (see :func:`lan_run`).

A group whose members multicast does not reach: every datagram is unicast, each link delays it
1-5 ms and loses ``--loss`` of them, and ``--churn`` of the members crash each minute (each comes
back 10 s later; the others see it gone or back 2 s after, as presence would tell them).  Writers,
chosen among the members that are up, send ``--rate`` messages a second in all.

For each size, two runs on the same seed: ``tree`` (middleware/relay.py: Plumtree over a
circulant view) and ``fanout`` (today: the writer sends each member a copy; a lost copy is asked
for again once the receiver sees the gap, within a heartbeat of up to 1 s, and the writer sends it
again).  Printed per run: the share of (message, member) pairs delivered among members up from the
message's writing until 5 s later, p50/p99 delivery, the copies of a message each member uploads
on average, the most a writer uploads of its own message (on average over its messages), and each
member's control bytes a second, sized as the wire makes them (wire.encode_relay): IHAVE, GRAFT,
PRUNE and NAK cost ``CONTROL_HEADER`` bytes each plus :func:`range_bytes` a range (about 10), and an
announcement riding on a push its ranges only.  Nothing here opens a socket.
"""

from __future__ import annotations

import argparse
import heapq
import random
import statistics
import sys
from dataclasses import dataclass, field

from ...middleware import relay, wire

CONTROL_HEADER = wire.RELAY_OVERHEAD + 1
"""An IHAVE, GRAFT or PRUNE on the wire (wire.encode_relay): type, sender pid, group tag, stamp,
the count of its ranges and the 16-byte tag under the two neighbours' pairwise key: 45 bytes."""
SEQNO_BASE = 100_000
"""Seqnos are sized as in a group that has lived a while (a 3-byte varint), not as the run's small ones."""


def range_bytes(first: int, last: int) -> int:
    """One range on the wire: the writer's 6-byte ref, the first seqno and the count, as varints."""
    return wire.WRITER_REF_BYTES + _varint_bytes(first + SEQNO_BASE) + _varint_bytes(last - first)


def _varint_bytes(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


DETECT = 2.0
DOWN_FOR = 10.0
SETTLE = 5.0
HEARTBEAT = 1.0


@dataclass
class Figures:
    delivered: int = 0
    expected: int = 0
    latencies: list[float] = field(default_factory=list)
    copies: int = 0
    writer_copies: list[int] = field(default_factory=list)
    control_bytes: int = 0
    distrusted: int = 0
    silent_links: int = 0
    honest_distrusted: int = 0

    def line(self, mode: str, members: int, messages: int, seconds: float) -> str:
        lat = sorted(self.latencies) or [float("nan")]
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
        return (f"{mode:<6} {members:>5} members: delivered {self.delivered}/{self.expected} "
                f"({100 * self.delivered / max(1, self.expected):.3f} %), p50 {p(0.5) * 1000:.0f} ms, "
                f"p99 {p(0.99) * 1000:.0f} ms; copies a member uploads {self.copies / max(1, messages * members):.2f}, "
                f"a writer of its own {statistics.mean(self.writer_copies or [0]):.1f}; "
                f"control {self.control_bytes / (members * seconds):.0f} B/s a member"
                + (f"; silent relays distrusted on {self.distrusted} of their {self.silent_links} links"
                   if self.silent_links else "")
                + (f"; honest neighbours distrusted at the end {self.honest_distrusted}" if mode == "tree" else ""))


class Lan:
    """Unicast links with delay and loss, a clock, and the members' up/down state."""

    def __init__(self, members: int, seconds: float, rate: float, loss: float, churn: float, seed: int,
                 silent: int = 0) -> None:
        self.rng = random.Random(seed)
        self.pids = [f"{n:032x}" for n in range(members)]
        self.silent = set(random.Random(seed + 1).sample(self.pids, silent))
        self.seconds, self.rate, self.loss, self.churn = seconds, rate, loss, churn
        self.queue: list[tuple[float, int, str, tuple]] = []
        self.seq = 0
        self.up = set(self.pids)
        self.up_since = {pid: 0.0 for pid in self.pids}
        self.down_spans: dict[str, list[tuple[float, float]]] = {pid: [] for pid in self.pids}
        self.written: dict[tuple[str, int], float] = {}
        self.seqnos = {pid: 0 for pid in self.pids}
        self.own_copies: dict[tuple[str, int], int] = {}  # a writer's uploads of its own message
        self.got: dict[tuple[str, int], dict[str, float]] = {}
        self.figures = Figures()

    def at(self, when: float, kind: str, *args) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (when, self.seq, kind, args))

    def link(self, now: float, kind: str, *args) -> None:
        if self.rng.random() >= self.loss:
            self.at(now + 0.001 + self.rng.random() * 0.004, kind, *args)

    def schedule(self) -> None:
        """Writes at ``rate`` and churn events, all drawn up front from the seed."""
        t = 0.5
        while t < self.seconds:
            self.at(t, "write")
            t += self.rng.expovariate(self.rate)
        if self.churn > 0:
            t = 1.0
            while t < self.seconds:
                self.at(t, "crash")
                t += self.rng.expovariate(self.churn * len(self.pids) / 60.0)

    def write(self, writer: str, now: float) -> tuple[str, int]:
        self.seqnos[writer] += 1
        mid = (writer, self.seqnos[writer])
        self.written[mid] = now
        self.own_copies[mid] = 0
        return mid

    def delivered(self, mid: tuple[str, int], pid: str, now: float) -> None:
        self.got.setdefault(mid, {}).setdefault(pid, now)

    def was_up(self, pid: str, start: float, end: float) -> bool:
        return all(e <= start or s >= end for s, e in self.down_spans[pid])

    def score(self) -> Figures:
        figures = self.figures
        for mid, written in self.written.items():
            if written + SETTLE > self.seconds:
                continue
            got = self.got.get(mid, {})
            for pid in self.pids:
                if pid == mid[0] or pid in self.silent or not self.was_up(pid, written, written + SETTLE):
                    continue
                figures.expected += 1
                if pid in got and got[pid] <= written + SETTLE:
                    figures.delivered += 1
                    figures.latencies.append(got[pid] - written)
        return figures

    def run(self, handle) -> Figures:
        self.schedule()
        while self.queue:
            now, _, kind, args = heapq.heappop(self.queue)
            if now > self.seconds + SETTLE:
                break
            if kind == "write":
                writer = self.rng.choice(sorted(self.up))
                handle(now, "write", writer)
            elif kind == "crash":
                candidates = sorted(self.up)
                if len(candidates) > 2:
                    pid = self.rng.choice(candidates)
                    self.up.discard(pid)
                    self.down_spans[pid].append((now, now + DOWN_FOR))
                    self.at(now + DOWN_FOR, "back", pid)
                    self.at(now + DETECT, "seen", pid)
                    handle(now, "crash", pid)
            elif kind == "back":
                self.up.add(args[0])
                self.at(now + DETECT, "seen", args[0])
                handle(now, "back", args[0])
            elif kind == "seen":
                handle(now, "seen", args[0])
            elif args and args[0] in self.up:
                handle(now, kind, *args)
        return self.score()


def control_size(item) -> int:
    if isinstance(item, relay.Prune):
        return CONTROL_HEADER + wire.WRITER_REF_BYTES * len(item.writers)
    return CONTROL_HEADER + riding_size(item)


def riding_size(item) -> int:
    return sum(range_bytes(first, last) for _, first, last in getattr(item, "ranges", ()))


def run_tree(lan: Lan) -> Figures:
    trees = {pid: relay.RelayTree("bench", pid) for pid in lan.pids}
    timers: dict[str, float] = {}
    known_up = set(lan.pids)

    everyone = relay.ring_of("bench", lan.pids)

    def views(now: float) -> None:
        members = sorted(known_up)
        ring = relay.ring_of("bench", members)
        for pid in lan.pids:  # one back from a crash relays with the members its store lists, until it is seen
            trees[pid].set_members(members, now, ring) if pid in known_up else trees[pid].set_members(lan.pids, now, everyone)

    def flush(pid: str, now: float) -> None:
        tree = trees[pid]
        for to, item in tree.datagrams_to_send():
            if pid in lan.silent and isinstance(item, relay.Push) and item.mid[0] != pid:
                if item.ranges:  # a hostile relay: it announces everything and relays nothing
                    lan.link(now, "control", to, relay.IHave(item.ranges), pid)
                continue
            if isinstance(item, relay.Push):
                lan.figures.copies += 1
                lan.figures.control_bytes += riding_size(item)
                if item.mid[0] == pid and item.mid in lan.own_copies:
                    lan.own_copies[item.mid] += 1
                lan.link(now, "push", to, item, pid)
            else:
                lan.figures.control_bytes += control_size(item)
                lan.link(now, "control", to, item, pid)
        deadline = tree.get_timer()
        if deadline is not None and (pid not in timers or deadline < timers[pid] or timers[pid] < now):  # a timer due while down was lost
            timers[pid] = deadline
            lan.at(deadline, "timer", pid, deadline)

    def handle(now: float, kind: str, *args) -> None:
        if kind == "write":
            writer = args[0]
            trees[writer].publish(lan.write(writer, now), now)
            flush(writer, now)
        elif kind == "crash":
            return
        elif kind == "back":
            trees[args[0]].set_members(lan.pids, now, everyone)
        elif kind == "seen":
            pid = args[0]
            (known_up.add if pid in lan.up else known_up.discard)(pid)
            views(now)
            for each in lan.up:
                flush(each, now)
        elif kind == "push":
            to, item, sender = args
            if trees[to].received(item.mid, sender, now):
                lan.delivered(item.mid, to, now)
            if item.ranges:
                trees[to].ihave(item.ranges, sender, now)
            flush(to, now)
        elif kind == "control":
            to, item, sender = args
            tree = trees[to]
            if isinstance(item, relay.IHave):
                tree.ihave(item.ranges, sender, now)
            elif isinstance(item, relay.Graft):
                tree.graft(item.ranges, sender, now)
            else:
                tree.prune(item.writers, sender)
            flush(to, now)
        elif kind == "timer":
            pid, deadline = args
            if timers.get(pid) != deadline:
                return
            del timers[pid]
            trees[pid].handle_timer(now)
            flush(pid, now)

    views(0.0)
    figures = lan.run(handle)
    figures.writer_copies = list(lan.own_copies.values())
    end = lan.seconds + SETTLE
    for other in set(lan.pids) - lan.silent:
        tree = trees[other]
        links = lan.silent.intersection(relay.view_of("bench", other, tree.ring))
        figures.silent_links += len(links)
        figures.distrusted += len(links.intersection(tree.distrusted(end)))
        figures.honest_distrusted += len(set(tree.distrusted(end)) - lan.silent)
    return figures


def run_fanout(lan: Lan) -> Figures:
    known_up = set(lan.pids)

    def send(now: float, writer: str, mid: tuple[str, int], to: str) -> None:
        lan.figures.copies += 1
        lan.own_copies[mid] += 1
        if lan.rng.random() >= lan.loss:
            lan.at(now + 0.001 + lan.rng.random() * 0.004, "copy", to, mid, writer)
        else:  # the receiver sees the gap at the writer's next message or heartbeat, and asks
            lan.at(now + lan.rng.random() * HEARTBEAT + 0.005, "nak", writer, mid, to)

    def handle(now: float, kind: str, *args) -> None:
        if kind == "write":
            writer = args[0]
            mid = lan.write(writer, now)
            for to in known_up:
                if to != writer:
                    send(now, writer, mid, to)
        elif kind == "seen":
            (known_up.add if args[0] in lan.up else known_up.discard)(args[0])
        elif kind == "copy":
            to, mid, _ = args
            lan.delivered(mid, to, now)
        elif kind == "nak":
            writer, mid, to = args
            lan.figures.control_bytes += control_size(relay.Graft(((mid[0], mid[1], mid[1]),)))
            if to in lan.up:
                send(now, writer, mid, to)

    figures = lan.run(handle)
    figures.writer_copies = list(lan.own_copies.values())
    return figures


def compare(members: int, seconds: float, rate: float, loss: float, churn: float, seed: int,
            silent: int = 0) -> dict[str, Figures]:
    out = {}
    for mode, runner in (("tree", run_tree), ("fanout", run_fanout)):
        lan = Lan(members, seconds, rate, loss, churn, seed, silent if mode == "tree" else 0)
        out[mode] = runner(lan)
        print(out[mode].line(mode, members, len(lan.written), seconds), flush=True)
    return out


def lan_run(peers: int, rate: float, seconds: float, writers: int, fanout: bool) -> str:
    """``peers`` real m2mc-peers in one group on a namespace LAN with multicast dropped on every host
    (tests/testbed/relay_lan.py), ``writers`` of them sending ``rate`` messages a second in all for
    ``seconds``: bytes and datagrams each host sent a message (the ``stats`` call's ``bytes_out``
    and ``datagrams_out``, everything included: relays, announcements, beacons, repairs), the
    writers' own, delivered msg/s at each receiver (from the first send to its last delivery) and
    the latency from the send call to the delivery notification (the hosts share one clock)."""
    import tempfile
    import time
    from pathlib import Path

    import importlib

    # The test bed lives beside the package, in the checkout (not type-checked with it).
    testbed = importlib.import_module("tests.testbed.relay_lan")
    RelayLan, latencies, sends = testbed.RelayLan, testbed.latencies, testbed.sends

    with tempfile.TemporaryDirectory(prefix="m2mc-relay-") as tmp:
        lan = RelayLan(Path(tmp), peers, fanout=fanout, timeout=120)
        try:
            if not fanout:
                lan.wait_relaying(timeout=120)
            time.sleep(2.0)  # the joins' syncs and first beacons settle
            before = lan.stats()
            began = time.time()
            texts = sends(lan.peers, lan.gid, writers, rate, seconds, "bench")
            wanted = set(texts)
            for peer in lan.peers:
                peer.wait_for(lambda p=peer: wanted <= {m["text"] for m in p.delivered(lan.gid)}, timeout=120,
                              what="every message")
            after = lan.stats()
            delivered = sum(1 for peer in lan.peers for text in texts if text in peer.arrived)
            rates = [sum(1 for t in texts if t in peer.arrived) / max(1e-9, max(peer.arrived[t] for t in texts) - began)
                     for peer in lan.peers[writers:]]
        finally:
            lan.close()
    n = len(texts)
    counted = ("relay_pushes_sent", "relay_beacons_sent", "relay_control_sent", "unicast_copies", "naks_sent",
               "repairs_sent")
    parts = ", ".join(f"{key} {sum(a[key] - b[key] for a, b in zip(after, before)) / n:.2f}" for key in counted)
    spent = [(a["bytes_out"] - b["bytes_out"], a["datagrams_out"] - b["datagrams_out"]) for a, b in zip(after, before)]
    lat = sorted(latencies(lan.peers, texts, writers))
    writer_bytes = sum(b for b, _ in spent[:writers]) / n
    return (f"{'fanout' if fanout else 'tree':<6} {peers} peers, {rate:.0f} msg/s for {seconds:.0f} s from {writers} "
            f"writers: delivered {delivered}/{n * peers}; sent a host a message {sum(b for b, _ in spent) / (n * peers):.0f} B "
            f"in {sum(d for _, d in spent) / (n * peers):.2f} datagrams (the most a host {max(b for b, _ in spent) / n:.0f} B), "
            f"the writers' {writer_bytes:.0f} B a message written; delivered {statistics.mean(rates):.1f} msg/s a "
            f"receiver; latency p50 {1000 * lat[len(lat) // 2]:.0f} ms, p99 {1000 * lat[int(0.99 * len(lat))]:.0f} ms"
            f"; a message written, in all: {parts}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m m2mc.app.bench.relay", description=__doc__.split("\n")[0])
    parser.add_argument("--members", default="50,200,1000")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--loss", type=float, default=0.05)
    parser.add_argument("--churn", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--silent", type=int, default=0,
                        help="members that announce everything and relay nothing (tree runs only)")
    parser.add_argument("--lan", action="store_true", help="real m2mc-peers on a namespace LAN (needs root)")
    parser.add_argument("--peers", type=int, default=20)
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args(argv)
    if args.lan:
        rate = args.rate if "--rate" in (argv or sys.argv) else 100.0
        seconds = args.seconds if "--seconds" in (argv or sys.argv) else 10.0
        for fanout in (False, True):
            print(lan_run(args.peers, rate, seconds, args.writers, fanout), flush=True)
        return 0
    for members in (int(n) for n in args.members.split(",")):
        compare(members, args.seconds, args.rate, args.loss, args.churn, args.seed, args.silent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
