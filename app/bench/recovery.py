"""Benchmark of recovery under loss, side by side with an older commit (issue 34).

    sudo .venv/bin/python -m m2mc.app.bench.recovery [--runs 10] [--phases burst,cut,kill]
                                                      [--baseline 957b8ce] [--trace DIR]

A namespace LAN of four hosts, three running ``m2mc-peer`` (driven over JSON-RPC),
the fourth an observer; 20 % of incoming UDP is dropped on every host once the
group has formed.  Each run forms a fresh group and goes through three phases:

1. ``burst``: 300 messages sent as fast as ``send`` answers, 60 % of them replies,
   100 from each of the three members at once;
2. ``cut``: the third host's link cut while the other two send 250 each, restored
   right after the last send;
3. ``kill``: the other two send 150 each; the third member is killed with -9 after
   60 of them and restarted (same data dir) after 180.

Each figure is the seconds from the last send (in ``kill``: or the restarted peer
answering, if later) until every member has every message sent so far: a member's
messages are those ``delivered`` to it, plus, for a restarted one, its ``history``.
A phase not complete after ``--timeout`` s is shown as ``>TIMEOUT`` and ends the run.

The baseline (``--baseline COMMIT``, ``none`` to skip) is exported with ``git archive``
and installed into a venv kept under ``~/.cache/m2mc-bench`` (made once per commit);
its runs alternate with this tree's (A B A B).  It prints every run, then the median
and the maximum per phase and side, and the ratio of the medians.

``--trace DIR`` writes, per run, ``<side>-<run>.trace``: the observer host (no loss
on it then) decodes every datagram on the group's channel with that side's own codec
(NAK, REPAIR, SYNC_REQ, SYNC_RESP, HEARTBEAT, DATA_BATCH), and every 0.25 s each
peer's ``stats`` counters that changed (NAKs, repairs, budget refusals, rate cuts)
and its count of missing messages; lines carry seconds since the phase began.
All sockets live in private namespaces made (and deleted) here.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

PHASES = ("burst", "cut", "kill")
LOSS = 0.2
BURST_PER_MEMBER = 100
REPLY_SHARE = 0.6
CUT_PER_MEMBER = 250
KILL_PER_MEMBER = 150
KILL_AFTER, RESTART_AFTER = 60, 180  # messages sent in the kill phase before the kill, the restart
STATS_EVERY = 0.25  # s, when tracing
TRACED_STATS = ("naks_sent", "repairs_sent", "sync_messages_sent", "gaps_reported", "requests_over_budget",
                "sync_requests_refused", "rate_cuts", "duplicates_dropped", "pending", "evicted")

# Run with the side's own interpreter in the observer's namespace, so it decodes with that
# side's codec (the packages were top-level before they became m2mc.*).
OBSERVER_SCRIPT = r"""
import json, socket, struct, sys, time
try:
    from m2mc.middleware import wire
except ImportError:
    from middleware import wire
iface, group, port, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 23)
sock.bind((group, port))
sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, struct.pack("4s4s", socket.inet_aton(group),
                socket.inet_aton(iface)))

def runs(seqnos):
    out, seqnos = [], sorted(seqnos)
    for s in seqnos:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out

def by_sender(messages):
    senders = {}
    for m in messages:
        senders.setdefault(m.sender, []).append(m.seqno)
    return {s: runs(q) for s, q in senders.items()}

