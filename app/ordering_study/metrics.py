"""Turns a simulation result into the study's figures for one policy and scenario.

Only copies at receivers count (a sender's own message is not received).
Delivery delay is receipt to delivery at one receiver; a copy is *held* when
that delay is above zero.  A parent violation is a reply delivered at a
receiver before the message it answers (the writers of both are left out:
they saw the parent before anyone).

For a scenario with operations, ``summarize(..., operations=True)`` measures
operation copies only, and a violation is an operation delivered before the
message it acts on or before the last operation on the same object that its
writer had delivered when sending it (the object order OBG keeps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .simulator import PolicyClass, SimResult

HELD_EPSILON_MS = 1e-9

COLUMNS = (
    "scenario",
    "policy",
    "processes",
    "messages",
    "mean_delay_ms",
    "p50_delay_ms",
    "p99_delay_ms",
    "held_fraction",
    "parent_violations",
    "header_bytes",
    "control_bytes_per_msg",
    "mean_end_to_end_ms",
)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (q in [0, 100])."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


def _at(ms: float | None) -> float:
    """A receipt or delivery time of a copy that arrived: simulate() fails on one that never did."""
    assert ms is not None, "a copy that never arrived (simulate() refuses such a run)"
    return ms


def delivery_delays(result: SimResult, operations: bool = False) -> list[float]:
    delays = []
    for k, msg in enumerate(result.workload.messages):
        if operations and not msg.op:
            continue
        receipts, deliveries = result.receipt_ms[k], result.delivery_ms[k]
        for r in range(result.workload.processes):
            if r != msg.sender:
                delays.append(_at(deliveries[r]) - _at(receipts[r]))
    return delays


def parent_violations(result: SimResult) -> tuple[int, int]:
    """``(violations, checked)`` over (reply, receiver) pairs."""
    position = [{index: i for i, index in enumerate(log)} for log in result.logs]
    messages = result.workload.messages
    violations = checked = 0
    for msg in messages:
        if msg.parent is None:
            continue
        parent_sender = messages[msg.parent].sender
        for r, seen in enumerate(position):
            if r == msg.sender or r == parent_sender:
                continue
            checked += 1
            if seen[msg.index] < seen[msg.parent]:
                violations += 1
    return violations, checked


def object_violations(result: SimResult) -> tuple[int, int]:
    """``(violations, checked)`` over (operation, receiver) pairs: see the module docstring."""
    messages = result.workload.messages
    must_follow: dict[int, list[int]] = {}
    for events in result.events:
        last_on: dict[tuple, int] = {}
        for kind, index in events:
            msg = messages[index]
            if not msg.op:
                continue
            key = msg.object_key
            if key is None:  # an operation always acts on an object
                continue
            if kind == "send":
                before = [j for j in (msg.parent, last_on.get(key)) if j is not None]
                must_follow[index] = before
            last_on[key] = index
    position = [{index: i for i, index in enumerate(log)} for log in result.logs]
    violations = checked = 0
    for index, before in must_follow.items():
        writer = messages[index].sender
        for r, seen in enumerate(position):
            if r == writer or not before:
                continue
            checked += 1
            if any(seen[j] > seen[index] for j in before):
                violations += 1
    return violations, checked


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    policy: str
    processes: int
    messages: int
    mean_delay_ms: float
    p50_delay_ms: float
    p99_delay_ms: float
    held_fraction: float
    parent_violations: float
    header_bytes: int
    control_bytes_per_msg: float
    mean_end_to_end_ms: float

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in COLUMNS}


def summarize(scenario: str, result: SimResult, policy_cls: PolicyClass, operations: bool = False) -> Row:
    delays = sorted(delivery_delays(result, operations))
    violations, checked = object_violations(result) if operations else parent_violations(result)
    workload = result.workload
    n, m = workload.processes, len(workload.messages)
    end_to_end = [
        _at(result.delivery_ms[k][r]) - result.send_ms[k]
        for k, msg in enumerate(workload.messages)
        for r in range(n)
        if r != msg.sender and (msg.op or not operations)
    ]
    control = sum(
        count * policy_cls.control_bytes(kind, n) for kind, count in result.control_packets.items()
    )
    return Row(
        scenario=scenario,
        policy=policy_cls.name,
        processes=n,
        messages=m,
        mean_delay_ms=sum(delays) / len(delays),
        p50_delay_ms=percentile(delays, 50),
        p99_delay_ms=percentile(delays, 99),
        held_fraction=sum(1 for d in delays if d > HELD_EPSILON_MS) / len(delays),
        parent_violations=violations / checked if checked else 0.0,
        header_bytes=policy_cls.header_bytes(n),
        control_bytes_per_msg=control / m,
        mean_end_to_end_ms=sum(end_to_end) / len(end_to_end),
    )
