"""The point-to-point part of the ordering study: direct messages under SES, per-pair FIFO and arrival order.

Peers write direct messages to one another as a Poisson process.  With
probability ``follow_prob`` a message *follows up* one the writer received
among its ``recent`` latest: it is sent ``think_ms`` after the writer read
(delivered) that message, to the message's sender (an answer) or to a third
peer (``"I told B"``; the issue's A -> B, A -> C, C -> B chain).  Every message
goes to one destination only, over the profile's network (loss is repaired by
resending, as the direct channel does), so only the destination's order
matters.

A *violation* is a message delivered before another message to the same peer
that causally precedes it (Lamport's happened-before over the run's own send
and delivery events): what SES exists to prevent.  Per-pair FIFO prevents it
only between two messages of one sender; arrival order not at all.

The workload's random draws (writers, destinations, follow-ups, think times,
transit times) are made once, so every policy runs on the same trace; a
follow-up's send time depends on when its writer delivered what it follows.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

from ...middleware.ses import Ses, SesStamp
from .metrics import Row, percentile
from .network import LOSSY_WIRELESS, WIRELESS, NetworkProfile, Transit
from .policies import INT_BYTES

HELD_EPSILON_MS = 1e-9


@dataclass(frozen=True, slots=True)
class DirectParams:
    processes: int = 4
    messages: int = 2000
    rate_per_process_hz: float = 0.3
    follow_prob: float = 0.6
    answer_prob: float = 0.5
    """Of the follow-ups, the share sent back to the followed message's sender; the rest go to a third peer."""
    recent: int = 4
    think_median_ms: float = 400.0
    think_sigma: float = 0.8

    def __post_init__(self) -> None:
        if self.processes < 3:
            raise ValueError("a causal chain across pairs needs at least 3 peers")
        if self.messages < 1:
            raise ValueError("the workload needs at least 1 message")


@dataclass(frozen=True, slots=True)
class DirectMessage:
    index: int
    sender: int
    destination: int
    follows: int | None
    """The message (received by ``sender``) this one follows up; None for a new one."""
    decided_ms: float
    think_ms: float


@dataclass(frozen=True, slots=True)
class DirectWorkload:
    processes: int
    messages: tuple[DirectMessage, ...]
    transit_ms: tuple[float, ...]
    """Time for message k to reach its destination, resends included."""
    profile: NetworkProfile


def generate_direct(params: DirectParams, profile: NetworkProfile, seed: int) -> DirectWorkload:
    rng = random.Random(f"direct/{seed}/{profile.name}/{params.processes}")
    n = params.processes
    scales = profile.receiver_scales(n, rng)
    transit = Transit(profile, scales, f"direct-data/{seed}/{profile.name}/{n}")
    rate_per_ms = params.rate_per_process_hz * n / 1000.0
    messages: list[DirectMessage] = []
    received: list[list[int]] = [[] for _ in range(n)]
    now = 0.0
    for k in range(params.messages):
        now += rng.expovariate(rate_per_ms)
        sender = rng.randrange(n)
        think = params.think_median_ms * rng.lognormvariate(0.0, params.think_sigma)
        follows = None
        recent = received[sender][-params.recent:]
        if recent and rng.random() < params.follow_prob:
            follows = rng.choice(recent)
        if follows is not None and rng.random() < params.answer_prob:
            destination = messages[follows].sender
        else:
            destination = rng.choice([p for p in range(n) if p != sender])
        messages.append(DirectMessage(k, sender, destination, follows, now, think))
        received[destination].append(k)
    transit_ms = tuple(transit.broadcast(m.sender)[m.destination] for m in messages)
    return DirectWorkload(n, tuple(messages), transit_ms, profile)


# -- policies: one instance per peer; receive() returns the indices delivered now, in order -------------------

def _pid(process: int) -> str:
    return f"{process + 1:032x}"


class DirectPolicy:
    name = ""

    def __init__(self, me: int) -> None:
        self.me = me

    def stamp(self, destination: int) -> object:
        return None

    def receive(self, sender: int, index: int, header: object, now: float) -> list[int]:
        return [index]

    @staticmethod
    def header_bytes(header: object) -> int:
        return 0


class ArrivalPolicy(DirectPolicy):
    name = "none"


class PairFifoPolicy(DirectPolicy):
    """Per-pair FIFO: a numbered stream per (sender, destination); a gap holds what follows it."""

    name = "pair_fifo"

    def __init__(self, me: int) -> None:
        super().__init__(me)
        self.sent: dict[int, int] = {}
        self.expected: dict[int, int] = {}
        self.waiting: dict[int, dict[int, int]] = {}

    def stamp(self, destination: int) -> object:
        self.sent[destination] = self.sent.get(destination, 0) + 1
        return self.sent[destination]

    def receive(self, sender: int, index: int, header: object, now: float) -> list[int]:
        assert isinstance(header, int)
        waiting = self.waiting.setdefault(sender, {})
        waiting[header] = index
        delivered = []
        expected = self.expected.get(sender, 1)
        while expected in waiting:
            delivered.append(waiting.pop(expected))
            expected += 1
        self.expected[sender] = expected
        return delivered

    @staticmethod
    def header_bytes(header: object) -> int:
        return INT_BYTES