with open(out, "w") as f:
    print("listening", flush=True)
    while True:
        data, (source, _) = sock.recvfrom(65536)
        at = time.time()
        try:
            envelope = wire.decode(data)
        except Exception as exc:
            f.write(json.dumps({"t": at, "from": source, "type": "undecodable", "why": str(exc)[:80]}) + "\n")
            continue
        m = envelope.message
        kind = type(m).__name__
        row = {"t": at, "from": envelope.sender, "type": kind, "bytes": len(data)}
        if kind == "DataBatch":
            row["seqnos"] = runs(item[0] for item in m.items)
        elif kind == "Data":
            row["seqnos"] = [[m.seqno, m.seqno]]
        elif kind == "Nak":
            row.update(target=m.target, ranges=[list(r) for r in m.ranges])
        elif kind == "Repair":
            row["messages"] = by_sender(m.messages)
        elif kind == "SyncReq":
            row.update(sync_seqno=m.sync_seqno, digest={pid: [list(r) for r in ranges] for pid, ranges in m.digest})
        elif kind == "SyncResp":
            row.update(requester=m.requester, sync_seqno=m.sync_seqno, remaining=m.remaining,
                       messages=by_sender(m.messages))
        elif kind == "Heartbeat":
            row["seqno"] = m.seqno
        f.write(json.dumps(row) + "\n")
        f.flush()
"""


# With --trace, each peer runs under this wrapper (with its side's interpreter): it hooks the
# group channel's receive and timer from outside, so the product pays nothing for it, and logs
# what each decision was: a NAK received and whether (and when) it is answered, NAK schedules
# and their back-off, sync requests and answers, budget refusals and rate cuts.
PEER_TRACE_SCRIPT = r"""
import sys, time
try:
    from m2mc.middleware import channel as core
    from m2mc.app import peer as peer_main
except ImportError:
    from middleware import channel as core
    from app import peer as peer_main
out = open(sys.argv[1], "a", buffering=1)
COUNTERS = ("requests_over_budget", "sync_requests_refused", "rate_cuts", "gaps_reported")

def log(channel, text):
    out.write("%.6f %s %s\n" % (time.time(), channel.pid, text))

def ranges(rs):
    return ",".join(str(a) if a == b else "%d-%d" % (a, b) for a, b in rs)

def counters(channel):
    return {k: channel.stats.get(k, 0) for k in COUNTERS}

def changed(before, after):
    return " ".join("%s%+d" % (k, after[k] - before[k]) for k in after if after[k] != before[k])

# The channel's state, read from its layers (today) or from the fields older commits kept on it.
LAYERED = hasattr(getattr(core, "sync", None), "Msp")

def repair_answers(ch):
    if LAYERED:
        return {pid: record.answer for pid, record in ch._repair.answering.items()}
    return getattr(ch, "_answers", {})

def sync_answers(ch):
    return ch._sync.answers if LAYERED else getattr(ch, "_sync_answers", {})

def sync_active(ch):
    return ch._sync.syncing if LAYERED else getattr(ch, "_sync_active", None)

def sync_tries(ch):
    return ch._sync._tries if LAYERED else getattr(ch, "_sync_tries", "?")

def naks_due(ch):
    if LAYERED:
        return {pid: record.nak_at for pid, record in ch._loss.naks_due.items()}
    return getattr(ch, "_nak_at", {})

def nak_tries(ch):
    if LAYERED:
        return {pid: record.nak_tries for pid, record in ch._loss.naks_due.items()}
    return getattr(ch, "_nak_tries", {})

receive = core.GroupChannel.receive
def traced_receive(self, sender, message, now, *args, **kwargs):
    kind = type(message).__name__
    if kind not in ("Nak", "SyncReq", "SyncResp", "Repair"):
        return receive(self, sender, message, now, *args, **kwargs)
    before, answers = counters(self), dict(repair_answers(self))
    syncs = set(sync_answers(self))
    result = receive(self, sender, message, now, *args, **kwargs)
    note = changed(before, counters(self))
    if kind == "Nak":
        answer = repair_answers(self).get(message.target)
        if answer is None:
            what = "no answer from here"
        else:
            what = "answer due in %.3f s (%s)" % (answer.next_at - now,
                                                  "added to one due" if message.target in answers else "new")
        log(self, "got NAK from %s for %s:%s -> %s %s" % (sender, message.target, ranges(message.ranges), what, note))
    elif kind == "SyncReq":
        new = set(sync_answers(self)) - syncs
        log(self, "got SYNC_REQ #%s from %s -> %s %s" % (message.sync_seqno, sender,
            "will answer" if new else "no answer from here", note))
    elif kind == "SyncResp" and message.requester == self.pid:
        log(self, "got SYNC_RESP from %s, %d messages, remaining %d; syncing=%s" % (
            sender, len(message.messages), message.remaining, sync_active(self)))
    elif kind == "Repair":
        log(self, "got REPAIR from %s, %d messages %s" % (sender, len(message.messages), note))
    return result

