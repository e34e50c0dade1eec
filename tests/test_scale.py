"""Repair at scale, in the in-process simulator: NAKs and repairs per lost message stay flat as groups grow.

    PYTHONPATH=. .venv/bin/python tests/test_scale.py --members 1000   # the documented run (README)
    PYTHONPATH=. .venv/bin/python tests/test_scale.py --members 200 --compare   # issue 34: two ways, measured
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import time
from collections import defaultdict
from typing import Iterator

from m2mc.middleware import wire
from m2mc.middleware.channel import GroupChannel

from tests.testbed.faults import FaultInjector
import sim
from sim import SimLan

# Targets of issue 16, per message that at least one member missed when first sent.
MAX_NAKS_PER_LOST = 1.5  # issue 16 asks 1.2: see README, "Repair at scale"
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


@contextlib.contextmanager
def repair_variant(name: str, window: float = 0.0) -> Iterator[dict[tuple, list[float]]]:
    """Issue 34's two ways to fewer NAKs, patched in for a measurement (not the product's code):
    ``twice``, every REPAIR sent twice; ``merge``, a responder holds a new answer ``window`` s so
    that later NAKs join it.  Yields mid -> [first delivery, last delivery] on the LAN's clock."""
    send_repairs, on_nak, collect = GroupChannel._send_repairs, GroupChannel._on_nak, sim.SimPeer.collect
    seen: dict[tuple, list[float]] = defaultdict(lambda: [float("inf"), 0.0])
    lans: list[SimLan] = []
    lan_init = SimLan.__init__

    def send_twice(self, now):
        before = len(self._outbox)
        send_repairs(self, now)
        for message in self._outbox[before:]:
            if isinstance(message, wire.Repair):
                self._outbox.append(message)
                self.stats["repairs_sent"] += len(message.messages)

    def merged(self, requester, nak, now):
        new = nak.target not in self._answers
        on_nak(self, requester, nak, now)
        answer = self._answers.get(nak.target)
        if new and answer is not None:
            answer.next_at = max(answer.next_at, now + window)

    def timed_collect(self):
        for message in self.channel._deliveries:
            times = seen[message.mid]
            times[0], times[1] = min(times[0], lans[-1].now), max(times[1], lans[-1].now)
        collect(self)

    def init(self, *args, **kwargs):
        lan_init(self, *args, **kwargs)
        lans.append(self)

    try:
        GroupChannel._send_repairs = send_twice if name == "twice" else send_repairs  # type: ignore[method-assign]
        GroupChannel._on_nak = merged if name == "merge" else on_nak  # type: ignore[method-assign]
        sim.SimPeer.collect = timed_collect  # type: ignore[method-assign]
        SimLan.__init__ = init  # type: ignore[method-assign]
        yield seen
    finally:
        GroupChannel._send_repairs, GroupChannel._on_nak = send_repairs, on_nak  # type: ignore[method-assign]
        sim.SimPeer.collect, SimLan.__init__ = collect, lan_init  # type: ignore[method-assign]


def compare(members: int, seeds: list[int]) -> None:
    """NAKs, repairs and repair latency (first delivery to the last member's) per lost message."""
    for name, window in (("today", 0.0), ("twice", 0.0), ("merge", 0.05), ("merge", 0.2)):
        rows = []
        for seed in seeds:
            with repair_variant(name, window) as seen:
                result = scale_run(members, seed=seed)
            latencies = sorted(last - first for first, last in seen.values() if last > first)
            rows.append((result["naks_per_lost"], result["repairs_per_lost"], statistics.mean(latencies),
                         latencies[int(0.95 * len(latencies))], latencies[-1]))
        label = name if name != "merge" else f"merge {window * 1000:.0f} ms"
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
                        help="today's repair against a REPAIR sent twice and answers merged over 50 and 200 ms, seeds 1-3")
    args = parser.parse_args()
    if args.compare:
        compare(args.members, [1, 2, 3])
        return
    began = time.process_time()
    result = scale_run(args.members, seed=args.seed)
    print({k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()},
          f"cpu {time.process_time() - began:.0f} s")


if __name__ == "__main__":
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    main()
