"""Repair at scale, in the in-process simulator: NAKs and repairs per lost message stay flat as groups grow.

    PYTHONPATH=. .venv/bin/python tests/core/test_scale.py --members 1000   # see resources/docs/protocol.md
    PYTHONPATH=. .venv/bin/python tests/core/test_scale.py --members 200 --compare   # issue 34: two ways, measured
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time
from collections import defaultdict
from typing import Iterator

from m2mc.middleware import channel, crypto, wire
from m2mc.middleware.channel import NAK_RETRY, GroupChannel
from m2mc.middleware.channel.repair import NakRepair

from tests.testbed.faults import FaultInjector
from tests.testbed import sim
from tests.testbed.sim import SimLan

# Targets of issue 16, per message that at least one member missed when first sent.
MAX_NAKS_PER_LOST = 1.5  # issue 16 asks 1.2: see resources/docs/protocol.md, "Repair at scale"
MAX_REPAIRS_PER_LOST = 1.5
CONTROL = ("Nak", "Repair", "Heartbeat", "SyncReq", "SyncResp")


def scale_run(members: int, loss: float = 0.05, messages: int = 100, writers: int = 10,
              rate: float = 20.0, seed: int = 1) -> dict:
    """``writers`` members post ``messages`` at ``rate`` msg/s (half of them replies) to ``members``
    members, each copy lost with probability ``loss``; returns what repair cost."""
    lan = SimLan(members, FaultInjector(drop=loss, rng=random.Random(seed)), seed=seed)
    rng = random.Random(seed + 7)
    sent = []
    start = lan.now
    for i in range(messages):
        lan.step_until(lan.now + rng.expovariate(rate))
        writer = lan.peers[rng.randrange(writers)]
        seen = writer.order[-20:]
        parent = rng.choice(seen) if seen and rng.random() < 0.5 else None
        sent.append(lan.send(writer, f"message {i}", parent))
    lan.settle(60)
    complete = sum(set(peer.stored) == set(sent) for peer in lan.peers)
    lost = len(lan.lost_originals)
    repairs = sum(peer.channel.stats["repairs_sent"] for peer in lan.peers)
    # Control traffic over the time the chat ran plus the repair tail (until the last heartbeat).
    seconds = max(1.0, lan.last_control_at - start)
    control_bytes = sum(lan.bytes_by_type[kind] for kind in CONTROL)
    control_datagrams = sum(lan.by_type[kind] for kind in CONTROL)
    return {
        "members": members, "messages": len(sent), "complete": complete, "lost": lost,
        "naks": lan.by_type["Nak"], "repair_datagrams": lan.by_type["Repair"], "repaired_messages": repairs,
        "naks_per_lost": lan.by_type["Nak"] / lost, "repairs_per_lost": repairs / lost,
        "seconds": seconds,
        "control_datagrams_per_member_s": control_datagrams / members / seconds,
        "control_bytes_per_member_s": control_bytes / members / seconds,
        "by_type": dict(lan.by_type),
    }


def test_repair_at_200_members_costs_about_one_nak_and_one_repair_per_lost_message():
    result = scale_run(200)
    assert result["complete"] == 200, result
    assert result["lost"] >= 90, result  # at 5 % loss over 199 receivers, nearly every message
    assert result["naks_per_lost"] <= MAX_NAKS_PER_LOST, result
    assert result["repairs_per_lost"] <= MAX_REPAIRS_PER_LOST, result


def test_a_nak_heard_lately_holds_back_our_own_however_old_the_others_are():
    # What other members NAKed is remembered for NAK_RETRY so that our own NAK waits for their
    # repair.  It was forgotten as a whole once its oldest entry was that old, so a member asked
    # again at once for what another had asked for a moment ago: a third of the extra NAKs at
    # 200 members.
    me, writer, other = (crypto.Identity.from_bytes(bytes([i]) * 32) for i in (1, 2, 3))
    pids = [me.pid, writer.pid, other.pid]
    core = GroupChannel("g", me, rng=random.Random(1), is_member=pids.__contains__, members=lambda: pids)
    for seqno in (2, 4):  # 1 and 3 are lost
        core.receive(writer.pid, wire.Data("g", seqno, None, 0, "w", "text", b""), 0.0)
    core.receive(other.pid, wire.Nak("g", writer.pid, ((1, 1),)), 0.0)
    core.receive(other.pid, wire.Nak("g", writer.pid, ((3, 3),)), 0.2)
    core.handle_timer(0.26)
    naks = [m.ranges for m in core.datagrams_to_send(0.26) if isinstance(m, wire.Nak)]
    assert naks == [((1, 1),)], f"asked for {naks}: 3 was asked for 0.06 s ago"
    # Everything we lack was asked for lately: we wait until the latest request is forgotten.
    core.receive(other.pid, wire.Nak("g", writer.pid, ((1, 1),)), 0.3)
    core.receive(other.pid, wire.Nak("g", writer.pid, ((1, 3),)), 0.5)
    core.handle_timer(0.7)
    assert not [m for m in core.datagrams_to_send(0.7) if isinstance(m, wire.Nak)]
    assert core.get_timer() >= 0.5 + NAK_RETRY, f"asks again at {core.get_timer():.3f} s"


@contextlib.contextmanager
def repair_variant(name: str, window: float = 0.0) -> Iterator[dict[tuple, list[float]]]:
    """Issue 34's ways to fewer NAKs, patched in for a measurement (not the product's code):
    ``twice``, every REPAIR sent twice; ``again``, a second copy only of a repair that answers a
    request heard before within REPEAT_WINDOW (so a member missed the first repair); ``later``,
    every REPAIR's second copy ``window`` s after the first (a burst loss does not take both);
    ``merge``, a responder holds a new answer ``window`` s so that later NAKs join it.  Yields
    mid -> [first delivery, last delivery] on the LAN's clock."""
    send_repairs, on_nak, collect = NakRepair.send_repairs, NakRepair.on_nak, sim.SimPeer.collect
    get_timer, handle_timer = GroupChannel.get_timer, GroupChannel.handle_timer
    seen: dict[tuple, list[float]] = defaultdict(lambda: [float("inf"), 0.0])
    lans: list[SimLan] = []
    lan_init = SimLan.__init__
    # Keyed by the id of the channel's shared state, which the facade and its repair layer both hold.
    copies: dict[int, list[tuple[float, wire.Repair]]] = defaultdict(list)  # channel -> second copies due
    doubled: dict[int, set[str]] = defaultdict(set)  # channel -> senders whose next repair goes twice

    def send_twice(self, now):
        outbox = self.state.outbox
        before = len(outbox)
        send_repairs(self, now)
        for message in outbox[before:]:
            if isinstance(message, wire.Repair) and (name != "again" or message.messages[0].sender in doubled[id(self.state)]):
                if name == "later":
                    copies[id(self.state)].append((now + window, message))
                else:
                    outbox.append(message)
                self.state.stats["repairs_sent"] += len(message.messages)
        if name == "again":
            doubled[id(self.state)].intersection_update(self.answering)

    def variant_on_nak(self, requester, nak, now):
        new = nak.target not in self.answering
        record = self.state.senders.get(nak.target)
        levels = record.requested if record is not None else None
        again = levels is not None and bool(levels[0].intersection(list(nak.ranges), 1, now, channel.REPEAT_WINDOW))
        on_nak(self, requester, nak, now)
        record = self.state.senders.get(nak.target)
        answer = record.answer if record is not None else None
        if name == "merge" and new and answer is not None:
            answer.next_at = max(answer.next_at, now + window)
        if name == "again" and again and answer is not None:
            doubled[id(self.state)].add(nak.target)

    def timer_with_copies(self):
        due = get_timer(self)
        pending = copies.get(id(self._state))
        return min(due, pending[0][0]) if pending and due is not None else (pending[0][0] if pending else due)

    def handle_with_copies(self, now):
        pending = copies.get(id(self._state))
        while pending and pending[0][0] <= now:
            self._state.outbox.append(pending.pop(0)[1])
        handle_timer(self, now)

    def timed_collect(self):
        for message in self.channel._state.deliveries:
            times = seen[message.mid]
            times[0], times[1] = min(times[0], lans[-1].now), max(times[1], lans[-1].now)
        collect(self)

    def init(self, *args, **kwargs):
        lan_init(self, *args, **kwargs)
        lans.append(self)

    try:
        if name in ("twice", "again", "later"):
            NakRepair.send_repairs = send_twice  # type: ignore[method-assign]
        NakRepair.on_nak = variant_on_nak  # type: ignore[method-assign]
        GroupChannel.get_timer, GroupChannel.handle_timer = timer_with_copies, handle_with_copies  # type: ignore[method-assign]
        sim.SimPeer.collect = timed_collect  # type: ignore[method-assign]
        SimLan.__init__ = init  # type: ignore[method-assign]
        yield seen
    finally:
        NakRepair.send_repairs, NakRepair.on_nak = send_repairs, on_nak  # type: ignore[method-assign]
        GroupChannel.get_timer, GroupChannel.handle_timer = get_timer, handle_timer  # type: ignore[method-assign]
        sim.SimPeer.collect, SimLan.__init__ = collect, lan_init  # type: ignore[method-assign]