handle_timer = core.GroupChannel.handle_timer
def traced_handle_timer(self, now, *args, **kwargs):
    before, syncing = counters(self), sync_active(self)
    nak_at = dict(naks_due(self))
    result = handle_timer(self, now, *args, **kwargs)
    tries = nak_tries(self)
    for sender, at in naks_due(self).items():
        if nak_at.get(sender) != at:
            log(self, "NAK for %s (missing %s) next in %.3f s, tries %s" % (
                sender, ranges(self.missing(sender)), at - now, tries.get(sender, 0)))
    if sync_active(self) != syncing:
        log(self, "syncing %s -> %s (tries %s); NAKs %s" % (syncing, sync_active(self),
            sync_tries(self), "held" if sync_active(self) else "go"))
    note = changed(before, counters(self))
    if note:
        log(self, "timer: " + note)
    return result

core.GroupChannel.receive = traced_receive
core.GroupChannel.handle_timer = traced_handle_timer
# Every request, retries included (they went through start_sync before _request_sync existed,
# and through the MSP layer's _request since the channel has layers).
if LAYERED:
    hooked, sync_hook = core.sync.Msp, "_request"
else:
    hooked = core.GroupChannel
    sync_hook = "_request_sync" if hasattr(core.GroupChannel, "_request_sync") else "start_sync"
start_sync = getattr(hooked, sync_hook)
def traced_start_sync(self, now, *args, **kwargs):
    result = start_sync(self, now, *args, **kwargs)
    if LAYERED:
        log(self.state, "SYNC_REQ #%s sent (try %s)" % (self._seqno, self._tries))
    else:
        log(self, "SYNC_REQ #%s sent (try %s)" % (self._sync_seqno, getattr(self, "_sync_tries", "?")))
    return result
