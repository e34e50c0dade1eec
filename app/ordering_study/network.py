"""Network and clock profiles of the ordering study, and the transit-time sampler.

A profile says how long a broadcast packet takes to reach one receiver: a
base delay distribution, a fixed per-receiver scale (receivers sit at different
distances, so each has its own delay distribution), a loss probability per
attempt and the time before a lost packet is sent again.  It also carries the
clock parameters of the physical+linear policy: the clock accuracy bound
lambda and the delay bound delta that policy trusts, and the idle time after
which the linear-clock policy sends a null message.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

MAX_DELAY_MS = 2_000.0
"""Heavy tails are cut here: a copy later than this would be treated as lost and resent."""


@dataclass(frozen=True, slots=True)
class NetworkProfile:
    name: str
    kind: str
    """``lognormal`` (LAN) or ``pareto`` (ad hoc wireless, heavy tail)."""
    floor_ms: float
    scale_ms: float
    shape: float
    """sigma of the lognormal, or alpha of the Pareto."""
    receiver_spread: float
    """sigma of the lognormal per-receiver scale factor (0: all receivers alike)."""
    loss: float
    """Probability that one transmission attempt to one receiver is lost."""
    retransmit_ms: float
    """Time from a lost attempt to the next one (NACK round trip or timeout)."""
    clock_error_ms: float
    """lambda: every physical clock is within this of true time."""
    delay_bound_ms: float
    """delta: the delay bound the physical+linear policy assumes (the seed's synchronous network)."""
    null_after_ms: float
    """The linear-clock policy sends a null message after this long without sending."""

    def receiver_scales(self, processes: int, rng: random.Random) -> list[float]:
        if self.receiver_spread == 0:
            return [1.0] * processes
        return [rng.lognormvariate(0.0, self.receiver_spread) for _ in range(processes)]

    def with_loss(self, loss: float, retransmit_ms: float, name: str) -> NetworkProfile:
        return NetworkProfile(
            name, self.kind, self.floor_ms, self.scale_ms, self.shape, self.receiver_spread,
            loss, retransmit_ms, self.clock_error_ms, self.delay_bound_ms, self.null_after_ms,
        )


LAN = NetworkProfile(
    name="lan",
    kind="lognormal",
    floor_ms=0.2,
    scale_ms=0.3,  # median 0.5 ms, p99 about 1.2 ms
    shape=0.5,
    receiver_spread=0.0,
    loss=0.0,
    retransmit_ms=20.0,
    clock_error_ms=5.0,  # NTP on a LAN: 1 to 10 ms per the seed's own measurements
    delay_bound_ms=5.0,
    null_after_ms=20.0,
)

WIRELESS = NetworkProfile(
    name="wireless",
    kind="pareto",
    floor_ms=2.0,
    scale_ms=8.0,  # Pareto alpha 1.5: median about 15 ms, p99 about 175 ms, p99.9 about 800 ms
    shape=1.5,
    receiver_spread=0.4,
    loss=0.0,
    retransmit_ms=200.0,
    clock_error_ms=10.0,
    delay_bound_ms=250.0,  # a bound about 1% of packets break: the tail is what makes the network ad hoc
    null_after_ms=100.0,
)

LOSSY_WIRELESS = WIRELESS.with_loss(0.05, 200.0, "wireless_loss")

SCENARIOS: dict[str, NetworkProfile] = {p.name: p for p in (LAN, WIRELESS, LOSSY_WIRELESS)}


class Transit:
    """Draws the time a broadcast takes to reach each receiver, retransmissions included.

    Draws are vectorised per broadcast: the group-size sweep sends millions of
    control packets and one numpy call per broadcast is several times cheaper
    than one Python draw per receiver.
    """

    __slots__ = ("profile", "rng", "scales")

    def __init__(self, profile: NetworkProfile, scales: list[float], seed_text: str) -> None:
        self.profile = profile
        self.scales = np.asarray(scales, dtype=float)
        self.rng = np.random.default_rng(list(seed_text.encode()))

    def broadcast(self, sender: int) -> list[float]:
        """Transit times to every process; 0.0 for the sender itself."""
        profile, rng, n = self.profile, self.rng, len(self.scales)
        if profile.kind == "lognormal":
            draw = profile.scale_ms * rng.lognormal(0.0, profile.shape, n)
        else:  # numpy's pareto is Lomax; +1 makes it the classical Pareto with minimum 1
            draw = profile.scale_ms * (rng.pareto(profile.shape, n) + 1.0)
        delay = np.minimum(profile.floor_ms + draw, MAX_DELAY_MS) * self.scales
        if profile.loss:
            # attempts until one gets through is geometric; every lost one costs a retransmit wait
            delay += (rng.geometric(1.0 - profile.loss, n) - 1) * profile.retransmit_ms
        delay[sender] = 0.0
        return delay.tolist()
