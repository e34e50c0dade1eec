"""Fault injection for tests: a datagram path that drops, delays, reorders and duplicates.

Like JGroups' DISCARD, DELAY, SHUFFLE and DUPL layers, but as one seeded
object: ``arrivals(now)`` says when each copy of a datagram sent at ``now``
arrives (an empty list: dropped).  Reordering comes from the random delays.
It reads no clock and opens no socket, so tests drive it by hand.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class FaultInjector:
    drop: float = 0.0  # probability that a datagram is lost
    duplicate: float = 0.0  # probability that a delivered datagram arrives twice
    delay: tuple[float, float] = (0.0002, 0.0005)  # uniform one-way delay (s)
    reorder: float = 0.0  # probability of an extra delay of up to ``reorder_by``
    reorder_by: float = 0.01
    rng: random.Random = field(default_factory=lambda: random.Random(1))
    cut: bool = False  # the link is down: everything is lost

    def arrivals(self, now: float) -> list[float]:
        if self.cut or self.rng.random() < self.drop:
            return []
        copies = 2 if self.rng.random() < self.duplicate else 1
        times = []
        for _ in range(copies):
            at = now + self.rng.uniform(*self.delay)
            if self.rng.random() < self.reorder:
                at += self.rng.uniform(0, self.reorder_by)
            times.append(at)
        return times