setattr(hooked, sync_hook, traced_start_sync)
sys.argv = ["m2mc-peer"] + sys.argv[2:]
sys.exit(peer_main.main())
"""


class PeerGone(RuntimeError):
    pass


class RpcPeer:
    """One ``m2mc-peer`` in a namespace: requests over its stdin, answers and notifications from
    its stdout (read on a thread), and the mids it has, with when each arrived."""

    started: list["RpcPeer"] = []  # every one, so that a failed run leaves none behind

    def __init__(self, side: "Side", netns: str, iface: str, data_dir: Path, name: str,
                 trace: Path | None = None) -> None:
        self.name = name
        self.arrived: dict[str, float] = {}  # mid -> monotonic time it was delivered (or found stored)
        self._ids = itertools.count(1)
        self._responses: dict[int, dict] = {}
        self._cond = threading.Condition()
        data_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = data_dir / f"peer-{name}.stderr"
        with open(self.stderr_path, "ab") as stderr:
            # -I: the side's own packages, never the checkout's folders of the same names beside cwd
            program = [str(side.python), "-I", "-c", PEER_TRACE_SCRIPT, str(trace)] if trace else [str(side.binary)]
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", netns, *program, "--name", name, "--data-dir", str(data_dir),
                 "--iface", iface, "--no-zeroconf"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        RpcPeer.started.append(self)
        threading.Thread(target=self._read, daemon=True).start()
        self.pid = self.call("whoami", timeout=60)["pid"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            message = json.loads(line)
            with self._cond:
                if "id" in message:
                    self._responses[message["id"]] = message
                    self._cond.notify_all()
                elif message.get("method") == "delivered":
                    self.arrived.setdefault(message["params"]["mid"], time.monotonic())
                elif message.get("method") == "group_discovered":
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def call(self, method: str, params: dict | None = None, timeout: float = 30) -> Any:
        rid = next(self._ids)
        line = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:
            raise PeerGone(f"{self.name}: {exc}") from None
        deadline = time.monotonic() + timeout
        with self._cond:
            while rid not in self._responses:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise PeerGone(f"{self.name}: no answer to {method}")
                self._cond.wait(min(left, 0.5))
            response = self._responses.pop(rid)
        if "error" in response:
            raise RuntimeError(f"{self.name}: {method}: {response['error']}")
        return response["result"]

    def note_stored(self, gid: str) -> None:
        """A restarted peer has what it stored before: count it as arrived now."""
        now = time.monotonic()
        mids = [m["mid"] for m in self.call("history", {"gid": gid}, timeout=120)]
        with self._cond:
            for mid in mids:
                self.arrived.setdefault(mid, now)

    def missing(self, expected: set[str]) -> int:
        with self._cond:
            return sum(1 for mid in expected if mid not in self.arrived)

    def recent(self, count: int) -> list[str]:
        with self._cond:
            return list(itertools.islice(reversed(self.arrived), count))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("shutdown", timeout=5)
                self.proc.wait(10)
            except (PeerGone, RuntimeError, subprocess.TimeoutExpired):
                self.kill()


@dataclass
class Side:
    label: str
    binary: Path  # its m2mc-peer
    python: Path
    results: dict[str, list[float | None]] = field(default_factory=lambda: {p: [] for p in PHASES})


class Tracer:
    """With --trace: timestamped lines of what the bench did, each peer's stats counters that
    changed (polled every STATS_EVERY s) and its count of missing messages; at the end, merged
    with the observer's decoded datagrams into one file, in time order."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.rows: list[tuple[float, str]] = []
        self.t0 = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: dict[str, dict] = {}
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        if self.path:
            with self._lock:
                self.rows.append((time.time(), text))

    def watch(self, peers: Callable[[], list[RpcPeer]], expected: Callable[[], set[str]]) -> None:
        if not self.path or self._thread:
            return
        self._thread = threading.Thread(target=self._poll, args=(peers, expected), daemon=True)
        self._thread.start()

    def _poll(self, peers: Callable[[], list[RpcPeer]], expected: Callable[[], set[str]]) -> None:
        while not self._stop.wait(STATS_EVERY):
            want = expected()
            for peer in peers():
                try:
                    stats = peer.call("stats", timeout=5)
                except (PeerGone, RuntimeError):
                    continue
                last = self._last.get(peer.pid, {})
                changed = {k: stats.get(k, 0) - last.get(k, 0) for k in TRACED_STATS
                           if stats.get(k, 0) != last.get(k, 0)}
                self._last[peer.pid] = stats
                self.line(f"{peer.name} stats missing={peer.missing(want)} "
                          + " ".join(f"{k}{v:+d}" for k, v in changed.items()))

    def close(self, wire_path: Path | None, names: dict[str, str]) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        if not self.path:
            return
        rows = list(self.rows)
        if wire_path and wire_path.exists():
            for text in wire_path.read_text().splitlines():
                try:
                    row = json.loads(text)
                except ValueError:
                    continue  # the observer was killed mid-line
                rows.append((row["t"], describe_datagram(row, names)))
        peer_lines = self.path.with_suffix(".peers")
        if peer_lines.exists():
            for text in peer_lines.read_text().splitlines():
                stamp, pid, rest = (text.split(" ", 2) + ["", ""])[:3]
                try:
                    rows.append((float(stamp), f"{names.get(pid, pid[:6])} peer {_names_in(rest, names)}"))
                except ValueError:
                    continue
        rows.sort(key=lambda r: r[0])
        with open(self.path, "w") as f:
            for at, text in rows:
                f.write(f"{at - self.t0:8.3f} {text}\n")


def _names_in(text: str, names: dict[str, str]) -> str:
    for pid, name in names.items():
        text = text.replace(pid, name)
    return text


def _ranges_text(ranges: list) -> str:
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges)


def _by_sender_text(messages: dict, names: dict[str, str]) -> str:
    return " ".join(f"{names.get(pid, pid[:6])}:{_ranges_text(r)}" for pid, r in messages.items())