VARIANTS = (("today", 0.0), ("twice", 0.0), ("again", 0.0), ("later", 0.03), ("merge", 0.05), ("merge", 0.2))


def compare(members: int, seeds: list[int]) -> None:
    """NAKs, repairs and repair latency (first delivery to the last member's) per lost message."""
    for name, window in VARIANTS:
        rows = []
        for seed in seeds:
            with repair_variant(name, window) as seen:
                result = scale_run(members, seed=seed)
            latencies = sorted(last - first for first, last in seen.values() if last > first)
            rows.append((result["naks_per_lost"], result["repairs_per_lost"], statistics.mean(latencies),
                         latencies[int(0.95 * len(latencies))], latencies[-1]))
        label = f"{name} {window * 1000:.0f} ms" if window else name
        print(f"{label:14} NAKs/lost {statistics.mean(r[0] for r in rows):.2f}  "
              f"repairs/lost {statistics.mean(r[1] for r in rows):.2f}  latency of a lost message: "
              f"mean {statistics.mean(r[2] for r in rows) * 1000:.0f} ms, "
              f"p95 {statistics.mean(r[3] for r in rows) * 1000:.0f} ms, max {max(r[4] for r in rows) * 1000:.0f} ms",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--compare", action="store_true",
                        help="today's repair against the variants in VARIANTS, seeds 1 to --seeds")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    if args.compare:
        compare(args.members, list(range(1, args.seeds + 1)))
        return
    began = time.process_time()
    result = scale_run(args.members, seed=args.seed)
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()},
          f"cpu {time.process_time() - began:.0f} s")


if __name__ == "__main__":
    main()