class SesPolicy(DirectPolicy):
    """The product's ``middleware.ses.Ses``."""

    name = "ses"

    def __init__(self, me: int) -> None:
        super().__init__(me)
        self.core = Ses(_pid(me))

    def stamp(self, destination: int) -> object:
        return self.core.stamp(_pid(destination))

    def receive(self, sender: int, index: int, header: object, now: float) -> list[int]:
        assert isinstance(header, SesStamp)
        delivered = self.core.receive(_pid(sender), index, header, now / 1000.0)
        assert delivered is not None, "the study's holds stay far below the caps"
        return [key for key in delivered if isinstance(key, int)]

    @staticmethod
    def header_bytes(header: object) -> int:
        """The study's convention: 4-byte ints and 4-byte process numbers (the wire uses 16-byte pids)."""
        assert isinstance(header, SesStamp)
        pair = 2 * INT_BYTES
        return len(header.clock) * pair + sum(INT_BYTES + len(vector) * pair for _, vector in header.buffer)


DIRECT_POLICIES: dict[str, Callable[[int], DirectPolicy]] = {
    cls.name: cls for cls in (SesPolicy, PairFifoPolicy, ArrivalPolicy)
}


# -- the simulation -------------------------------------------------------------------------------------

@dataclass
class DirectResult:
    policy: str
    workload: DirectWorkload
    send_ms: list[float]
    receipt_ms: list[float]
    delivery_ms: list[float]
    events: list[list[tuple[str, int]]]
    """Per peer, ``("send"|"deliver", index)`` in the order they happened."""
    header_bytes: list[int]


def simulate_direct(workload: DirectWorkload, policy: str) -> DirectResult:
    n, m = workload.processes, len(workload.messages)
    nodes = [DIRECT_POLICIES[policy](p) for p in range(n)]
    nan = float("nan")
    result = DirectResult(policy, workload, [nan] * m, [nan] * m, [nan] * m, [[] for _ in range(n)], [0] * m)
    queue: list[tuple[float, int, str, int]] = []
    tie = itertools.count()
    headers: list[object] = [None] * m
    followers: dict[int, list[int]] = {}
    for msg in workload.messages:
        if msg.follows is None:
            heapq.heappush(queue, (msg.decided_ms, next(tie), "send", msg.index))
        else:
            followers.setdefault(msg.follows, []).append(msg.index)
    while queue:
        now, _, kind, index = heapq.heappop(queue)
        msg = workload.messages[index]
        if kind == "send":
            headers[index] = nodes[msg.sender].stamp(msg.destination)
            result.header_bytes[index] = nodes[msg.sender].header_bytes(headers[index])
            result.send_ms[index] = now
            result.events[msg.sender].append(("send", index))
            heapq.heappush(queue, (now + workload.transit_ms[index], next(tie), "arrive", index))
            continue
        result.receipt_ms[index] = now
        for delivered in nodes[msg.destination].receive(msg.sender, index, headers[index], now):
            result.delivery_ms[delivered] = now
            result.events[msg.destination].append(("deliver", delivered))
            for follower in followers.pop(delivered, ()):
                at = now + workload.messages[follower].think_ms
                heapq.heappush(queue, (at, next(tie), "send", follower))
    missing = sum(1 for at in result.delivery_ms if at != at)
    if missing:
        raise RuntimeError(f"{policy}: {missing} direct messages never delivered")
    return result


def causal_violations(result: DirectResult) -> int:
    """Messages delivered before a message to the same peer that happened before them."""
    workload = result.workload
    timeline = []
    for peer, events in enumerate(result.events):
        for order, (kind, index) in enumerate(events):
            at = result.send_ms[index] if kind == "send" else result.delivery_ms[index]
            timeline.append((at, peer, order, kind, index))
    timeline.sort()
    known = [0] * workload.processes       # bitmask of the messages in each peer's causal past
    delivered = [0] * workload.processes
    addressed = [0] * workload.processes
    for msg in workload.messages:
        addressed[msg.destination] |= 1 << msg.index
    past: dict[int, int] = {}
    violations = 0
    for _, peer, _, kind, index in timeline:
        if kind == "send":
            past[index] = known[peer]
            known[peer] |= 1 << index
        else:
            if past[index] & addressed[peer] & ~delivered[peer]:
                violations += 1
            delivered[peer] |= 1 << index
            known[peer] |= past[index] | 1 << index
    return violations


def summarize_direct(scenario: str, result: DirectResult) -> Row:
    delays = sorted(d - r for d, r in zip(result.delivery_ms, result.receipt_ms))
    m = len(delays)
    end_to_end = [d - s for d, s in zip(result.delivery_ms, result.send_ms)]
    return Row(
        scenario=scenario,
        policy=result.policy,
        processes=result.workload.processes,
        messages=m,
        mean_delay_ms=sum(delays) / m,
        p50_delay_ms=percentile(delays, 50),
        p99_delay_ms=percentile(delays, 99),
        held_fraction=sum(1 for d in delays if d > HELD_EPSILON_MS) / m,
        parent_violations=causal_violations(result) / m,
        header_bytes=round(sum(result.header_bytes) / m),
        control_bytes_per_msg=0.0,
        mean_end_to_end_ms=sum(end_to_end) / m,
    )


DIRECT_SCENARIOS = (("direct", WIRELESS), ("direct_loss", LOSSY_WIRELESS))
DIRECT_ABOUT = {
    "direct": "4 peers, direct messages with follow-ups (think 0.4 s), wireless; viol: before a causal predecessor",
    "direct_loss": "direct on wireless + 5% loss, resent after 200 ms",
}


def run_direct(messages: int, seed: int, processes: int = 4) -> list[Row]:
    """The SES, per-pair FIFO and arrival-order rows of the point-to-point scenarios."""
    rows = []
    for scenario, profile in DIRECT_SCENARIOS:
        workload = generate_direct(DirectParams(processes=processes, messages=messages), profile, seed)
        for policy in DIRECT_POLICIES:
            rows.append(summarize_direct(scenario, simulate_direct(workload, policy)))
    return rows