def describe_datagram(row: dict, names: dict[str, str]) -> str:
    """One observed datagram as a trace line: who sent what, for whom."""
    who, kind = names.get(row["from"], row["from"][:6]), row["type"]
    if kind in ("DataBatch", "Data"):
        return f"{who} wire DATA {_ranges_text(row['seqnos'])}"
    if kind == "Nak":
        return f"{who} wire NAK for {names.get(row['target'], row['target'][:6])}:{_ranges_text(row['ranges'])}"
    if kind == "Repair":
        return f"{who} wire REPAIR {_by_sender_text(row['messages'], names)}"
    if kind == "SyncReq":
        return f"{who} wire SYNC_REQ #{row['sync_seqno']} holds {_by_sender_text(row['digest'], names)}"
    if kind == "SyncResp":
        return (f"{who} wire SYNC_RESP to {names.get(row['requester'], row['requester'][:6])} #{row['sync_seqno']} "
                f"remaining {row['remaining']}: {_by_sender_text(row['messages'], names)}")
    if kind == "Heartbeat":
        return f"{who} wire HEARTBEAT {row['seqno']}"
    return f"{who} wire {kind} {row.get('why', '')}"


def send_stream(peer: RpcPeer, gid: str, count: int, rng: random.Random, label: str,
                sent: list[str], on_each: Callable[[], None] = lambda: None) -> float:
    """``count`` messages as fast as ``send`` answers, REPLY_SHARE of them replies to one this
    peer has; returns when the last one was answered."""
    for i in range(count):
        recent = peer.recent(30)
        parent = rng.choice(recent) if recent and rng.random() < REPLY_SHARE else None
        mid = peer.call("send", {"gid": gid, "text": f"{label} {i}: some words of an ordinary chat line",
                                 "parent": parent})["mid"]
        sent.append(mid)
        on_each()
    return time.monotonic()


def send_from_all(senders: list[RpcPeer], gid: str, count: int, rng: random.Random, label: str,
                  sent: list[str], on_each: Callable[[], None] = lambda: None) -> float:
    """Each of ``senders`` sends ``count`` at once (a thread each); the time of the last answer."""
    ends: list[float] = []
    errors: list[BaseException] = []
    seeds = [rng.random() for _ in senders]

    def one(peer: RpcPeer, seed: float) -> None:
        try:
            ends.append(send_stream(peer, gid, count, random.Random(seed), f"{label} {peer.name}", sent, on_each))
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(p, s)) for p, s in zip(senders, seeds)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return max(ends)


def wait_complete(peers: list[RpcPeer], expected: set[str], since: float, timeout: float) -> float | None:
    """Seconds from ``since`` until the last member had every expected mid (None: not in ``timeout``)."""
    deadline = since + timeout
    while any(peer.missing(expected) for peer in peers):
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)
    done = max(peer.arrived[mid] for peer in peers for mid in expected)
    return max(0.0, done - since)


def one_run(side: Side, run: int, phases: list[str], args, lan_class) -> dict[str, float | None]:
    """A fresh LAN and group, through the phases; seconds per phase (None: timed out)."""
    rng = random.Random(run)
    work = Path(tempfile.mkdtemp(prefix=f"m2mc-recovery-{side.label}-"))
    results: dict[str, float | None] = {}
    trace_path = Path(args.trace) / f"{side.label}-{run}.trace" if args.trace else None
    tracer = Tracer(trace_path)
    observer = None
    peers: list[RpcPeer] = []
    names_by_pid: dict[str, str] = {}
    try:
        with lan_class(4) as lan:
            names = ["A", "B", "C"]
            peer_trace = trace_path.with_suffix(".peers") if trace_path else None
            peers = [RpcPeer(side, lan.hosts[i], lan.addresses[i], work / n, n, peer_trace)
                     for i, n in enumerate(names)]
            gid = peers[0].call("create_group", {"desc": "recovery benchmark"}, timeout=60)["gid"]
            for peer in peers[1:]:
                deadline = time.monotonic() + 30
                while not any(g["gid"] == gid for g in peer.call("list_groups")):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{peer.name} never saw the group")
                    peer.call("advertise")
                    time.sleep(0.2)
                peer.call("join_group", {"gid": gid}, timeout=60)
            info: dict = {}
            for peer in peers:
                deadline = time.monotonic() + 30
                while len((info := next(g for g in peer.call("list_groups") if g["gid"] == gid))["members"]) < 3:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{peer.name} does not see three members")
                    time.sleep(0.1)
            names_by_pid = {p.pid: p.name for p in peers}
            tracer.line(f"bench: peers {json.dumps(names_by_pid)} gid {gid}")
            if trace_path:
                observer = start_observer(side, lan, info["addr"], info["port"], trace_path.with_suffix(".wire"))
            for host in range(4 if not trace_path else 3):
                lan.set_loss(host, LOSS)
            sent: list[str] = []
            current = list(peers)
            tracer.t0 = time.time()
            tracer.watch(lambda: list(current), lambda: set(sent))
            for phase in phases:
                tracer.line(f"bench: === phase {phase}: sending")
                if phase == "burst":
                    last = send_from_all(current, gid, BURST_PER_MEMBER, rng, "burst", sent)
                elif phase == "cut":
                    lan.set_link(2, False)
                    time.sleep(0.6)  # the cut-off peer notices its link is gone
                    last = send_from_all(current[:2], gid, CUT_PER_MEMBER, rng, "cut", sent)
                    lan.set_link(2, True)
                    tracer.line("bench: link of C restored")
                else:
                    last = kill_phase(side, lan, current, gid, rng, sent, work, tracer, peer_trace)
                expected = set(sent)
                tracer.line(f"bench: last send ({time.monotonic() - last:.3f} s ago); {len(expected)} messages expected")
                results[phase] = wait_complete(current, expected, last, args.timeout)
                tracer.line(f"bench: === phase {phase} complete after {fmt(results[phase], args.timeout)} s")
                if results[phase] is None:
                    tracer.line("bench: missing " + json.dumps({p.name: sorted(expected - set(p.arrived))[:50]
                                                                for p in current}))
                    break
            for peer in current:
                peer.stop()
    finally:
        for peer in RpcPeer.started:
            if peer.proc.poll() is None:
                peer.kill()
        RpcPeer.started.clear()
        if observer is not None:
            observer.kill()
            observer.wait()
        tracer.close(trace_path.with_suffix(".wire") if trace_path else None, names_by_pid)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return results


def kill_phase(side: Side, lan, current: list[RpcPeer], gid: str, rng: random.Random, sent: list[str],
               work: Path, tracer: Tracer, peer_trace: Path | None) -> float:
    """Messages flow from two members; the third is killed, then restarted while they go on."""
    victim = current[2]
    counter = itertools.count(1)
    restarted: list[RpcPeer] = []
    ready_at: list[float] = []
    ready = threading.Event()
    lock = threading.Lock()

    def restart() -> None:
        peer = RpcPeer(side, lan.hosts[2], lan.addresses[2], work / victim.name, victim.name, peer_trace)
        peer.note_stored(gid)
        restarted.append(peer)
        ready_at.append(time.monotonic())
        tracer.line(f"bench: {victim.name} restarted and answering")
        ready.set()

    def on_each() -> None:
        with lock:
            n = next(counter)
        if n == KILL_AFTER:
            victim.kill()
            tracer.line(f"bench: {victim.name} killed (-9)")
        elif n == RESTART_AFTER:
            tracer.line(f"bench: restarting {victim.name}")
            threading.Thread(target=restart, daemon=True).start()

    last = send_from_all(current[:2], gid, KILL_PER_MEMBER, rng, "kill", sent, on_each)
    if not ready.wait(120):
        raise RuntimeError("the restarted peer did not answer")
    current[2] = restarted[0]
    return max(last, ready_at[0])


def start_observer(side: Side, lan, addr: str, port: int, out: Path) -> subprocess.Popen:
    observer = subprocess.Popen(["ip", "netns", "exec", lan.hosts[3], str(side.python), "-I", "-c", OBSERVER_SCRIPT,
                                 lan.addresses[3], addr, str(port), str(out)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert observer.stdout is not None
    observer.stdout.readline()  # "listening"
    return observer


def baseline_side(commit: str) -> Side:
    """The peer of ``commit``: exported with git archive, installed once into a cached venv."""
    repo = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=Path(__file__).resolve().parent,
                               check=True, capture_output=True, text=True).stdout.strip())
    full = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", f"{commit}^{{commit}}"],
                          check=True, capture_output=True, text=True).stdout.strip()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "m2mc-bench" / f"baseline-{full[:12]}"
    venv = cache / "venv"
    if not (venv / ".installed").exists():
        print(f"installing {full[:12]} into {venv} (once)", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="m2mc-baseline-") as export:
            archive = subprocess.run(["git", "-C", str(repo), "archive", full], check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", export], input=archive, check=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", export], check=True)
        (venv / ".installed").touch()
    return Side(f"base-{full[:7]}", venv / "bin" / "m2mc-peer", venv / "bin" / "python")


def fmt(value: float | None, timeout: float) -> str:
    return f">{timeout:.0f}" if value is None else f"{value:.1f}"


def summary(sides: list[Side], phases: list[str], timeout: float) -> list[str]:
    lines = []
    medians: dict[tuple[str, str], float] = {}
    for phase in phases:
        for side in sides:
            values = side.results[phase]
            if not values:
                continue
            # A phase that timed out counts as the timeout (a lower bound of the truth).
            numbers = [timeout if v is None else v for v in values]
            median = statistics.median(numbers)
            medians[(phase, side.label)] = median
            lines.append(f"{phase:6} {side.label:14} runs {', '.join(fmt(v, timeout) for v in values)}"
                         f"  median {median:.1f}  max {fmt(None if None in values else max(numbers), timeout)}")
        if len(sides) == 2 and (phase, sides[0].label) in medians and (phase, sides[1].label) in medians:
            base, current = medians[(phase, sides[0].label)], medians[(phase, sides[1].label)]
            ratio = current / base if base else float("inf")
            lines.append(f"{phase:6} median {sides[1].label} / {sides[0].label} = {ratio:.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per side (default 10)")
    parser.add_argument("--phases", default=",".join(PHASES), help="which of burst,cut,kill, in that order")
    parser.add_argument("--baseline", default="957b8ce", help="commit to compare with, or 'none'")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds a phase may take (default 90)")
    parser.add_argument("--trace", metavar="DIR", help="write a trace per run into DIR")
    parser.add_argument("--keep", action="store_true", help="keep the peers' data dirs")
    args = parser.parse_args(argv)
    phases = [p for p in args.phases.split(",") if p]
    if not phases or any(p not in PHASES for p in phases):
        parser.error(f"--phases takes names from {','.join(PHASES)}")
    from tests.testbed.netns import Lan  # the test bed lives beside the package, in the checkout

    if shutil.which("iptables") is None:
        parser.error("iptables is missing (it drops the 20 %): run packaging/system-deps.sh")
    if args.trace:
        Path(args.trace).mkdir(parents=True, exist_ok=True)
    here = Path(sys.executable).parent
    sides = [Side("current", here / "m2mc-peer", Path(sys.executable))]
    if args.baseline != "none":
        sides.insert(0, baseline_side(args.baseline))
    print(f"{args.runs} runs per side, phases {','.join(phases)}, {LOSS:.0%} loss on every host, "
          f"{os.cpu_count()} cores", flush=True)
    for run in range(1, args.runs + 1):
        for side in sides:
            results = one_run(side, run, phases, args, Lan)
            for phase in phases:
                side.results[phase].append(results.get(phase))
            print(f"run {run:2} {side.label:14} " + "  ".join(
                f"{p} {fmt(results[p], args.timeout) if p in results else '-'}" for p in phases), flush=True)
    print()
    for line in summary(sides, phases, args.timeout):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
